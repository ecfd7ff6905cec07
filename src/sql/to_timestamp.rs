//! `to_timestamp(text, template)` and `to_date(text, template)`: text read by Postgres'
//! template patterns (the ones `to_char` writes, [`crate::sql::to_char`]), and
//! `to_timestamp(double precision)`, seconds since 1970-01-01 00:00 UTC.
//!
//! Read as Postgres' `DCH_from_char` does, outside FX mode: blanks before a field are
//! skipped; a number is read to the next non-digit when `FM` is on it or what follows it in
//! the template is not another number (`YYYY-MM`), else exactly its width (`YYYYMMDD`); a
//! separator or blank in the template takes one separator or blank of the text if there is
//! one there; `"quoted"` text skips as many characters; text after the template is ignored.
//! Fields: `Y,YYY` `YYYY` `YYY` `YY` `Y` (fewer than four digits taken nearest 2020), `CC`,
//! `J`, `BC`/`AD`, `MM`, `MONTH`/`MON` (any case), `DAY`/`DY` (read, not used), `DD`,
//! `DDD`, `D`/`Q` (read, not used), `HH`/`HH12` (with `AM`/`PM`, else 1-12), `HH24`, `MI`,
//! `SS`, `SSSS`, `MS`/`US`/`FF1`..`FF6` (digits after the point: `12.3` with `SS.MS` is
//! 300 ms), `TZH`/`TZM`, the ISO week date fields `IYYY` `IYY` `IY` `I` `IW` `ID` `IDDD`,
//! and `WW` (week of the year: its first day) and `W` (week of the month: its first day).
//! A year not given is 1 BC, a month or day 1, and a field read as 0 is not given (Postgres'
//! rules, [`Fields::date`]); ISO and Gregorian date fields do not mix (22007). `TZ`/`OF` as
//! Postgres 15 (only `to_char`). Errors as Postgres': `invalid value "x" for "YYYY"` (22007),
//! `date/time field value out of range` (22008).

use std::sync::Arc;

use chrono::NaiveDate;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Date32Builder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::common::{DataFusionError, Result as DfResult};

use crate::error::{WeirError, sqlstate};

fn err(code: &'static str, msg: impl Into<String>) -> DataFusionError {
    DataFusionError::External(Box::new(WeirError::new(code, msg)))
}

/// The result type of `to_timestamp`: `timestamptz`.
pub fn timestamptz_type() -> DataType {
    crate::sql::types::SqlType::TimestampTz(None).arrow_type()
}

/// `to_timestamp(seconds)` or `to_timestamp(text, template)`.
pub fn to_timestamp(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let mut out = TimestampMicrosecondBuilder::with_capacity(rows);
    match args {
        [secs] => {
            let secs = cast(secs, &DataType::Float64)?;
            for v in secs.as_primitive::<Float64Type>().iter() {
                out.append_option(v.map(epoch_micros).transpose()?);
            }
        }
        // text, template [, the session zone a time without TZH/TZM is a wall-clock time
        // in (added by the planner, `catalog/pg_semantics.rs`)]
        [text, template, zone @ ..] if zone.len() <= 1 => {
            let zone = crate::sql::time_zone::zone_arg(zone.first())?;
            let (text, template) = (
                cast(text, &DataType::Utf8)?,
                cast(template, &DataType::Utf8)?,
            );
            let (text, template) = (text.as_string::<i32>(), template.as_string::<i32>());
            for i in 0..rows {
                if text.is_null(i) || template.is_null(i) {
                    out.append_null();
                    continue;
                }
                let f = read(text.value(i), template.value(i))?;
                let micros = f.micros(text.value(i))?;
                let upper = template.value(i).to_ascii_uppercase();
                let local = !zone.is_utc() && !upper.contains("TZH") && !upper.contains("TZM");
                out.append_value(if local {
                    zone.utc_of_local_us(micros).ok_or_else(|| {
                        err(sqlstate::DATETIME_FIELD_OVERFLOW, "timestamp out of range")
                    })?
                } else {
                    micros
                });
            }
        }
        _ => {
            return Err(err(
                sqlstate::UNDEFINED_FUNCTION,
                "function to_timestamp takes one or two arguments",
            ));
        }
    }
    Ok(Arc::new(out.finish().with_timezone_opt(
        match timestamptz_type() {
            DataType::Timestamp(_, tz) => tz,
            _ => None,
        },
    )))
}

/// `to_date(text, template)`.
pub fn to_date(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let (text, template) = (
        cast(&args[0], &DataType::Utf8)?,
        cast(&args[1], &DataType::Utf8)?,
    );
    let (text, template) = (text.as_string::<i32>(), template.as_string::<i32>());
    let mut out = Date32Builder::with_capacity(rows);
    for i in 0..rows {
        if text.is_null(i) || template.is_null(i) {
            out.append_null();
            continue;
        }
        let f = read(text.value(i), template.value(i))?;
        let date = f.date(text.value(i))?;
        let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
        out.append_value((date - epoch).num_days() as i32);
    }
    Ok(Arc::new(out.finish()))
}

/// Seconds since the epoch as microseconds, rounded; the infinities kept.
fn epoch_micros(secs: f64) -> DfResult<i64> {
    if secs == f64::INFINITY {
        return Ok(i64::MAX);
    }
    if secs == f64::NEG_INFINITY {
        return Ok(i64::MIN);
    }
    let us = (secs * 1e6).round();
    // Postgres' range: 4714-11-24 BC to 294276 AD
    if !(-210_866_803_200e6..9_224_318_016_000e6).contains(&us) {
        return Err(err(
            sqlstate::DATETIME_FIELD_OVERFLOW,
            format!("timestamp out of range: \"{secs}\""),
        ));
    }
    Ok(us as i64)
}

/// What the fields of a text said.
#[derive(Default, Debug)]
struct Fields {
    year: Option<i64>,
    /// digits of the year's field when it had fewer than four (`YY`: 2)
    year_width: Option<usize>,
    century: Option<i64>,
    julian: Option<i64>,
    bc: bool,
    month: Option<i64>,
    day: Option<i64>,
    day_of_year: Option<i64>,
    /// `WW` or `IW` (which one: `iso`)
    week: Option<i64>,
    /// `W`
    week_of_month: Option<i64>,
    /// `ID` (shifted to `D`'s numbering, Sunday = 1, as Postgres does) or `D` (unused)
    weekday: Option<i64>,
    /// the template's date convention: ISO week dates (`IYYY`, `IW`, `ID`, `IDDD`) or
    /// Gregorian (`YYYY`, `MM`, `DD`, `DDD`, `WW`, ...); mixing them is an error
    iso: Option<bool>,
    hour: Option<i64>,
    /// whether the hour was a 12-hour clock's (`HH`, `HH12`)
    clock12: bool,
    pm: Option<bool>,
    minute: i64,
    second: i64,
    seconds_of_day: Option<i64>,
    micros: i64,
    tz_minutes: i64,
}

/// The template's fields, longest first where one is the start of another.
const KEYS: &[&str] = &[
    "Y,YYY", "YYYY", "YYY", "YY", "Y", "IYYY", "IYY", "IY", "IDDD", "ID", "IW", "I", "CC", "J",
    "B.C.", "A.D.", "BC", "AD", "A.M.", "P.M.", "AM", "PM", "MONTH", "MON", "MM", "DAY", "DY",
    "DDD", "DD", "D", "HH24", "HH12", "HH", "MI", "SSSSS", "SSSS", "SS", "MS", "US", "FF1", "FF2",
    "FF3", "FF4", "FF5", "FF6", "TZH", "TZM", "TZ", "OF", "WW", "W", "Q", "RM",
];

/// A field read as a number, and its width when read exactly.
fn numeric_width(key: &str) -> Option<usize> {
    Some(match key {
        "Y,YYY" => 5,
        "YYYY" | "IYYY" | "SSSS" => 4,
        "YYY" | "IYY" | "DDD" | "IDDD" | "MS" => 3,
        "YY" | "IY" | "CC" | "MM" | "DD" | "WW" | "IW" | "HH24" | "HH12" | "HH" | "MI" | "SS"
        | "TZM" => 2,
        "Y" | "I" | "D" | "ID" | "W" | "Q" => 1,
        "SSSSS" => 5,
        "US" => 6,
        "J" => 7,
        "TZH" => 3,
        k if k.starts_with("FF") => k[2..].parse().ok()?,
        _ => return None,
    })
}

pub(crate) const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];
pub(crate) const DAYS: [&str; 7] = [
    "sunday",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
];

enum Node {
    /// a field (and how the template spelled it), with `FM` on it, with `TH` after it
    Key(&'static str, String, bool, bool),
    /// a blank or separator of the template
    Separator,
    /// quoted text or another character: skips as many characters of the text
    Literal(usize),
}

fn nodes(template: &str) -> Vec<Node> {
    let mut out = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        let mut fm = false;
        let mut r = rest;
        while r.len() >= 2
            && (r[..2].eq_ignore_ascii_case("FM") || r[..2].eq_ignore_ascii_case("FX"))
        {
            fm |= r[..2].eq_ignore_ascii_case("FM");
            r = &r[2..];
        }
        if let Some(key) = KEYS.iter().find(|k| {
            r.len() >= k.len()
                && r.is_char_boundary(k.len())
                && r[..k.len()].eq_ignore_ascii_case(k)
        }) {
            let spelled = r[..key.len()].to_owned();
            rest = &r[key.len()..];
            // suffixes: an ordinal's letters (`5th`) are skipped after the number
            let mut th = false;
            for suffix in ["TH", "SP"] {
                if rest.len() >= 2
                    && rest.is_char_boundary(2)
                    && rest[..2].eq_ignore_ascii_case(suffix)
                {
                    th |= suffix == "TH";
                    rest = &rest[2..];
                }
            }
            out.push(Node::Key(key, spelled, fm, th));
            continue;
        }
        if r.len() < rest.len() {
            rest = r;
            continue;
        }
        let c = rest.chars().next().unwrap_or(' ');
        if c == '"' {
            let body = &rest[1..];
            let end = body.find('"').unwrap_or(body.len());
            out.push(Node::Literal(body[..end].chars().count()));
            rest = body.get(end + 1..).unwrap_or("");
        } else if c == '\\' && rest.len() > 1 {
            out.push(Node::Literal(1));
            let next = rest[1..].chars().next().map_or(0, char::len_utf8);
            rest = &rest[1 + next..];
        } else {
            out.push(if c.is_alphanumeric() {
                Node::Literal(1)
            } else {
                Node::Separator
            });
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn invalid(value: &str, key: &str, detail: &str) -> DataFusionError {
    DataFusionError::External(Box::new(
        WeirError::new(
            sqlstate::INVALID_DATETIME_FORMAT,
            format!("invalid value \"{value}\" for \"{key}\""),
        )
        .with_detail(detail),
    ))
}

fn read(text: &str, template: &str) -> DfResult<Fields> {
    let nodes = nodes(template);
    let mut f = Fields::default();
    let mut s = text;
    for (n, node) in nodes.iter().enumerate() {
        // the template's fields past the end of the text are not read (as Postgres)
        if s.is_empty() {
            break;
        }
        match node {
            Node::Separator => {
                if let Some(c) = s.chars().next()
                    && !c.is_alphanumeric()
                {
                    s = &s[c.len_utf8()..];
                }
            }
            Node::Literal(k) => {
                let skip: usize = s.chars().take(*k).map(char::len_utf8).sum();
                s = &s[skip..];
            }
            Node::Key(upper, key, fm, th) => {
                s = s.trim_start();
                let upper = *upper;
                let key = key.as_str();
                if let Some(width) = numeric_width(upper) {
                    // read to the next non-digit, or exactly the width before another number
                    let next_is_number = matches!(nodes.get(n + 1),
                        Some(Node::Key(k, ..)) if numeric_width(k).is_some());
                    let greedy = *fm || !next_is_number;
                    let (v, digits, rest) = number(s, key, upper, width, greedy)?;
                    s = rest;
                    if *th {
                        let letters: usize = s
                            .chars()
                            .take(2)
                            .take_while(|c| c.is_alphabetic())
                            .map(char::len_utf8)
                            .sum();
                        s = &s[letters..];
                    }
                    set_number(&mut f, upper, v, digits)?;
                    continue;
                }
                match upper {
                    "MONTH" | "MON" => {
                        let (i, rest) = name(s, &MONTHS, upper == "MON").ok_or_else(|| {
                            invalid(
                                s,
                                key,
                                "The given value did not match any of the allowed values for this field.",
                            )
                        })?;
                        set_mode(&mut f, false)?;
                        f.month = Some(i as i64 + 1);
                        s = rest;
                    }
                    "DAY" | "DY" => {
                        let (_, rest) = name(s, &DAYS, upper == "DY").ok_or_else(|| {
                            invalid(
                                s,
                                key,
                                "The given value did not match any of the allowed values for this field.",
                            )
                        })?;
                        s = rest;
                    }
                    "AM" | "PM" | "A.M." | "P.M." => {
                        let (pm, rest) = marker(
                            s,
                            key,
                            upper.len(),
                            [("AM", false), ("A.M.", false), ("PM", true), ("P.M.", true)],
                        )?;
                        f.pm = Some(pm);
                        s = rest;
                    }
                    "BC" | "AD" | "B.C." | "A.D." => {
                        let (bc, rest) = marker(
                            s,
                            key,
                            upper.len(),
                            [("AD", false), ("A.D.", false), ("BC", true), ("B.C.", true)],
                        )?;
                        f.bc = bc;
                        s = rest;
                    }
                    "TZ" | "OF" => {
                        return Err(err(
                            sqlstate::FEATURE_NOT_SUPPORTED,
                            format!("formatting field \"{key}\" is only supported in to_char"),
                        ));
                    }
                    _ => {
                        return Err(err(
                            sqlstate::FEATURE_NOT_SUPPORTED,
                            format!(
                                "formatting field \"{key}\" is not supported in to_timestamp and to_date here"
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(f)
}

/// A two-way marker (`AM`/`PM`, `BC`/`AD`, dotted or not, any case) `width` long at the
/// start of `s`: the value its spelling in `forms` gives, and the rest.
fn marker<'a>(
    s: &'a str,
    key: &str,
    width: usize,
    forms: [(&str, bool); 4],
) -> DfResult<(bool, &'a str)> {
    let got = s.get(..width).unwrap_or("").to_ascii_uppercase();
    match forms.iter().find(|(form, _)| *form == got) {
        Some((_, v)) => Ok((*v, &s[width..])),
        None => Err(invalid(
            s,
            key,
            "The given value did not match any of the allowed values for this field.",
        )),
    }
}

/// A full or three-letter name (any case) at the start of `s`: its index and the rest.
fn name<'a>(s: &'a str, names: &[&str], abbreviated: bool) -> Option<(usize, &'a str)> {
    names.iter().enumerate().find_map(|(i, n)| {
        let n = if abbreviated { &n[..3] } else { n };
        let head = s.get(..n.len())?;
        head.eq_ignore_ascii_case(n).then(|| (i, &s[n.len()..]))
    })
}

/// A number at the start of `s` (a sign allowed where a field may be negative): its value,
/// how many digits it had, the rest.
fn number<'a>(
    s: &'a str,
    shown_key: &str,
    key: &str,
    width: usize,
    greedy: bool,
) -> DfResult<(i64, usize, &'a str)> {
    let signed = matches!(key, "TZH" | "J" | "YYYY" | "Y,YYY");
    let b = s.as_bytes();
    let mut i = 0;
    let mut negative = false;
    if signed && i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        negative = b[i] == b'-';
        i += 1;
    }
    let start = i;
    let limit = if greedy {
        usize::MAX
    } else {
        start + width - usize::from(key == "TZH")
    };
    while i < b.len() && i < limit && (b[i].is_ascii_digit() || (key == "Y,YYY" && b[i] == b',')) {
        i += 1;
    }
    let digits: String = s[start..i].chars().filter(|c| *c != ',').collect();
    if digits.is_empty() {
        let shown: String = s.chars().take(width.max(1)).collect();
        return Err(invalid(&shown, shown_key, "Value must be an integer."));
    }
    let v: i64 = digits.parse().map_err(|_| {
        err(
            sqlstate::DATETIME_FIELD_OVERFLOW,
            format!("value for \"{shown_key}\" in source string is out of range"),
        )
    })?;
    Ok((if negative { -v } else { v }, digits.len(), &s[i..]))
}

/// The date convention a field belongs to (see [`Fields::iso`]).
fn set_mode(f: &mut Fields, iso: bool) -> DfResult<()> {
    match f.iso {
        Some(m) if m != iso => Err(DataFusionError::External(Box::new(
            WeirError::new(
                sqlstate::INVALID_DATETIME_FORMAT,
                "invalid combination of date conventions",
            )
            .with_hint(
                "Do not mix Gregorian and ISO week date conventions in a formatting template.",
            ),
        ))),
        _ => {
            f.iso = Some(iso);
            Ok(())
        }
    }
}

fn set_number(f: &mut Fields, key: &str, v: i64, digits: usize) -> DfResult<()> {
    match key {
        "Y,YYY" | "YYYY" | "YYY" | "YY" | "Y" | "MM" | "DD" | "DDD" | "D" | "WW" | "W" => {
            set_mode(f, false)?
        }
        "IYYY" | "IYY" | "IY" | "I" | "IW" | "ID" | "IDDD" => set_mode(f, true)?,
        _ => {}
    }
    match key {
        "Y,YYY" | "YYYY" | "IYYY" => f.year = Some(v),
        "YYY" | "YY" | "Y" | "IYY" | "IY" | "I" => {
            f.year = Some(v);
            f.year_width = Some(digits.min(key.len()));
        }
        "CC" => f.century = Some(v),
        "J" => f.julian = Some(v),
        "MM" => f.month = Some(v),
        "DD" => f.day = Some(v),
        "DDD" | "IDDD" => f.day_of_year = Some(v),
        "WW" | "IW" => f.week = Some(v),
        "W" => f.week_of_month = Some(v),
        "D" => f.weekday = Some(v),
        // Monday = 1 shifted to Sunday = 1 (`ID` 7 and 8 are Sunday)
        "ID" => f.weekday = Some(if v + 1 > 7 { 1 } else { v + 1 }),
        "HH" | "HH12" => {
            f.hour = Some(v);
            f.clock12 = true;
        }
        "HH24" => f.hour = Some(v),
        "MI" => f.minute = v,
        "SS" => f.second = v,
        "SSSS" | "SSSSS" => f.seconds_of_day = Some(v),
        // digits after the point: `3` is 300 ms, `003` is 3 ms
        "MS" => f.micros = v * 10i64.pow(3u32.saturating_sub(digits as u32)) * 1000,
        "US" => f.micros = v * 10i64.pow(6u32.saturating_sub(digits as u32)),
        k if k.starts_with("FF") => {
            f.micros = v * 10i64.pow(6u32.saturating_sub(digits as u32));
        }
        "TZH" => f.tz_minutes += v * 60,
        "TZM" => f.tz_minutes += if f.tz_minutes < 0 { -v } else { v },
        _ => {} // Q: read, not used (as Postgres)
    }
    Ok(())
}

impl Fields {
    fn out_of_range(text: &str) -> DataFusionError {
        err(
            sqlstate::DATETIME_FIELD_OVERFLOW,
            format!("date/time field value out of range: \"{text}\""),
        )
    }

    /// The date, in the order Postgres' `do_to_timestamp` applies the fields: the year (or
    /// century), `J`, the week (`IW` with `ID` in ISO week dates; `WW` as a day of the year),
    /// `W` (as a day of the month), `DD`, `MM`, and the day of the year where the month or
    /// the day is still unset. A field read as 0 is unset, as in Postgres.
    fn date(&self, text: &str) -> DfResult<NaiveDate> {
        use chrono::Datelike;
        let given = |v: Option<i64>| v.filter(|v| *v != 0);
        let mut year = match (self.year, self.century) {
            (Some(y), _) => match self.year_width {
                // nearest 2020
                Some(_) if y < 70 => y + 2000,
                Some(_) if y < 100 => y + 1900,
                Some(_) if y < 520 => y + 2000,
                Some(_) if y < 1000 => y + 1000,
                _ => y,
            },
            (None, Some(cc)) if cc > 0 => (cc - 1) * 100 + 1,
            (None, Some(cc)) => cc * 100,
            // no year: 1 BC, Postgres' year 0
            (None, None) => 0,
        };
        if self.bc && (self.year.is_some() || self.century.is_some()) {
            year = 1 - year;
        }
        let (mut month, mut day) = (1i64, 1i64);
        let set = |d: NaiveDate, year: &mut i64, month: &mut i64, day: &mut i64| {
            (*year, *month, *day) = (d.year() as i64, d.month() as i64, d.day() as i64);
        };
        let iso_week_1 = |year: i64| -> DfResult<NaiveDate> {
            i32::try_from(year)
                .ok()
                .and_then(|y| NaiveDate::from_isoywd_opt(y, 1, chrono::Weekday::Mon))
                .ok_or_else(|| Self::out_of_range(text))
        };
        let plus_days = |d: NaiveDate, n: i64| -> DfResult<NaiveDate> {
            chrono::Duration::try_days(n)
                .and_then(|n| d.checked_add_signed(n))
                .ok_or_else(|| Self::out_of_range(text))
        };
        if let Some(j) = self.julian {
            // Julian day 2440588 is 1970-01-01
            let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
            set(
                plus_days(epoch, j - 2_440_588)?,
                &mut year,
                &mut month,
                &mut day,
            );
        }
        let iso = self.iso == Some(true);
        let mut day_of_year = given(self.day_of_year);
        if let Some(week) = given(self.week) {
            if iso {
                // the week's Monday, or the day `ID` names (Sunday = 1 here)
                let monday = plus_days(iso_week_1(year)?, (week - 1) * 7)?;
                let offset = match given(self.weekday) {
                    Some(1) => 6,
                    Some(d) => d - 2,
                    None => 0,
                };
                set(plus_days(monday, offset)?, &mut year, &mut month, &mut day);
            } else {
                day_of_year = Some((week - 1) * 7 + 1);
            }
        }
        let mut dd = given(self.day);
        if let Some(w) = given(self.week_of_month) {
            dd = Some((w - 1) * 7 + 1);
        }
        if let Some(dd) = dd {
            day = dd;
        }
        if let Some(mm) = given(self.month) {
            month = mm;
        }
        if let Some(ddd) = day_of_year
            && (month <= 1 || day <= 1)
        {
            if year == 0 && !self.bc {
                return Err(err(
                    sqlstate::INVALID_DATETIME_FORMAT,
                    "cannot calculate day of year without year information",
                ));
            }
            if iso {
                let d = plus_days(iso_week_1(year)?, ddd - 1)?;
                set(d, &mut year, &mut month, &mut day);
            } else {
                let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
                let lengths = [
                    31,
                    if leap { 29 } else { 28 },
                    31,
                    30,
                    31,
                    30,
                    31,
                    31,
                    30,
                    31,
                    30,
                    31,
                ];
                // the month the day of the year falls in (13 past the year's end) and the
                // days before it
                let (mut m, mut before) = (1i64, 0i64);
                while m <= 12 && ddd > before + lengths[m as usize - 1] {
                    before += lengths[m as usize - 1];
                    m += 1;
                }
                if month <= 1 {
                    month = m;
                }
                if day <= 1 {
                    day = ddd - before;
                }
            }
        }
        let year = i32::try_from(year).map_err(|_| Self::out_of_range(text))?;
        if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
            return Err(Self::out_of_range(text));
        }
        NaiveDate::from_ymd_opt(year, month as u32, day as u32)
            .ok_or_else(|| Self::out_of_range(text))
    }

    fn micros(&self, text: &str) -> DfResult<i64> {
        let date = self.date(text)?;
        let mut hour = self.hour.unwrap_or(0);
        if self.clock12 || self.pm.is_some() {
            if !(1..=12).contains(&hour) {
                return Err(DataFusionError::External(Box::new(
                    WeirError::new(
                        sqlstate::DATETIME_FIELD_OVERFLOW,
                        format!("hour \"{hour}\" is invalid for the 12-hour clock"),
                    )
                    .with_hint("Use the 24-hour clock, or give an hour between 1 and 12."),
                )));
            }
            let pm = self.pm == Some(true);
            if pm && hour < 12 {
                hour += 12;
            } else if !pm && hour == 12 {
                hour = 0;
            }
        }
        let time = match self.seconds_of_day {
            Some(s) => s * 1_000_000,
            None => {
                if !(0..24).contains(&hour)
                    || !(0..60).contains(&self.minute)
                    || !(0..=60).contains(&self.second)
                {
                    return Err(Self::out_of_range(text));
                }
                ((hour * 60 + self.minute) * 60 + self.second) * 1_000_000
            }
        } + self.micros;
        let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
        let days = (date - epoch).num_days();
        Ok(days * 86_400_000_000 + time - self.tz_minutes * 60_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(text: &str, template: &str) -> String {
        let micros = read(text, template)
            .and_then(|f| f.micros(text))
            .map_err(|e| e.to_string());
        match micros {
            Ok(us) => chrono::DateTime::from_timestamp_micros(us)
                .map(|t| t.naive_utc().to_string())
                .unwrap_or_default(),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn templates_read_as_postgres_reads_them() {
        assert_eq!(ts("05 Dec 2000", "DD Mon YYYY"), "2000-12-05 00:00:00");
        assert_eq!(ts("20001205", "YYYYMMDD"), "2000-12-05 00:00:00");
        assert_eq!(
            ts("2000-12-05 01:45:30 PM", "YYYY-MM-DD HH:MI:SS AM"),
            "2000-12-05 13:45:30"
        );
        assert_eq!(ts("12 am", "HH12 pm"), "0000-01-01 00:00:00");
        assert_eq!(ts("12.3", "SS.MS"), "0000-01-01 00:00:12.300");
        assert_eq!(ts("99-1-2", "YY-MM-DD"), "1999-01-02 00:00:00");
        assert_eq!(ts("2024 060", "YYYY DDD"), "2024-02-29 00:00:00");
        assert_eq!(ts("10:00 -03:30", "HH24:MI TZH:TZM"), "0000-01-01 13:30:00");
        assert!(ts("2024-02-30", "YYYY-MM-DD").contains("out of range"));
        assert!(ts("abcd", "YYYY").contains("invalid value \"abcd\" for \"YYYY\""));
        assert!(ts("13", "HH").contains("12-hour clock"));
        assert_eq!(ts("2020-53-7", "IYYY-IW-ID"), "2021-01-03 00:00:00");
        assert_eq!(ts("2024-364", "IYYY-IDDD"), "2024-12-29 00:00:00");
        assert_eq!(ts("2024 10", "YYYY WW"), "2024-03-04 00:00:00");
        assert_eq!(ts("2024-03 3", "YYYY-MM W"), "2024-03-15 00:00:00");
        assert_eq!(ts("2024 03 060", "YYYY MM DDD"), "2024-03-29 00:00:00");
        assert!(ts("2024-01", "YYYY-IW").contains("invalid combination of date conventions"));
        assert!(ts("060", "DDD").contains("without year information"));
    }
}
