//! Postgres' input text of dates and timestamps in the form arrow's cast reads: Postgres
//! takes `2024-01-01 10:00` (no seconds), `9:05` (one-digit hour), `epoch`, and for
//! `timestamp` (without time zone) ignores a zone written after the time, where arrow
//! refuses the first three and converts the last to UTC; and `infinity` / `-infinity`, which
//! arrow has no text for ([`with_infinities`]), and a trailing era (`BC`, `AD`; arrow reads
//! no year before 1 in a timestamp: a BC year is read whole 400-year cycles later and moved
//! back), `now`, `today`, `tomorrow` and `yesterday`, and `24:00` (the next day's midnight). Every path that turns text into a date or
//! timestamp (casts in queries, INSERT literals, COPY) passes it through here.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, StringArray, StringBuilder,
};
use datafusion::arrow::buffer::BooleanBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Int64Type};

/// The text arrow should read for Postgres input `s`, or None to read `s` as it is.
/// `keep_zone`: the target is `timestamptz` (a zone shifts the time); else a zone is
/// ignored, as Postgres does for `timestamp` and `date`.
pub fn normalize(s: &str, keep_zone: bool) -> Option<String> {
    normalize_to(s, keep_zone, false)
}

/// [`normalize`] for a `date`: a time after the date is read and ignored (more than six
/// fractional digits are not rounded into the next day).
pub fn normalize_date(s: &str) -> Option<String> {
    normalize_to(s, false, true)
}

fn normalize_to(s: &str, keep_zone: bool, date_only: bool) -> Option<String> {
    let t = s.trim();
    // anything but ISO 8601's `YYYY-MM-DD...`: Postgres' other spellings, written as ISO
    if !iso_date_prefix(t.as_bytes())
        && let Some(iso) = free_form(t)
    {
        return normalize_to(&iso, keep_zone, date_only).or(Some(iso));
    }
    // `... BC` / `... AD`: read without the era, a BC year moved into the common era by
    // whole 400-year cycles (the calendar repeats), moved back by [`with_infinities`]
    if let Some((body, bc)) = era(t) {
        let body = match bc {
            false => body.to_owned(),
            true => {
                let cycles = bc_cycles(body)?;
                let year: i64 = body.get(..4)?.parse().ok()?;
                format!("{:04}{}", 1 - year + 400 * cycles, &body[4..])
            }
        };
        return normalize_to(&body, keep_zone, date_only).or(Some(body));
    }
    if t.eq_ignore_ascii_case("epoch") {
        return Some("1970-01-01T00:00:00".into());
    }
    // `allballs` is midnight (`2024-01-01 allballs`)
    if let Some(at) = t.to_ascii_lowercase().find("allballs") {
        let spelled = format!("{}00:00:00{}", &t[..at], &t[at + "allballs".len()..]);
        return normalize_to(&spelled, keep_zone, date_only).or(Some(spelled));
    }
    // the moving words, read when the text is (Postgres reads a literal of them once, when
    // the statement is parsed): the time now, midnight today, tomorrow, yesterday (UTC, the
    // session's zone)
    let now = chrono::Utc::now().naive_utc();
    let midnight = |days: i64| {
        (now.date() + chrono::Duration::days(days))
            .format("%Y-%m-%dT00:00:00")
            .to_string()
    };
    match t.to_ascii_lowercase().as_str() {
        "now" => return Some(now.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()),
        "today" => return Some(midnight(0)),
        "tomorrow" => return Some(midnight(1)),
        "yesterday" => return Some(midnight(-1)),
        _ => {}
    }
    // read as a placeholder, replaced by the infinity after the cast: every caller that
    // casts what this returns applies [`with_infinities`] to the result
    if infinity(t).is_some() {
        return Some("1970-01-01".into());
    }
    let b = t.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b.get(r.clone())
            .is_some_and(|x| !x.is_empty() && x.iter().all(u8::is_ascii_digit))
    };
    // YYYY-MM-DD
    if !(digits(0..4)
        && b.get(4) == Some(&b'-')
        && digits(5..7)
        && b.get(7) == Some(&b'-')
        && digits(8..10))
    {
        return None;
    }
    let date = &t[..10];
    if b.len() == 10 {
        return (t.len() != s.len()).then(|| date.to_owned());
    }
    if !matches!(b[10], b' ' | b'T' | b't') {
        return None;
    }
    let rest = t[11..].trim_start();
    let r = rest.as_bytes();
    // one-digit minutes or seconds (`10:5`): written with two digits, then read
    let time_len = r
        .iter()
        .take_while(|c| c.is_ascii_digit() || **c == b':' || **c == b'.')
        .count();
    if let Some(p) = padded_time(&rest[..time_len]) {
        let spelled = format!("{date} {p}{}", &rest[time_len..]);
        return normalize_to(&spelled, keep_zone, date_only).or(Some(spelled));
    }
    // H or HH, then :MM
    let h_len = r.iter().take_while(|c| c.is_ascii_digit()).count();
    if !(1..=2).contains(&h_len) || r.get(h_len) != Some(&b':') {
        return None;
    }
    let m_at = h_len + 1;
    if !(r.len() >= m_at + 2 && r[m_at..m_at + 2].iter().all(u8::is_ascii_digit)) {
        return None;
    }
    let mut end = m_at + 2;
    let mut seconds: &str = ":00";
    if r.get(end) == Some(&b':') {
        let s_len = r[end + 1..]
            .iter()
            .take_while(|c| c.is_ascii_digit() || **c == b'.')
            .count();
        if s_len == 0 {
            return None;
        }
        seconds = &rest[end..end + 1 + s_len];
        end += 1 + s_len;
    }
    let zone = rest[end..].trim();
    // more than six fractional digits: rounded to microseconds, half to even, as Postgres
    // rounds (arrow would cut them off)
    if let Some((cut, up)) = round_fraction(seconds).filter(|_| !date_only) {
        let local = chrono::NaiveDateTime::parse_from_str(
            &format!("{date} {}:{}{cut}", &rest[..h_len], &rest[m_at..m_at + 2]),
            "%Y-%m-%d %H:%M:%S%.f",
        )
        .ok()?;
        let local = match up {
            true => local.checked_add_signed(chrono::Duration::microseconds(1))?,
            false => local,
        };
        let mut out = local.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
        if keep_zone && !zone.is_empty() {
            out.push(' ');
            out.push_str(zone);
        }
        return normalize_to(&out, keep_zone, date_only).or(Some(out));
    }
    // a zone by name (`America/New_York`, `PDT`): its offset at that wall-clock time
    let named;
    let zone = match keep_zone {
        true => match named_zone_offset(date, &rest[..h_len], &rest[m_at..m_at + 2], seconds, zone)
        {
            Some(offset) => {
                named = offset;
                named.as_str()
            }
            None => zone,
        },
        false => zone,
    };
    // `24:00[:00]` is the next day's midnight, as Postgres reads it
    if &rest[..h_len] == "24"
        && &rest[m_at..m_at + 2] == "00"
        && seconds
            .trim_start_matches(':')
            .bytes()
            .all(|c| c == b'0' || c == b'.')
    {
        let next = chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d")
            .ok()?
            .succ_opt()?;
        let mut out = format!("{} 00:00:00", next.format("%Y-%m-%d"));
        if keep_zone && !zone.is_empty() {
            out.push_str(zone);
        }
        return Some(out);
    }
    // what arrow reads as it is: no allocation for the common case
    let seconds_given = r.get(m_at + 2) == Some(&b':');
    if h_len == 2
        && seconds_given
        && (keep_zone || zone.is_empty())
        && zone == rest[end..].trim()
        && t.len() == s.len()
        && rest.len() == t.len() - 11
    {
        return None;
    }
    let mut out = format!(
        "{date} {:0>2}:{}{seconds}",
        &rest[..h_len],
        &rest[m_at..m_at + 2]
    );
    if keep_zone && !zone.is_empty() {
        out.push_str(zone);
    }
    (out != s).then_some(out)
}

/// Whether `b` starts with `YYYY-MM-DD`.
pub fn iso_date_prefix(b: &[u8]) -> bool {
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

/// The month a name or its abbreviation stands for (`March`, `mar`, `Sept`).
fn month_named(w: &str) -> Option<u32> {
    let w = w.to_ascii_lowercase();
    if w == "sept" {
        return Some(9);
    }
    crate::sql::to_timestamp::MONTHS
        .iter()
        .position(|m| w.len() >= 3 && m.starts_with(w.as_str()) && (w.len() == 3 || w == *m))
        .map(|i| i as u32 + 1)
}

fn weekday_named(w: &str) -> bool {
    let w = w.to_ascii_lowercase();
    crate::sql::to_timestamp::DAYS
        .iter()
        .any(|d| w.len() >= 3 && d.starts_with(w.as_str()) && (w.len() == 3 || w == *d))
}

/// Postgres' free-form date and timestamp input (DateStyle MDY, as its default) written as
/// `YYYY-MM-DD[ HH:MM:SS[.f]][ zone][ BC]`: `2024/03/15`, `03/15/2024`, `3/5/24`,
/// `15 March 2024`, `March 15, 2024`, `Fri Mar 15 10:20:30 2024`, `15-Mar-2024`,
/// `2024-Mar-15`, `2024.03.15`, with `10:20 PM`, `+0530`, `UTC`, `BC`. None for text it
/// does not read (arrow then reads it as it is, or refuses it).
pub fn free_form(t: &str) -> Option<String> {
    let b = t.as_bytes();
    let mut i = 0;
    let mut month: Option<u32> = None;
    // the date's numbers as written, and the parts of a separated date (`03/15/2024`)
    let mut loose: Vec<&str> = Vec::new();
    let mut parts: Option<Vec<&str>> = None;
    let mut time: Option<String> = None;
    let mut pm: Option<bool> = None;
    let mut zone: Option<&str> = None;
    let mut bc = false;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() || c == b',' {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_alphabetic() {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b'/')) {
                i += 1;
            }
            let w = &t[start..i];
            let lower = w.to_ascii_lowercase();
            match lower.as_str() {
                "am" | "a.m." => pm = Some(false),
                "pm" | "p.m." => pm = Some(true),
                "bc" => bc = true,
                "ad" => {}
                _ if weekday_named(w) => {}
                _ if month.is_none() && parts.is_none() && month_named(w).is_some() => {
                    month = month_named(w);
                }
                // a zone by name after the time (`UTC`, `Z`, `America/New_York`)
                _ if time.is_some() && zone.is_none() => zone = Some(w),
                _ => return None,
            }
            continue;
        }
        if c.is_ascii_digit() {
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            match b.get(i) {
                Some(b':') => {
                    // H:MM[:SS[.f]]
                    if time.is_some() {
                        return None;
                    }
                    while i < b.len() && (b[i].is_ascii_digit() || matches!(b[i], b':' | b'.')) {
                        i += 1;
                    }
                    let f: Vec<&str> = t[start..i].split(':').collect();
                    let (h, m, sec) = match f.as_slice() {
                        [h, m] => (*h, *m, "00"),
                        [h, m, s] => (*h, *m, *s),
                        _ => return None,
                    };
                    let ok = |x: &str, n: usize| {
                        (1..=n).contains(&x.len()) && x.bytes().all(|c| c.is_ascii_digit())
                    };
                    let (si, sf) = sec.split_once('.').unwrap_or((sec, ""));
                    let digits = sf.bytes().all(|c| c.is_ascii_digit());
                    if !(ok(h, 2) && m.len() == 2 && ok(m, 2) && ok(si, 2) && digits) {
                        return None;
                    }
                    let frac = if sf.is_empty() {
                        String::new()
                    } else {
                        format!(".{sf}")
                    };
                    time = Some(format!("{h:0>2}:{m}:{si:0>2}{frac}"));
                }
                Some(&sep @ (b'-' | b'/' | b'.'))
                    if parts.is_none()
                        && time.is_none()
                        && b.get(i + 1).is_some_and(u8::is_ascii_alphanumeric) =>
                {
                    // a separated date: its parts are digits or a month's name
                    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == sep) {
                        i += 1;
                    }
                    parts = Some(t[start..i].split(sep as char).collect());
                }
                _ => loose.push(&t[start..i]),
            }
            continue;
        }
        if matches!(c, b'+' | b'-') && time.is_some() && zone.is_none() {
            i += 1;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b':') {
                i += 1;
            }
            zone = Some(&t[start..i]);
            continue;
        }
        return None;
    }
    // the date's year, month and day as written (strings keep the year's digit count)
    let (y, m, d): (&str, u32, &str) = match (parts.as_deref(), month) {
        (Some([a, b2, c]), None) => {
            let named = [a, b2, c].iter().position(|p| month_named(p).is_some());
            match named {
                // 15-Mar-2024, 2024-Mar-15
                Some(1) if loose.is_empty() => {
                    let m = month_named(b2)?;
                    if a.len() >= 3 {
                        (*a, m, *c)
                    } else {
                        (*c, m, *a)
                    }
                }
                Some(_) => return None,
                // 2024/03/15 (a year first), else 03/15/2024 (month, day, year)
                None if loose.is_empty() => {
                    if a.len() >= 3 {
                        (*a, b2.parse().ok()?, *c)
                    } else {
                        (*c, a.parse().ok()?, *b2)
                    }
                }
                None => return None,
            }
        }
        (None, Some(m)) => match loose.as_slice() {
            // March 15, 2024 / 15 March 2024 / 2024 March 15
            [a, c] => {
                if a.len() >= 3 {
                    (*a, m, *c)
                } else {
                    (*c, m, *a)
                }
            }
            _ => return None,
        },
        _ => return None,
    };
    let day: u32 = d.parse().ok()?;
    let mut year: i64 = y.parse().ok()?;
    if !d.bytes().all(|c| c.is_ascii_digit()) || d.len() > 2 || y.is_empty() {
        return None;
    }
    // a year of one or two digits is the nearest to 2020 (Postgres: 70-99 are 19xx)
    if y.len() <= 2 && !bc {
        year += if year < 70 { 2000 } else { 1900 };
    }
    let mut out = format!("{year:04}-{m:02}-{day:02}");
    if let Some(tm) = time {
        let (h, rest) = tm.split_once(':')?;
        let mut h: u32 = h.parse().ok()?;
        match pm {
            Some(true) if h < 12 => h += 12,
            Some(false) if h == 12 => h = 0,
            _ => {}
        }
        out.push_str(&format!(" {h:02}:{rest}"));
        if let Some(z) = zone {
            out.push(' ');
            out.push_str(z);
        }
    } else if pm.is_some() || zone.is_some() {
        return None;
    }
    if bc {
        out.push_str(" BC");
    }
    Some(out)
}

/// The number written by the ASCII digits `b` (all digits, at most 9 of them).
fn digits_value(b: &[u8]) -> Option<u32> {
    let mut v = 0u32;
    for &c in b {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (c - b'0') as u32;
    }
    Some(v)
}

/// Days since 1970-01-01 of the canonical date text `YYYY-MM-DD` (year 1 to 9999, the
/// day valid for the month), nothing before or after it; None for any other text, which
/// the general reading ([`normalize`] and arrow's cast) then takes.
pub fn iso_date_days(b: &[u8]) -> Option<i64> {
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let y = digits_value(&b[0..4])?;
    let m = digits_value(&b[5..7])?;
    let d = digits_value(&b[8..10])?;
    if y == 0 {
        return None;
    }
    use chrono::Datelike;
    // chrono checks the day against the month; 719,163 days from 0001-01-01 to 1970-01-01
    let date = chrono::NaiveDate::from_ymd_opt(y as i32, m, d)?;
    Some(date.num_days_from_ce() as i64 - 719_163)
}

/// Microseconds since 1970-01-01 00:00 of the canonical timestamp text
/// `YYYY-MM-DD HH:MM:SS[.f]` (or `T` between date and time; one to six fractional
/// digits; hour 0-23, minute and second 0-59; no zone, nothing around it): the form COPY
/// data and clients' parameters almost always have, read without the general path's
/// allocations. None for any other text, which the general reading then takes with its
/// own rules (zones, eras, `24:00`, leap seconds, rounding of a seventh digit).
pub fn iso_timestamp_us(b: &[u8]) -> Option<i64> {
    if b.len() < 19 || !matches!(b[10], b' ' | b'T') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let days = iso_date_days(&b[..10])?;
    let h = digits_value(&b[11..13])?;
    let mi = digits_value(&b[14..16])?;
    let s = digits_value(&b[17..19])?;
    if h > 23 || mi > 59 || s > 59 {
        return None;
    }
    let mut micros = 0i64;
    if b.len() > 19 {
        let frac = &b[20..];
        if b[19] != b'.' || frac.is_empty() || frac.len() > 6 {
            return None;
        }
        micros = digits_value(frac)? as i64 * 10i64.pow(6 - frac.len() as u32);
    }
    Some(((days * 24 + h as i64) * 60 + mi as i64) * 60_000_000 + s as i64 * 1_000_000 + micros)
}

/// A text column read as `timestamp` (microseconds, no zone) or `date` when every value
/// in it has the canonical form ([`iso_timestamp_us`], [`iso_date_days`]): one pass, no
/// allocation per row. None when any value has another form (or for other types): the
/// caller then reads the column the general way.
pub fn read_canonical(
    text: &datafusion::arrow::array::StringArray,
    to: &DataType,
) -> Option<ArrayRef> {
    use datafusion::arrow::array::{Date32Array, TimestampMicrosecondArray};
    use datafusion::arrow::datatypes::TimeUnit;
    let read: fn(&[u8]) -> Option<i64> = match to {
        DataType::Timestamp(TimeUnit::Microsecond, None) => iso_timestamp_us,
        DataType::Date32 => iso_date_days,
        _ => return None,
    };
    let nulls = text.nulls().cloned();
    let mut out = Vec::with_capacity(text.len());
    for i in 0..text.len() {
        let valid = nulls.as_ref().is_none_or(|n| n.is_valid(i));
        out.push(if valid {
            read(text.value(i).as_bytes())?
        } else {
            0
        });
    }
    Some(match to {
        DataType::Date32 => {
            // years 1 to 9999: every day count fits an i32
            let days = out.into_iter().map(|d| d as i32).collect::<Vec<_>>();
            Arc::new(Date32Array::new(days.into(), nulls))
        }
        _ => Arc::new(TimestampMicrosecondArray::new(out.into(), nulls)),
    })
}

/// Seconds text `:SS.fffffff...` with more than six fractional digits: the text cut to six
/// and whether the cut-off digits round the sixth up (half to even, as Postgres' `rint`).
/// None for six digits or fewer.
fn round_fraction(seconds: &str) -> Option<(&str, bool)> {
    let dot = seconds.find('.')?;
    let frac = &seconds[dot + 1..];
    if frac.len() <= 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let (kept, rest) = frac.split_at(6);
    let rest = rest.as_bytes();
    let up = match rest[0] {
        b'6'..=b'9' => true,
        b'5' if rest[1..].iter().any(|&b| b != b'0') => true,
        // exactly half: to the even sixth digit
        b'5' => (kept.as_bytes()[5] - b'0') % 2 == 1,
        _ => false,
    };
    Some((&seconds[..dot + 7], up))
}

/// Postgres' default time zone abbreviations (`timezone_abbreviations = 'Default'`) a
/// timestamptz's text may end with, and their offsets (seconds east of UTC).
const ZONE_ABBREVIATIONS: &[(&str, i32)] = &[
    ("UTC", 0),
    ("UT", 0),
    ("GMT", 0),
    ("Z", 0),
    ("EST", -5 * 3600),
    ("EDT", -4 * 3600),
    ("CST", -6 * 3600),
    ("CDT", -5 * 3600),
    ("MST", -7 * 3600),
    ("MDT", -6 * 3600),
    ("PST", -8 * 3600),
    ("PDT", -7 * 3600),
    ("AKST", -9 * 3600),
    ("AKDT", -8 * 3600),
    ("HST", -10 * 3600),
    ("WET", 0),
    ("WEST", 3600),
    ("BST", 3600),
    ("CET", 3600),
    ("CEST", 2 * 3600),
    ("MET", 3600),
    ("MEST", 2 * 3600),
    ("EET", 2 * 3600),
    ("EEST", 3 * 3600),
    ("MSK", 3 * 3600),
    ("IST", 2 * 3600),
    ("JST", 9 * 3600),
    ("KST", 9 * 3600),
    ("HKT", 8 * 3600),
    ("SGT", 8 * 3600),
    ("AWST", 8 * 3600),
    ("ACST", 9 * 3600 + 1800),
    ("ACDT", 10 * 3600 + 1800),
    ("AEST", 10 * 3600),
    ("AEDT", 11 * 3600),
    ("NZST", 12 * 3600),
    ("NZDT", 13 * 3600),
];

/// A zone written by name after a time (`2024-03-10 02:30 America/New_York`, `... PDT`) as
/// the numeric offset it has at that wall-clock time (`-05:00`): an abbreviation's fixed
/// one, an IANA zone's by its rules, a skipped local time (a spring-forward gap) read with
/// the offset before it and a repeated one as standard time, as Postgres and
/// `AT TIME ZONE` read them. None when `zone` is not a name (an offset, nothing) or not one
/// known (the cast then refuses the text).
fn named_zone_offset(
    date: &str,
    hours: &str,
    minutes: &str,
    seconds: &str,
    zone: &str,
) -> Option<String> {
    if !zone.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    let offset = match ZONE_ABBREVIATIONS
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(zone))
    {
        Some((_, o)) => *o as i64,
        None => {
            let named = crate::sql::time_zone::Zone::parse(zone).ok()?;
            let local = chrono::NaiveDateTime::parse_from_str(
                &format!("{date} {hours}:{minutes}{seconds}"),
                "%Y-%m-%d %H:%M:%S%.f",
            )
            .ok()?
            .and_utc()
            .timestamp_micros();
            let utc = named.utc_of_local_us(local)?;
            (local - utc) / 1_000_000
        }
    };
    let sign = if offset < 0 { '-' } else { '+' };
    let a = offset.unsigned_abs();
    Some(format!("{sign}{:02}:{:02}", a / 3600, a / 60 % 60))
}

/// [`normalize`] over a text array (other arrays are returned as they are); one pass, and
/// no copy when nothing changes.
pub fn normalize_array(a: &ArrayRef, keep_zone: bool, date_only: bool) -> ArrayRef {
    let Some(s) = a.as_string_opt::<i32>() else {
        return a.clone();
    };
    let mut out: Option<StringBuilder> = None;
    for (i, v) in s.iter().enumerate() {
        let n = v.and_then(|v| normalize_to(v, keep_zone, date_only));
        if out.is_none() && n.is_some() {
            let mut b = StringBuilder::with_capacity(s.len(), s.value_data().len() + 16);
            for earlier in s.iter().take(i) {
                b.append_option(earlier);
            }
            out = Some(b);
        }
        if let Some(b) = out.as_mut() {
            match (n, v) {
                (Some(n), _) => b.append_value(n),
                (None, v) => b.append_option(v),
            }
        }
    }
    match out {
        Some(mut b) => Arc::new(b.finish()),
        None => a.clone(),
    }
}

/// The text before a trailing era (` BC` / ` AD`, any case) and whether it is BC.
fn era(t: &str) -> Option<(&str, bool)> {
    let n = t.len();
    if n < 4 || !t.is_char_boundary(n - 2) {
        return None;
    }
    let (body, word) = t.split_at(n - 2);
    if !body.ends_with([' ', '\t']) {
        return None;
    }
    let bc = if word.eq_ignore_ascii_case("bc") {
        true
    } else if word.eq_ignore_ascii_case("ad") {
        false
    } else {
        return None;
    };
    Some((body.trim_end(), bc))
}

/// For a BC date's text (`YYYY-...`, year 1 or later): the 400-year cycles its year is
/// moved by to read as a year of the common era (1 BC is year 0, astronomically).
fn bc_cycles(body: &str) -> Option<i64> {
    let year: i64 = body.get(..4)?.parse().ok()?;
    (year >= 1).then_some((year + 399) / 400)
}

/// Whether `timestamptz` input text names its instant itself (a zone or offset after the
/// time: `+02`, `Z`, ` UTC`, ` Europe/Paris`; or `epoch`, `now`, `infinity`), rather than a
/// wall-clock time, which is read in the session's zone.
pub fn names_its_instant(s: &str) -> bool {
    let t = s.trim();
    let t = era(t).map_or(t, |(body, _)| body);
    if infinity(t).is_some() || t.eq_ignore_ascii_case("epoch") || t.eq_ignore_ascii_case("now") {
        return true;
    }
    // the date, then a time of digits, `:` and `.`: what follows is a zone
    let Some(rest) = t.get(10..) else {
        return false;
    };
    let Some(time) = rest.strip_prefix([' ', 'T', 't']) else {
        return !rest.trim().is_empty();
    };
    let time = time.trim_start();
    let zone = time.trim_start_matches(|c: char| c.is_ascii_digit() || c == ':' || c == '.');
    !zone.trim().is_empty()
}

/// Days in 400 years of the Gregorian calendar.
const DAYS_PER_400_YEARS: i64 = 146_097;

/// `Some(true)` for Postgres' `infinity`, `Some(false)` for `-infinity` (any case, spaces
/// around).
pub fn infinity(s: &str) -> Option<bool> {
    let t = s.trim();
    let (positive, word) = match t.strip_prefix('-') {
        Some(rest) => (false, rest),
        None => (true, t),
    };
    word.eq_ignore_ascii_case("infinity").then_some(positive)
}

/// After `text` (Postgres input) was normalized ([`normalize`]) and cast to a date or
/// timestamp type as `parsed`: the rows whose text was `infinity` / `-infinity` hold
/// Postgres' infinities, the largest and smallest value of the type (as Postgres stores
/// them: `DT_NOEND` / `DT_NOBEGIN`), which sort after and before every date, and the rows
/// whose text was BC are moved back to their year ([`back_to_bc`]). Other types, or no
/// infinity or BC in the text: `parsed` as it is.
pub fn with_infinities(text: &dyn Array, parsed: ArrayRef) -> ArrayRef {
    let Some(text) = text.as_string_opt::<i32>() else {
        return parsed;
    };
    if text.len() != parsed.len() {
        return parsed;
    }
    let parsed = back_to_bc(text, parsed);
    if !text
        .iter()
        .any(|v| v.is_some_and(|v| infinity(v).is_some()))
    {
        return parsed;
    }
    let ends: Vec<Option<bool>> = text.iter().map(|v| v.and_then(infinity)).collect();
    set_ends(parsed, &ends)
}

/// The rows whose text is a BC date or timestamp, read ([`normalize`]) whole 400-year
/// cycles later, moved back by them. Other rows, types, or no BC text: as they are.
fn back_to_bc(text: &datafusion::arrow::array::StringArray, parsed: ArrayRef) -> ArrayRef {
    let cycles = |v: &str| {
        let t = v.trim();
        // (a free-form date's era is read off its ISO spelling)
        let iso = (!iso_date_prefix(t.as_bytes()))
            .then(|| free_form(t))
            .flatten();
        let t = iso.as_deref().unwrap_or(t);
        era(t).filter(|(_, bc)| *bc).and_then(|(b, _)| bc_cycles(b))
    };
    if !text.iter().any(|v| v.is_some_and(|v| cycles(v).is_some())) {
        return parsed;
    }
    let per_day: i64 = match parsed.data_type() {
        DataType::Date32 => 1,
        DataType::Timestamp(u, _) => {
            86_400
                * match u {
                    datafusion::arrow::datatypes::TimeUnit::Second => 1,
                    datafusion::arrow::datatypes::TimeUnit::Millisecond => 1_000,
                    datafusion::arrow::datatypes::TimeUnit::Microsecond => 1_000_000,
                    datafusion::arrow::datatypes::TimeUnit::Nanosecond => 1_000_000_000,
                }
        }
        _ => return parsed,
    };
    let Ok(w) = widened(&parsed) else {
        return parsed;
    };
    let shifts: Vec<i64> = (0..w.len())
        .map(|i| {
            text.is_valid(i)
                .then(|| cycles(text.value(i)))
                .flatten()
                .unwrap_or(0)
        })
        .collect();
    moved_by(
        &w,
        &shifts,
        -DAYS_PER_400_YEARS * per_day,
        parsed.data_type(),
    )
    .unwrap_or(parsed)
}

/// The smallest and largest value of a date or timestamp type (Postgres' `-infinity` and
/// `infinity`), as i64; None for other types.
fn ends(t: &DataType) -> Option<(i64, i64)> {
    match t {
        DataType::Date32 => Some((i32::MIN as i64, i32::MAX as i64)),
        DataType::Date64 | DataType::Timestamp(..) => Some((i64::MIN, i64::MAX)),
        _ => None,
    }
}

/// A date or timestamp array's values as i64 (dates widened), nulls kept.
fn widened(a: &ArrayRef) -> datafusion::common::Result<Int64Array> {
    let w = match a.data_type() {
        DataType::Date32 => cast(&cast(a, &DataType::Int32)?, &DataType::Int64)?,
        _ => cast(a, &DataType::Int64)?,
    };
    Ok(w.as_primitive::<Int64Type>().clone())
}

/// Per row of a date or timestamp array: `Some(true)` at `infinity`, `Some(false)` at
/// `-infinity`, None elsewhere (and at NULL); None for other types.
fn ends_of(a: &ArrayRef) -> Option<Vec<Option<bool>>> {
    let (lo, hi) = ends(a.data_type())?;
    let w = widened(a).ok()?;
    Some(
        w.iter()
            .map(|v| match v {
                Some(v) if v == hi => Some(true),
                Some(v) if v == lo => Some(false),
                _ => None,
            })
            .collect(),
    )
}

/// Whether a date or timestamp array may hold `infinity` or `-infinity`: one pass over
/// its values, the check before [`keeping_infinities`] on a hot path (a NULL slot holding
/// an end's bits is a false alarm, which `keeping_infinities` then ignores). False for
/// other types.
pub fn has_ends(a: &ArrayRef) -> bool {
    let Some((lo, hi)) = ends(a.data_type()) else {
        return false;
    };
    widened(a).is_ok_and(|w| w.values().iter().any(|&v| v == lo || v == hi))
}

/// `a` (a date or timestamp array) with each row marked in `at` set to `value(marked)`.
fn replace_rows(
    a: &ArrayRef,
    at: &[Option<bool>],
    value: impl Fn(bool) -> i64,
) -> datafusion::common::Result<ArrayRef> {
    let w = widened(a)?;
    let values: Vec<i64> = (0..w.len())
        .map(|i| match at.get(i).copied().flatten() {
            Some(end) => value(end),
            // (a NULL slot's bits can be an end's: zero, so no kernel overflows on it)
            None if w.is_null(i) => 0,
            None => w.value(i),
        })
        .collect();
    from_widened(
        Int64Array::new(values.into(), w.nulls().cloned()),
        a.data_type(),
    )
}

/// `a` with the rows marked in `at` set to the type's ends (`Some(true)`: `infinity`).
fn set_ends(a: ArrayRef, at: &[Option<bool>]) -> ArrayRef {
    let Some((lo, hi)) = ends(a.data_type()) else {
        return a;
    };
    // (an integer array of the same length always converts back)
    replace_rows(&a, at, |end| if end { hi } else { lo }).unwrap_or(a)
}

/// `isfinite(date | timestamp | timestamptz | interval)`: false at `infinity` and
/// `-infinity`, NULL at NULL; intervals are finite. None for other types.
pub fn isfinite(a: &ArrayRef) -> Option<BooleanArray> {
    if matches!(a.data_type(), DataType::Interval(_) | DataType::Duration(_)) {
        return Some(BooleanArray::new(
            BooleanBuffer::new_set(a.len()),
            a.nulls().cloned(),
        ));
    }
    let at = ends_of(a)?;
    let finite: BooleanBuffer = at.iter().map(Option::is_none).collect();
    Some(BooleanArray::new(finite, a.nulls().cloned()))
}

/// `f` (a function from dates/timestamps to dates/timestamps, such as a cast to another
/// of those types) applied so that `infinity` and `-infinity` stay the ends: those rows
/// are given to `f` as the epoch (so `f` cannot overflow on them) and set to the result
/// type's ends after it, as Postgres answers (`'infinity'::timestamp::date` is
/// `infinity`). Other inputs: `f` as it is.
pub fn keeping_infinities(
    a: &ArrayRef,
    f: impl FnOnce(&ArrayRef) -> datafusion::common::Result<ArrayRef>,
) -> datafusion::common::Result<ArrayRef> {
    // the usual batch, without an end: one pass, nothing allocated
    if !has_ends(a) {
        return f(a);
    }
    let Some(at) = ends_of(a).filter(|e| e.iter().any(Option::is_some)) else {
        return f(a);
    };
    let out = f(&replace_rows(a, &at, |_| 0)?)?;
    Ok(set_ends(out, &at))
}

/// `f` (a function of timestamps that commutes with moving them by whole 400-year
/// Gregorian cycles: same month, day, weekday and time, such as `date_trunc` up to `year`)
/// applied to timestamps outside what a nanosecond count holds (before 1678 or after 2261,
/// where arrow's and DataFusion's nanosecond kernels fail) by moving each such row by whole
/// cycles into 1700..2200, and the result back. The usual batch, all of it in that range:
/// `f` as it is, after one pass. Other types: `f` as it is.
pub fn within_nanosecond_range(
    a: &ArrayRef,
    f: impl FnOnce(&ArrayRef) -> datafusion::common::Result<ArrayRef>,
) -> datafusion::common::Result<ArrayRef> {
    use datafusion::arrow::datatypes::TimeUnit;
    let per_second: i64 = match a.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => 1,
        DataType::Timestamp(TimeUnit::Millisecond, _) => 1_000,
        DataType::Timestamp(TimeUnit::Microsecond, _) => 1_000_000,
        _ => return f(a),
    };
    // 1700-01-01 and 2200-01-01 (seconds since the epoch), 400 Gregorian years
    let (lo, hi) = (-8_520_336_000 * per_second, 7_258_118_400 * per_second);
    let cycle = DAYS_PER_400_YEARS * 86_400 * per_second;
    let w = widened(a)?;
    let shift_of = |v: i64| -> i64 {
        if v < lo {
            (lo - v + cycle - 1) / cycle
        } else if v > hi {
            -((v - hi + cycle - 1) / cycle)
        } else {
            0
        }
    };
    if !w.iter().any(|v| v.is_some_and(|v| shift_of(v) != 0)) {
        return f(a);
    }
    let shifts: Vec<i64> = w.iter().map(|v| v.map_or(0, shift_of)).collect();
    let out = f(&moved_by(&w, &shifts, cycle, a.data_type())?)?;
    moved_by(&widened(&out)?, &shifts, -cycle, out.data_type())
}

/// Widened values `w`, each moved by `shifts[i] * by`, as an array of `t` (a date or
/// timestamp type), nulls kept.
fn moved_by(
    w: &Int64Array,
    shifts: &[i64],
    by: i64,
    t: &DataType,
) -> datafusion::common::Result<ArrayRef> {
    let values: Vec<i64> = w
        .values()
        .iter()
        .zip(shifts)
        .map(|(v, k)| v.saturating_add(k.saturating_mul(by)))
        .collect();
    from_widened(Int64Array::new(values.into(), w.nulls().cloned()), t)
}

/// i64 values back to the date or timestamp type they were widened from.
fn from_widened(w: Int64Array, t: &DataType) -> datafusion::common::Result<ArrayRef> {
    let w: ArrayRef = Arc::new(w);
    Ok(match t {
        DataType::Date32 => cast(&cast(&w, &DataType::Int32)?, &DataType::Date32)?,
        t => cast(&w, t)?,
    })
}

/// A day's end: `24:00`, `24:00:00`, `24:00:00.000` (Postgres' one time past 23:59:59.999999).
fn is_day_end(t: &str) -> bool {
    let t = t.trim();
    let rest = match t.strip_prefix("24:00") {
        Some(r) => r,
        None => return false,
    };
    let rest = rest.strip_prefix(":00").unwrap_or(rest);
    match rest.strip_prefix('.') {
        Some(f) => f.bytes().all(|b| b == b'0'),
        None => rest.is_empty(),
    }
}

/// Whether the text of a time has more than six fractional digits that round its sixth
/// up (half to even, as Postgres; arrow's reading cuts them off).
pub fn time_rounds_up(v: &str) -> bool {
    let v = v.trim();
    let secs = match v.rfind(':') {
        Some(at) => &v[at..],
        None => return false,
    };
    let len = secs[1..]
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or(secs.len(), |n| n + 1);
    round_fraction(&secs[..len]).is_some_and(|(_, up)| up)
}

/// A time written with one-digit hours, minutes or seconds (`10:5`, `1:2:3.5`) with two
/// digits each (`10:05`, `01:02:03.5`), as arrow reads it; None for anything else.
fn padded_time(v: &str) -> Option<String> {
    let v = v.trim();
    let parts: Vec<&str> = v.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let mut short = false;
    let mut out = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        let (int, frac) = match p.split_once('.') {
            Some((a, b)) if i == parts.len() - 1 && i == 2 => (a, Some(b)),
            Some(_) => return None,
            None => (*p, None),
        };
        if int.is_empty() || int.len() > 2 || !int.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if frac.is_some_and(|f| !f.bytes().all(|b| b.is_ascii_digit())) {
            return None;
        }
        short |= int.len() == 1;
        out.push(match frac {
            Some(f) => format!("{int:0>2}.{f}"),
            None => format!("{int:0>2}"),
        });
    }
    short.then(|| out.join(":"))
}

/// Text as `time` (microseconds since midnight), as Postgres reads it: what arrow reads, and
/// `allballs` (midnight) and `24:00[:00]` (the day's end, 86400 s). Returns the row of the
/// first text that is no time.
pub fn time_in(text: &ArrayRef) -> std::result::Result<ArrayRef, usize> {
    use datafusion::arrow::array::Time64MicrosecondArray;
    use datafusion::arrow::datatypes::TimeUnit;
    let Some(s) = text.as_string_opt::<i32>() else {
        return Err(0);
    };
    let special = |v: &str| is_day_end(v) || v.trim().eq_ignore_ascii_case("allballs");
    // the words read as midnight, a day's end patched in after the cast; one-digit fields
    // (`10:5`) written with two
    let read: ArrayRef = if s
        .iter()
        .flatten()
        .any(|v| special(v) || padded_time(v).is_some())
    {
        Arc::new(
            s.iter()
                .map(|v| {
                    v.map(|v| match padded_time(v) {
                        _ if special(v) => "00:00:00".to_owned(),
                        Some(p) => p,
                        None => v.trim().to_owned(),
                    })
                })
                .collect::<StringArray>(),
        )
    } else {
        text.clone()
    };
    let strict = datafusion::arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let target = DataType::Time64(TimeUnit::Microsecond);
    let parsed = match datafusion::arrow::compute::cast_with_options(&read, &target, &strict) {
        Ok(p) => p,
        // which row: the first arrow does not read
        Err(_) => {
            let lenient = cast(&read, &target).map_err(|_| 0usize)?;
            let row = (0..read.len())
                .find(|&i| read.is_valid(i) && lenient.is_null(i))
                .unwrap_or(0);
            return Err(row);
        }
    };
    // more than six fractional digits round to microseconds (half to even) as Postgres
    // rounds them, where arrow cuts them off; `23:59:59.9999999` is the day's end
    if !s
        .iter()
        .flatten()
        .any(|v| is_day_end(v) || time_rounds_up(v))
    {
        return Ok(parsed);
    }
    let parsed = parsed
        .as_any()
        .downcast_ref::<Time64MicrosecondArray>()
        .ok_or(0usize)?;
    Ok(Arc::new(
        parsed
            .iter()
            .zip(s.iter())
            .map(|(p, v)| match v {
                Some(v) if is_day_end(v) => Some(86_400_000_000),
                Some(v) if time_rounds_up(v) => p.map(|p| p + 1),
                _ => p,
            })
            .collect::<Time64MicrosecondArray>(),
    ))
}

/// Whether text cast to `t` goes through [`normalize`], and whether it keeps the zone.
pub fn applies(t: &DataType) -> Option<bool> {
    match t {
        DataType::Timestamp(_, tz) => Some(tz.is_some()),
        DataType::Date32 | DataType::Date64 => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The canonical-form reader agrees with chrono over every day from year 1 to 9999 at
    /// a few times of day and fractions, and leaves every other form to the general path.
    #[test]
    fn canonical_timestamps_read_as_chrono_reads_them() {
        let mut day = chrono::NaiveDate::from_ymd_opt(1, 1, 1).unwrap();
        let end = chrono::NaiveDate::from_ymd_opt(9999, 12, 31).unwrap();
        let mut k = 0u64;
        loop {
            let text = day.format("%Y-%m-%d").to_string();
            let want_days = (day - chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap()).num_days();
            assert_eq!(iso_date_days(text.as_bytes()), Some(want_days), "{text}");
            if k.is_multiple_of(97) {
                let (h, m, s) = ((k % 24) as u32, (k % 60) as u32, (k / 7 % 60) as u32);
                for frac in ["", ".5", ".123", ".000001", ".999999"] {
                    let ts = format!("{text} {h:02}:{m:02}:{s:02}{frac}");
                    let want = chrono::NaiveDateTime::parse_from_str(&ts, "%Y-%m-%d %H:%M:%S%.f")
                        .unwrap()
                        .and_utc()
                        .timestamp_micros();
                    assert_eq!(iso_timestamp_us(ts.as_bytes()), Some(want), "{ts}");
                    let t_form = ts.replacen(' ', "T", 1);
                    assert_eq!(iso_timestamp_us(t_form.as_bytes()), Some(want), "{t_form}");
                }
            }
            if day == end {
                break;
            }
            day = day.succ_opt().unwrap();
            k += 1;
        }
        for other in [
            "2024-02-30 00:00:00",
            "2023-02-29 00:00:00",
            "0000-01-01 00:00:00",
            "2024-01-01 24:00:00",
            "2024-01-01 23:59:60",
            "2024-01-01 10:00",
            "2024-01-01 9:00:00",
            "2024-01-01 10:00:00.",
            "2024-01-01 10:00:00.1234567",
            "2024-01-01 10:00:00+02",
            "2024-01-01 10:00:00 BC",
            " 2024-01-01 10:00:00",
            "2024-01-01 10:00:00 ",
            "2024-1-01 10:00:00",
            "epoch",
            "infinity",
            "2024-01-01T10:0a:00",
        ] {
            assert_eq!(iso_timestamp_us(other.as_bytes()), None, "{other}");
        }
        for other in [
            "2024-13-01",
            "2024-00-10",
            "2024-01-00",
            "2024-04-31",
            "2024-01-01x",
            "12024-01-01",
        ] {
            assert_eq!(iso_date_days(other.as_bytes()), None, "{other}");
        }
    }

    /// Infinities read from text, kept through a date <-> timestamp cast, and told apart by
    /// `isfinite`, for each width (dates are i32, timestamps i64); NULL stays NULL.
    #[test]
    fn infinities_are_the_types_ends_and_survive_casts() {
        use datafusion::arrow::array::{Date32Array, TimestampMicrosecondArray};
        use datafusion::arrow::datatypes::TimeUnit;
        let text: ArrayRef = Arc::new(datafusion::arrow::array::StringArray::from(vec![
            Some(" Infinity"),
            Some("2024-01-02"),
            None,
            Some("-infinity "),
        ]));
        let us = DataType::Timestamp(TimeUnit::Microsecond, None);
        let parsed = cast(&normalize_array(&text, false, false), &us).unwrap();
        let ts = with_infinities(text.as_ref(), parsed);
        let got: Vec<Option<i64>> = ts
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap()
            .iter()
            .collect();
        assert_eq!(
            got,
            vec![
                Some(i64::MAX),
                Some(1_704_153_600_000_000),
                None,
                Some(i64::MIN)
            ]
        );
        let dates = keeping_infinities(&ts, |a| Ok(cast(a, &DataType::Date32)?)).unwrap();
        let got: Vec<Option<i32>> = dates
            .as_any()
            .downcast_ref::<Date32Array>()
            .unwrap()
            .iter()
            .collect();
        assert_eq!(
            got,
            vec![Some(i32::MAX), Some(19_724), None, Some(i32::MIN)]
        );
        let back = keeping_infinities(&dates, |a| Ok(cast(a, &us)?)).unwrap();
        assert_eq!(&back, &ts);
        for a in [&ts, &dates] {
            let finite: Vec<Option<bool>> = isfinite(a).unwrap().iter().collect();
            assert_eq!(finite, vec![Some(false), Some(true), None, Some(false)]);
        }
        assert!(isfinite(&text).is_none());
    }

    #[test]
    fn postgres_forms_become_arrow_forms() {
        assert_eq!(
            normalize("2024-01-01 10:00", false).as_deref(),
            Some("2024-01-01 10:00:00")
        );
        assert_eq!(
            normalize("2024-01-01T10:00", true).as_deref(),
            Some("2024-01-01 10:00:00")
        );
        assert_eq!(
            normalize("2024-01-01 9:05:00", false).as_deref(),
            Some("2024-01-01 09:05:00")
        );
        assert_eq!(
            normalize("2024-01-01 10:00:00+02", false).as_deref(),
            Some("2024-01-01 10:00:00")
        );
        // arrow reads a zone after full seconds itself
        assert_eq!(normalize("2024-01-01 10:00:00.5 +05:30", true), None);
        assert_eq!(normalize("2024-01-01 10:00:00", false), None);
        assert_eq!(normalize("2024-01-01", false), None);
        assert_eq!(
            normalize(" 2024-01-01 ", false).as_deref(),
            Some("2024-01-01")
        );
        assert_eq!(
            normalize("epoch", true).as_deref(),
            Some("1970-01-01T00:00:00")
        );
        assert_eq!(normalize("garbage", true), None);
        assert_eq!(normalize("2024-01-01 xx", true), None);
    }
}
