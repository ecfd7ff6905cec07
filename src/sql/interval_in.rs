//! Postgres' interval input (`interval_in`, `DecodeInterval` and `DecodeISO8601Interval`):
//! text to months, days and microseconds.
//!
//! Forms read: `[@] {number [unit] | [±]h:m[:s[.f]]} ... [ago]` with Postgres' unit
//! spellings (`y`, `yr`, `years`, `mon`, `w`, `d`, `h`, `hrs`, `m`, `min`, `s`, `secs`,
//! `ms`, `us`, `decade`, `century`, `millennium`, ... any case, the number and unit
//! written together or apart), each field with its own sign (`-1 day +2 hours`), a number
//! without a unit before a time being days (`1 02:03:04`) and a last one seconds; and ISO
//! 8601 with designators (`P1Y2M3DT4H5M6S`, `PT1.5H`, `P1W`). Fractions carry down as
//! Postgres carries them: a fraction of a year to months (rounded), of a month to days (30)
//! and time, of a week to days and time, of a day to time. `ago` negates the whole.
//! Anything else is `None` (the caller reports Postgres' 22007).

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    pub months: i32,
    pub days: i32,
    pub micros: i64,
}

#[derive(Debug, Clone, Copy)]
enum Unit {
    Micro,
    Milli,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
    Decade,
    Century,
    Millennium,
}

fn unit(word: &str) -> Option<Unit> {
    Some(match word.to_ascii_lowercase().as_str() {
        "microsecond" | "microseconds" | "us" | "usec" | "usecs" | "useconds" | "microsecon" => {
            Unit::Micro
        }
        "millisecond" | "milliseconds" | "ms" | "msec" | "msecs" | "mseconds" | "millisecon" => {
            Unit::Milli
        }
        "s" | "sec" | "secs" | "second" | "seconds" => Unit::Second,
        "m" | "min" | "mins" | "minute" | "minutes" => Unit::Minute,
        "h" | "hr" | "hrs" | "hour" | "hours" => Unit::Hour,
        "d" | "day" | "days" => Unit::Day,
        "w" | "week" | "weeks" => Unit::Week,
        "mon" | "mons" | "month" | "months" => Unit::Month,
        "y" | "yr" | "yrs" | "year" | "years" => Unit::Year,
        "dec" | "decs" | "decade" | "decades" => Unit::Decade,
        "c" | "cent" | "century" | "centuries" => Unit::Century,
        "mil" | "mils" | "millennia" | "millennium" => Unit::Millennium,
        _ => return None,
    })
}

const MICROS_PER_DAY: f64 = 86_400_000_000.0;

impl Interval {
    /// Add `value` (its whole part and its fraction, both with the value's sign) of `unit`.
    fn add(&mut self, whole: i64, frac: f64, unit: Unit) -> Option<()> {
        let micros = |us_per: i64| -> Option<i64> {
            whole
                .checked_mul(us_per)?
                .checked_add((frac * us_per as f64).round() as i64)
        };
        // a fraction of `per` days: whole days, the rest as time (Postgres' AdjustFractDays)
        let fract_days = |this: &mut Interval, per: f64| -> Option<()> {
            let days = frac * per;
            let whole_days = days.trunc();
            this.days = this.days.checked_add(whole_days as i32)?;
            this.micros = this
                .micros
                .checked_add(((days - whole_days) * MICROS_PER_DAY).round() as i64)?;
            Some(())
        };
        let months = |this: &mut Interval, per: i64| -> Option<()> {
            let m = whole
                .checked_mul(per)?
                .checked_add((frac * per as f64).round_ties_even() as i64)?;
            this.months = this.months.checked_add(i32::try_from(m).ok()?)?;
            Some(())
        };
        match unit {
            Unit::Micro => self.micros = self.micros.checked_add(micros(1)?)?,
            Unit::Milli => self.micros = self.micros.checked_add(micros(1_000)?)?,
            Unit::Second => self.micros = self.micros.checked_add(micros(1_000_000)?)?,
            Unit::Minute => self.micros = self.micros.checked_add(micros(60_000_000)?)?,
            Unit::Hour => self.micros = self.micros.checked_add(micros(3_600_000_000)?)?,
            Unit::Day => {
                self.days = self.days.checked_add(i32::try_from(whole).ok()?)?;
                self.micros = self
                    .micros
                    .checked_add((frac * MICROS_PER_DAY).round() as i64)?;
            }
            Unit::Week => {
                let d = whole.checked_mul(7)?;
                self.days = self.days.checked_add(i32::try_from(d).ok()?)?;
                fract_days(self, 7.0)?;
            }
            Unit::Month => {
                self.months = self.months.checked_add(i32::try_from(whole).ok()?)?;
                fract_days(self, 30.0)?;
            }
            Unit::Year => months(self, 12)?,
            Unit::Decade => months(self, 120)?,
            Unit::Century => months(self, 1_200)?,
            Unit::Millennium => months(self, 12_000)?,
        }
        Some(())
    }
}

/// `[±]digits[.digits]` as its whole part and its fraction, both signed.
fn number(text: &str) -> Option<(i64, f64)> {
    let (negative, body) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: i64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let fraction: f64 = if frac.is_empty() {
        0.0
    } else {
        format!("0.{frac}").parse().ok()?
    };
    Some(if negative {
        (-whole, -fraction)
    } else {
        (whole, fraction)
    })
}

#[derive(Debug)]
enum Token<'a> {
    Number(&'a str),
    Time(&'a str),
    Word(&'a str),
}

fn tokens(text: &str) -> Option<Vec<Token<'_>>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || c == b'.' || c == b'-' || c == b'+' {
            let start = i;
            i += 1;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.' || b[i] == b':') {
                i += 1;
            }
            let t = &text[start..i];
            out.push(if t.contains(':') {
                Token::Time(t)
            } else {
                Token::Number(t)
            });
        } else if c.is_ascii_alphabetic() {
            let start = i;
            while i < b.len() && b[i].is_ascii_alphabetic() {
                i += 1;
            }
            out.push(Token::Word(&text[start..i]));
        } else if c == b'@' && out.is_empty() {
            i += 1;
        } else {
            return None;
        }
    }
    Some(out)
}

/// `[±]h:m[:s[.f]]`, the sign over all of it.
fn time(text: &str) -> Option<i64> {
    let (negative, body) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let parts: Vec<&str> = body.split(':').collect();
    let (h, m, s) = match parts.as_slice() {
        [h, m] => (*h, *m, "0"),
        [h, m, s] => (*h, *m, *s),
        _ => return None,
    };
    let int = |t: &str| -> Option<i64> {
        (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse().ok())
            .flatten()
    };
    let (h, m) = (int(h)?, int(m)?);
    let (sw, sf) = number(s)?;
    if m > 59 || !(0..60).contains(&sw) || s.starts_with(['-', '+']) {
        return None;
    }
    let us = h
        .checked_mul(3_600_000_000)?
        .checked_add(m * 60_000_000)?
        .checked_add(sw * 1_000_000 + (sf * 1e6).round() as i64)?;
    Some(if negative { -us } else { us })
}

/// Postgres' interval input, or `None` where Postgres would refuse the text.
pub fn parse(text: &str) -> Option<Interval> {
    let t = text.trim();
    if let Some(iso) = t.strip_prefix(['P', 'p']) {
        return iso8601(iso);
    }
    let toks = tokens(t)?;
    let mut out = Interval::default();
    let mut ago = false;
    let mut any = false;
    let mut i = 0;
    while i < toks.len() {
        match toks[i] {
            Token::Number(n) => {
                let (whole, frac) = number(n)?;
                let (unit, used) = match toks.get(i + 1) {
                    Some(Token::Word(w)) if !w.eq_ignore_ascii_case("ago") => (unit(w)?, 2),
                    Some(Token::Time(_)) => (Unit::Day, 1),
                    Some(Token::Word(_)) | None => (Unit::Second, 1),
                    Some(Token::Number(_)) => return None,
                };
                out.add(whole, frac, unit)?;
                i += used;
            }
            Token::Time(tm) => {
                out.micros = out.micros.checked_add(time(tm)?)?;
                i += 1;
            }
            Token::Word(w) if w.eq_ignore_ascii_case("ago") && i + 1 == toks.len() && any => {
                ago = true;
                i += 1;
            }
            Token::Word(_) => return None,
        }
        any = true;
    }
    if !any {
        return None;
    }
    if ago {
        out = Interval {
            months: out.months.checked_neg()?,
            days: out.days.checked_neg()?,
            micros: out.micros.checked_neg()?,
        };
    }
    Some(out)
}

/// A text column read as intervals (NULL stays NULL), straight into arrow's month-day-nano
/// values: `Err(row)` at the first text Postgres would refuse (or past arrow's ±292 years
/// of time). One parse per value: COPY, casts of text and parameters read through here.
pub fn to_array(
    texts: &datafusion::arrow::array::StringArray,
) -> Result<datafusion::arrow::array::IntervalMonthDayNanoArray, usize> {
    use datafusion::arrow::datatypes::IntervalMonthDayNano;
    texts
        .iter()
        .enumerate()
        .map(|(row, t)| match t {
            None => Ok(None),
            Some(t) => parse(t)
                .and_then(|iv| {
                    Some(IntervalMonthDayNano::new(
                        iv.months,
                        iv.days,
                        iv.micros.checked_mul(1000)?,
                    ))
                })
                .map(Some)
                .ok_or(row),
        })
        .collect()
}

/// ISO 8601 with designators, after its `P`: `1Y2M3W4DT5H6M7.5S`.
fn iso8601(text: &str) -> Option<Interval> {
    let mut out = Interval::default();
    let mut in_time = false;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix(['T', 't']) {
            if in_time || r.is_empty() {
                return None;
            }
            in_time = true;
            rest = r;
            continue;
        }
        let end = rest
            .find(|c: char| c.is_ascii_alphabetic())
            .filter(|&e| e > 0)?;
        let (whole, frac) = number(&rest[..end])?;
        let designator = rest[end..].chars().next()?.to_ascii_uppercase();
        let unit = match (in_time, designator) {
            (false, 'Y') => Unit::Year,
            (false, 'M') => Unit::Month,
            (false, 'W') => Unit::Week,
            (false, 'D') => Unit::Day,
            (true, 'H') => Unit::Hour,
            (true, 'M') => Unit::Minute,
            (true, 'S') => Unit::Second,
            _ => return None,
        };
        out.add(whole, frac, unit)?;
        rest = &rest[end + 1..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(months: i32, days: i32, micros: i64) -> Option<Interval> {
        Some(Interval {
            months,
            days,
            micros,
        })
    }

    const H: i64 = 3_600_000_000;

    #[test]
    fn reads_what_postgres_reads() {
        assert_eq!(parse("1 day 2 hours"), iv(0, 1, 2 * H));
        assert_eq!(parse("-1 day +2 hours"), iv(0, -1, 2 * H));
        assert_eq!(parse("1 day -02:00"), iv(0, 1, -2 * H));
        assert_eq!(
            parse("1y 2mon 3d 4h 5m 6s"),
            iv(14, 3, 4 * H + 5 * 60_000_000 + 6_000_000)
        );
        assert_eq!(
            parse("1 2:03:04"),
            iv(0, 1, 2 * H + 3 * 60_000_000 + 4_000_000)
        );
        assert_eq!(parse("100"), iv(0, 0, 100_000_000));
        assert_eq!(parse("@ 1 day ago"), iv(0, -1, 0));
        assert_eq!(parse("1.5 months"), iv(1, 15, 0));
        assert_eq!(parse("1.5 days"), iv(0, 1, 12 * H));
        assert_eq!(parse("0.5 years"), iv(6, 0, 0));
        assert_eq!(parse("1.5 weeks"), iv(0, 10, 12 * H));
        assert_eq!(parse("2 centuries 1 millennium"), iv(14_400, 0, 0));
        assert_eq!(
            parse("P1Y2M3DT4H5M6S"),
            iv(14, 3, 4 * H + 5 * 60_000_000 + 6_000_000)
        );
        assert_eq!(parse("PT1.5H"), iv(0, 0, H + H / 2));
        assert_eq!(parse("P-1D"), iv(0, -1, 0));
        assert_eq!(
            parse("1:30:15.5"),
            iv(0, 0, H + 30 * 60_000_000 + 15_500_000)
        );
        for bad in [
            "",
            "-P1D",
            "P",
            "PT",
            "1 2",
            "1 fortnight",
            "ago",
            "1:75",
            "1 day ago ago",
            "x",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }
}
