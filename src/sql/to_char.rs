//! `to_char(value, template)` with Postgres' template patterns.
//!
//! - Date/time values (timestamp, timestamptz, date, time, interval): `YYYY`, `Y,YYY`,
//!   `YYY`..`Y`, `IYYY`..`I`, `MM`, `MONTH`/`Month`/`month`, `MON`/`Mon`/`mon`, `DD`,
//!   `DDD`, `IDDD`, `D`, `ID`, `DAY`/`Day`/`day`, `DY`/`Dy`/`dy`, `W`, `WW`, `IW`, `Q`,
//!   `CC`, `J`, `RM`/`rm`, `HH`/`HH12`, `HH24`, `MI`, `SS`, `MS`, `US`, `FF1`..`FF6`,
//!   `SSSS`/`SSSSS`, `AM`/`PM`/`A.M.`/`P.M.` (and lower case), `BC`/`AD`/`B.C.`/`A.D.`,
//!   `TZ`/`tz`/`TZH`/`TZM`/`OF` (sessions are UTC); the `FM` prefix (no padding), `FX`
//!   (accepted), `TM` (the C locale's English names, unpadded), the `TH`/`th` suffix (ordinal), `SP` (accepted); `"quoted"` text and `\`
//!   escapes are copied.
//! - Numbers (integers, numeric, real, double): `9`, `0`, `.`/`D`, `,`/`G`, `S`, `MI`,
//!   `PL`, `SG`, `PR`, `EEEE`, `RN`/`rn`, `TH`/`th`, `FM`, `L` (the C locale's blank);
//!   numeric rounds half away from zero, floats to the nearest even as Postgres' `printf`.
//!   `V` is refused.

use std::sync::Arc;

use chrono::{Datelike, NaiveDate, NaiveDateTime, Timelike};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Decimal128Type, Float64Type, Int64Type, IntervalMonthDayNanoType, IntervalUnit,
    TimeUnit, TimestampMicrosecondType,
};
use datafusion::common::{DataFusionError, Result as DfResult};

use crate::error::{WeirError, sqlstate};

fn err(code: &'static str, msg: impl Into<String>) -> DataFusionError {
    DataFusionError::External(Box::new(WeirError::new(code, msg)))
}

pub fn to_char(args: &[ArrayRef], rows: usize) -> DfResult<ArrayRef> {
    let fmt = cast(&args[1], &DataType::Utf8)?;
    let fmt = fmt.as_string::<i32>();
    let v = &args[0];
    let mut out = StringBuilder::new();
    let nulls = |i: usize| v.is_null(i) || fmt.is_null(i);
    match v.data_type() {
        DataType::Timestamp(..) | DataType::Date32 | DataType::Date64 | DataType::Time64(_) => {
            // a timestamptz is shown in the session's zone (a third argument the planner
            // adds: `catalog/pg_semantics.rs`), else UTC
            let zone = crate::sql::time_zone::zone_arg(args.get(2))?;
            let zone = matches!(v.data_type(), DataType::Timestamp(_, Some(_))).then_some(zone);
            let time_only = matches!(v.data_type(), DataType::Time64(_));
            let us = match v.data_type() {
                // the raw count of the time's unit
                DataType::Time64(_) => cast(v, &DataType::Int64)?,
                _ => cast(v, &DataType::Timestamp(TimeUnit::Microsecond, None))?,
            };
            for i in 0..rows {
                if nulls(i) {
                    out.append_null();
                    continue;
                }
                let micros = match us.data_type() {
                    DataType::Int64 => {
                        // time64: its unit may be nanoseconds
                        let raw = us.as_primitive::<Int64Type>().value(i);
                        match v.data_type() {
                            DataType::Time64(TimeUnit::Nanosecond) => raw / 1000,
                            _ => raw,
                        }
                    }
                    _ => us.as_primitive::<TimestampMicrosecondType>().value(i),
                };
                let tm = if time_only {
                    Tm::of_time(micros)
                } else {
                    Tm::of_timestamp(micros, zone)
                };
                match tm {
                    Some(tm) => out.append_value(format_datetime(&tm, fmt.value(i))?),
                    None => out.append_null(),
                }
            }
        }
        DataType::Interval(_) => {
            let c = cast(v, &DataType::Interval(IntervalUnit::MonthDayNano))?;
            let a = c.as_primitive::<IntervalMonthDayNanoType>();
            for i in 0..rows {
                if nulls(i) {
                    out.append_null();
                    continue;
                }
                let x = a.value(i);
                let tm = Tm::of_interval(x.months, x.days, x.nanoseconds / 1000);
                out.append_value(format_datetime(&tm, fmt.value(i))?);
            }
        }
        DataType::Float32 | DataType::Float64 => {
            // DBL_DIG and FLT_DIG: the digits Postgres formats a float from
            let dig = if v.data_type() == &DataType::Float32 {
                6
            } else {
                15
            };
            let c = cast(v, &DataType::Float64)?;
            let a = c.as_primitive::<Float64Type>();
            for i in 0..rows {
                if nulls(i) {
                    out.append_null();
                    continue;
                }
                out.append_value(format_number(Num::Float(a.value(i), dig), fmt.value(i))?);
            }
        }
        t if t.is_integer() || matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..)) => {
            let scale = match t {
                DataType::Decimal128(_, s) | DataType::Decimal256(_, s) => *s,
                _ => 0,
            };
            let c = cast(v, &DataType::Decimal128(38, scale))?;
            let a = c.as_primitive::<Decimal128Type>();
            for i in 0..rows {
                if nulls(i) {
                    out.append_null();
                    continue;
                }
                out.append_value(format_number(Num::Exact(a.value(i), scale), fmt.value(i))?);
            }
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {
            // an untyped literal: Postgres would ask which to_char; a number is most likely
            let s = cast(v, &DataType::Utf8)?;
            let s: &StringArray = s.as_string::<i32>();
            for i in 0..rows {
                if nulls(i) {
                    out.append_null();
                    continue;
                }
                let text = s.value(i).trim();
                let n: f64 = text.parse().map_err(|_| {
                    err(
                        sqlstate::INVALID_TEXT_REPRESENTATION,
                        format!("invalid input syntax for type numeric: \"{text}\""),
                    )
                })?;
                out.append_value(format_number(Num::Float(n, 0), fmt.value(i))?);
            }
        }
        other => {
            return Err(err(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function to_char({other}, text) does not exist"),
            ));
        }
    }
    Ok(Arc::new(out.finish()))
}

/// The fields a template reads, from a timestamp (UTC), a time or an interval.
struct Tm {
    /// astronomical year (0 = 1 BC)
    year: i64,
    month: u32,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
    micros: i64,
    date: Option<NaiveDate>,
    /// A `timestamptz`'s zone: its offset east of UTC (seconds) at the instant, the zone,
    /// and the instant (for the zone's abbreviation then).
    tz: Option<(i64, crate::sql::time_zone::Zone, i64)>,
    interval: bool,
}

impl Tm {
    fn of_timestamp(utc: i64, zone: Option<crate::sql::time_zone::Zone>) -> Option<Tm> {
        let offset = zone.map_or(0, |z| z.offset_at_us(utc));
        let us = utc.checked_add(offset * 1_000_000)?;
        let secs = us.div_euclid(1_000_000);
        let micros = us.rem_euclid(1_000_000);
        let dt: NaiveDateTime = chrono::DateTime::from_timestamp(secs, 0)?.naive_utc();
        Some(Tm {
            year: dt.year() as i64,
            month: dt.month(),
            day: dt.day() as i64,
            hour: dt.hour() as i64,
            minute: dt.minute() as i64,
            second: dt.second() as i64,
            micros,
            date: Some(dt.date()),
            tz: zone.map(|z| (offset, z, utc)),
            interval: false,
        })
    }
    fn of_time(us: i64) -> Option<Tm> {
        let secs = us.div_euclid(1_000_000);
        Some(Tm {
            year: 0,
            month: 0,
            day: 0,
            hour: secs / 3600,
            minute: secs / 60 % 60,
            second: secs % 60,
            micros: us.rem_euclid(1_000_000),
            date: None,
            tz: None,
            interval: true,
        })
    }
    fn of_interval(months: i32, days: i32, us: i64) -> Tm {
        let secs = us / 1_000_000;
        Tm {
            year: (months / 12) as i64,
            month: (months % 12).unsigned_abs(),
            day: days as i64,
            hour: secs / 3600,
            minute: secs / 60 % 60,
            second: secs % 60,
            micros: us % 1_000_000,
            date: None,
            tz: None,
            interval: true,
        }
    }
    /// The year as shown with BC: 1 BC for astronomical 0.
    fn shown_year(&self) -> i64 {
        if self.year <= 0 && !self.interval {
            1 - self.year
        } else {
            self.year
        }
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const ROMAN_MONTHS: [&str; 12] = [
    "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X", "XI", "XII",
];

/// Date/time template keywords, longest first where one is a prefix of another.
const DT_KEYS: &[&str] = &[
    "Y,YYY", "y,yyy", "A.D.", "a.d.", "A.M.", "a.m.", "B.C.", "b.c.", "P.M.", "p.m.", "HH24",
    "hh24", "HH12", "hh12", "IDDD", "iddd", "IYYY", "iyyy", "MONTH", "Month", "month", "SSSSS",
    "sssss", "SSSS", "ssss", "YYYY", "yyyy", "DAY", "Day", "day", "DDD", "ddd", "FF1", "FF2",
    "FF3", "FF4", "FF5", "FF6", "ff1", "ff2", "ff3", "ff4", "ff5", "ff6", "IYY", "iyy", "MON",
    "Mon", "mon", "TZH", "tzh", "TZM", "tzm", "YYY", "yyy", "AD", "ad", "AM", "am", "BC", "bc",
    "CC", "cc", "DD", "dd", "DY", "Dy", "dy", "HH", "hh", "ID", "id", "IW", "iw", "IY", "iy", "MI",
    "mi", "MM", "mm", "MS", "ms", "OF", "of", "PM", "pm", "RM", "rm", "SS", "ss", "TZ", "tz", "US",
    "us", "WW", "ww", "YY", "yy", "D", "d", "I", "i", "J", "j", "Q", "q", "W", "w", "Y", "y",
];

fn ordinal(n: i64, upper: bool) -> &'static str {
    let s = match (n.abs() % 100, n.abs() % 10) {
        (11..=13, _) => "th",
        (_, 1) => "st",
        (_, 2) => "nd",
        (_, 3) => "rd",
        _ => "th",
    };
    if upper {
        match s {
            "st" => "ST",
            "nd" => "ND",
            "rd" => "RD",
            _ => "TH",
        }
    } else {
        s
    }
}

/// Text with Postgres' case forms: `MONTH` upper, `Month` as written, `month` lower.
fn cased(word: &str, key: &str) -> String {
    let mut k = key.chars();
    let first_upper = k.next().is_some_and(|c| c.is_ascii_uppercase());
    let second_upper = k.next().is_some_and(|c| c.is_ascii_uppercase());
    if first_upper && second_upper {
        word.to_uppercase()
    } else if first_upper {
        word.to_owned()
    } else {
        word.to_lowercase()
    }
}

fn format_datetime(tm: &Tm, template: &str) -> DfResult<String> {
    let mut out = String::new();
    let bytes = template.as_bytes();
    let mut i = 0;
    while i < template.len() {
        let rest = &template[i..];
        // modifiers before a keyword
        let mut fill = false;
        let mut r = rest;
        loop {
            if r.len() >= 2 && r[..2].eq_ignore_ascii_case("FM") {
                fill = true;
                r = &r[2..];
            } else if r.len() >= 2 && r[..2].eq_ignore_ascii_case("TM") {
                // names in the locale's language (the C locale's: English), not padded
                fill = true;
                r = &r[2..];
            } else if r.len() >= 2 && r[..2].eq_ignore_ascii_case("FX") {
                r = &r[2..];
            } else {
                break;
            }
        }
        let Some(key) = DT_KEYS.iter().find(|k| r.starts_with(**k)) else {
            if r.len() < rest.len() {
                // a modifier with no keyword after it is itself nothing
                i += rest.len() - r.len();
                continue;
            }
            match bytes[i] {
                b'"' => {
                    i += 1;
                    while i < bytes.len() && bytes[i] != b'"' {
                        if bytes[i] == b'\\' && i + 1 < bytes.len() {
                            i += 1;
                        }
                        let c = template[i..].chars().next().unwrap_or(' ');
                        out.push(c);
                        i += c.len_utf8();
                    }
                    i += 1;
                }
                b'\\' if i + 1 < bytes.len() => {
                    let c = template[i + 1..].chars().next().unwrap_or(' ');
                    out.push(c);
                    i += 1 + c.len_utf8();
                }
                _ => {
                    let c = rest.chars().next().unwrap_or(' ');
                    out.push(c);
                    i += c.len_utf8();
                }
            }
            continue;
        };
        i += rest.len() - r.len() + key.len();
        // suffixes
        let mut th: Option<bool> = None;
        let after = &template[i..];
        if after.starts_with("TH") {
            th = Some(true);
            i += 2;
        } else if after.starts_with("th") {
            th = Some(false);
            i += 2;
        }
        if template[i..].len() >= 2 && template[i..i + 2].eq_ignore_ascii_case("SP") {
            i += 2;
        }
        let num = |out: &mut String, v: i64, width: usize| {
            if fill {
                out.push_str(&v.to_string());
            } else if v < 0 {
                out.push_str(&format!("-{:0width$}", -v, width = width));
            } else {
                out.push_str(&format!("{v:0width$}"));
            }
            if let Some(upper) = th {
                out.push_str(ordinal(v, upper));
            }
        };
        let word = |out: &mut String, w: String, pad: usize| {
            if fill {
                out.push_str(&w);
            } else {
                out.push_str(&format!("{w:<pad$}"));
            }
        };
        let date = tm.date;
        let dow = date.map(|d| d.weekday().num_days_from_sunday() as i64);
        let doy = date.map(|d| d.ordinal() as i64).unwrap_or(0);
        let iso = date.map(|d| d.iso_week());
        let upper_key = key.to_ascii_uppercase();
        match upper_key.as_str() {
            "Y,YYY" => {
                let y = tm.shown_year();
                out.push_str(&format!("{},{:03}", y / 1000, y % 1000));
            }
            "YYYY" => num(&mut out, tm.shown_year(), 4),
            "YYY" => num(&mut out, tm.shown_year() % 1000, 3),
            "YY" => num(&mut out, tm.shown_year() % 100, 2),
            "Y" => num(&mut out, tm.shown_year() % 10, 1),
            "IYYY" => num(&mut out, iso.map(|w| w.year() as i64).unwrap_or(0), 4),
            "IYY" => num(
                &mut out,
                iso.map(|w| w.year() as i64 % 1000).unwrap_or(0),
                3,
            ),
            "IY" => num(&mut out, iso.map(|w| w.year() as i64 % 100).unwrap_or(0), 2),
            "I" => num(&mut out, iso.map(|w| w.year() as i64 % 10).unwrap_or(0), 1),
            "BC" | "AD" | "B.C." | "A.D." => {
                let bc = tm.year <= 0 && !tm.interval;
                let dotted = key.contains('.');
                let w = match (bc, dotted) {
                    (true, false) => "BC",
                    (false, false) => "AD",
                    (true, true) => "B.C.",
                    (false, true) => "A.D.",
                };
                out.push_str(&if key.starts_with(|c: char| c.is_ascii_lowercase()) {
                    w.to_lowercase()
                } else {
                    w.to_owned()
                });
            }
            "AM" | "PM" | "A.M." | "P.M." => {
                let pm = tm.hour % 24 >= 12;
                let dotted = key.contains('.');
                let w = match (pm, dotted) {
                    (true, false) => "PM",
                    (false, false) => "AM",
                    (true, true) => "P.M.",
                    (false, true) => "A.M.",
                };
                out.push_str(&if key.starts_with(|c: char| c.is_ascii_lowercase()) {
                    w.to_lowercase()
                } else {
                    w.to_owned()
                });
            }
            "MM" => num(&mut out, tm.month as i64, 2),
            "MONTH" | "MON" if tm.month >= 1 => {
                let name = MONTHS[tm.month as usize - 1];
                if upper_key == "MONTH" {
                    word(&mut out, cased(name, key), 9);
                } else {
                    out.push_str(&cased(&name[..3], key));
                }
            }
            "DD" => num(&mut out, tm.day, 2),
            "DDD" => num(&mut out, doy, 3),
            "IDDD" => num(
                &mut out,
                iso.zip(dow)
                    .map(|(w, d)| (w.week() as i64 - 1) * 7 + (d + 6) % 7 + 1)
                    .unwrap_or(0),
                3,
            ),
            "D" => num(&mut out, dow.map(|d| d + 1).unwrap_or(0), 1),
            "ID" => num(&mut out, dow.map(|d| (d + 6) % 7 + 1).unwrap_or(0), 1),
            "DAY" | "DY" => {
                if let Some(d) = dow {
                    let name = DAYS[d as usize];
                    if upper_key == "DAY" {
                        word(&mut out, cased(name, key), 9);
                    } else {
                        out.push_str(&cased(&name[..3], key));
                    }
                }
            }
            "W" => num(&mut out, (tm.day - 1) / 7 + 1, 1),
            "WW" => num(&mut out, (doy - 1) / 7 + 1, 2),
            "IW" => num(&mut out, iso.map(|w| w.week() as i64).unwrap_or(0), 2),
            "Q" if tm.month >= 1 => num(&mut out, (tm.month as i64 - 1) / 3 + 1, 1),
            "CC" => {
                let cc = if tm.year > 0 {
                    (tm.year + 99) / 100
                } else {
                    -((tm.shown_year() + 99) / 100)
                };
                num(&mut out, cc, 2)
            }
            "J" => num(
                &mut out,
                date.map(|d| d.num_days_from_ce() as i64 + 1_721_425)
                    .unwrap_or(0),
                1,
            ),
            "RM" if tm.month >= 1 => {
                let r = ROMAN_MONTHS[tm.month as usize - 1];
                let r = if *key == "rm" {
                    r.to_lowercase()
                } else {
                    r.to_owned()
                };
                word(&mut out, r, 4);
            }
            "HH" | "HH12" => {
                let h = tm.hour % 12;
                num(&mut out, if h == 0 { 12 } else { h }, 2)
            }
            "HH24" => num(&mut out, tm.hour, 2),
            "MI" => num(&mut out, tm.minute, 2),
            "SS" => num(&mut out, tm.second, 2),
            "MS" => num(&mut out, tm.micros / 1000, 3),
            "US" => num(&mut out, tm.micros, 6),
            "FF1" | "FF2" | "FF3" | "FF4" | "FF5" | "FF6" => {
                let n = (upper_key.as_bytes()[2] - b'0') as u32;
                num(&mut out, tm.micros / 10_i64.pow(6 - n), n as usize)
            }
            "SSSS" | "SSSSS" => num(&mut out, tm.hour * 3600 + tm.minute * 60 + tm.second, 1),
            "TZ" if let Some((_, zone, at)) = &tm.tz => {
                let a = zone.abbreviation_at_us(*at);
                out.push_str(&if *key == "tz" { a.to_lowercase() } else { a });
            }
            "OF" if let Some((offset, ..)) = tm.tz => {
                out.push_str(&crate::sql::time_zone::offset_text(offset as i32))
            }
            "TZH" if let Some((offset, ..)) = tm.tz => {
                out.push(if offset < 0 { '-' } else { '+' });
                num(&mut out, offset.abs() / 3600, 2);
            }
            "TZM" if let Some((offset, ..)) = tm.tz => num(&mut out, offset.abs() / 60 % 60, 2),
            _ => {}
        }
    }
    Ok(out)
}

/// A number to format: exact (unscaled value and scale) or a float with the significant
/// digits Postgres prints of its type (15 for `double precision`, 6 for `real`; 0: no
/// limit, an untyped literal read as a number).
#[derive(Clone, Copy)]
enum Num {
    Exact(i128, i8),
    Float(f64, usize),
}

impl Num {
    fn negative(self) -> bool {
        match self {
            Num::Exact(v, _) => v < 0,
            Num::Float(f, _) => f < 0.0,
        }
    }
    /// |value| rounded to `post` decimals: integer digits ("0" for none) and `post`
    /// fraction digits.
    fn digits(self, post: usize) -> (String, String) {
        let text = match self {
            Num::Exact(v, scale) => {
                let mut v = v.unsigned_abs();
                let scale = scale.max(0) as usize;
                if scale > post {
                    let d = 10u128.pow((scale - post) as u32);
                    v = (v + d / 2) / d;
                    crate::sql::pg_text::decimal_text(v as i128, post as i8, false)
                } else {
                    let z = 10u128.pow((post - scale) as u32);
                    crate::sql::pg_text::decimal_text(
                        v.saturating_mul(z) as i128,
                        post as i8,
                        false,
                    )
                }
            }
            Num::Float(f, _) => format!("{:.*}", post, f.abs()),
        };
        let (i, f) = text.split_once('.').unwrap_or((&text, ""));
        let i = i.trim_start_matches('0');
        (
            if i.is_empty() { "0".into() } else { i.into() },
            f.to_owned(),
        )
    }
    fn as_f64(self) -> f64 {
        match self {
            Num::Exact(v, s) => v as f64 / 10f64.powi(s as i32),
            Num::Float(f, _) => f,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum NTok {
    Nine,
    Zero,
    Point,
    Group,
    /// S: the sign anchored to the number, on the side it is written
    Sign,
    Minus,
    Plus,
    SignAny,
    Angle,
    Eeee,
    Th(bool),
    Lit(char),
    Blank,
}

fn roman(mut n: i64) -> Option<String> {
    if !(1..=3999).contains(&n) {
        return None;
    }
    let table = [
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ];
    let mut s = String::new();
    for (v, r) in table {
        while n >= v {
            s.push_str(r);
            n -= v;
        }
    }
    Some(s)
}

/// Postgres' rules for `EEEE`, checked in the order the patterns are written: it comes last
/// (text may follow), once, and not after `FM`, `RN`, a sign pattern or `PR`
/// (`flags_at`: where FM and RN were, as counts of the tokens before them). 42601.
fn eeee_rules(toks: &[NTok], flags_at: &[usize]) -> DfResult<()> {
    let syntax = |msg: &str| Err(err(sqlstate::SYNTAX_ERROR, msg));
    let (mut seen, mut other) = (false, false);
    for i in 0..=toks.len() {
        if flags_at.contains(&i) {
            if seen {
                return syntax("\"EEEE\" must be the last pattern used");
            }
            other = true;
        }
        match toks.get(i) {
            Some(NTok::Eeee) if seen => return syntax("cannot use \"EEEE\" twice"),
            Some(NTok::Eeee) if other => {
                return Err(DataFusionError::External(Box::new(
                    WeirError::new(
                        sqlstate::SYNTAX_ERROR,
                        "\"EEEE\" is incompatible with other formats",
                    )
                    .with_detail(
                        "\"EEEE\" may only be used together with digit and decimal point patterns.",
                    ),
                )));
            }
            Some(NTok::Eeee) => seen = true,
            Some(NTok::Lit(_)) | None => {}
            Some(_) if seen => return syntax("\"EEEE\" must be the last pattern used"),
            Some(NTok::Sign | NTok::Minus | NTok::Plus | NTok::SignAny | NTok::Angle) => {
                other = true;
            }
            Some(_) => {}
        }
    }
    Ok(())
}

fn format_number(n: Num, template: &str) -> DfResult<String> {
    let mut toks = Vec::new();
    let mut fill = false;
    let mut roman_case: Option<bool> = None;
    // where FM and RN were written (as a count of the tokens before them), for EEEE's rules
    let mut flags_at = Vec::new();
    let mut chars = template.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let rest = &template[at..];
        let two = rest.get(..2).map(str::to_ascii_uppercase);
        match (c, two.as_deref()) {
            (_, Some("FM")) => {
                fill = true;
                flags_at.push(toks.len());
                chars.next();
            }
            (_, Some("MI")) => {
                toks.push(NTok::Minus);
                chars.next();
            }
            (_, Some("PL")) => {
                toks.push(NTok::Plus);
                chars.next();
            }
            (_, Some("SG")) => {
                toks.push(NTok::SignAny);
                chars.next();
            }
            (_, Some("PR")) => {
                toks.push(NTok::Angle);
                chars.next();
            }
            (_, Some("RN")) => {
                roman_case = Some(c == 'R');
                flags_at.push(toks.len());
                chars.next();
            }
            (_, Some("TH")) => {
                toks.push(NTok::Th(c == 'T'));
                chars.next();
            }
            _ if rest.len() >= 4 && rest[..4].eq_ignore_ascii_case("EEEE") => {
                toks.push(NTok::Eeee);
                for _ in 0..3 {
                    chars.next();
                }
            }
            ('9', _) => toks.push(NTok::Nine),
            ('0', _) => toks.push(NTok::Zero),
            ('.' | 'D' | 'd', _) => toks.push(NTok::Point),
            (',' | 'G' | 'g', _) => toks.push(NTok::Group),
            ('S' | 's', _) => toks.push(NTok::Sign),
            ('L' | 'l', _) => toks.push(NTok::Blank),
            ('V' | 'v', _) => {
                return Err(err(
                    sqlstate::FEATURE_NOT_SUPPORTED,
                    "to_char: the \"V\" pattern is not supported",
                ));
            }
            ('"', _) => {
                for (_, q) in chars.by_ref() {
                    if q == '"' {
                        break;
                    }
                    toks.push(NTok::Lit(q));
                }
            }
            ('\\', _) => {
                if let Some((_, q)) = chars.next() {
                    toks.push(NTok::Lit(q));
                }
            }
            (c, _) => toks.push(NTok::Lit(c)),
        }
    }
    eeee_rules(&toks, &flags_at)?;
    if let Some(upper) = roman_case {
        let v = n.as_f64().round() as i64;
        let r = roman(v).unwrap_or_else(|| "#".repeat(15));
        let r = if upper { r } else { r.to_lowercase() };
        return Ok(if fill { r } else { format!("{r:>15}") });
    }
    let is_digit = |t: &NTok| matches!(t, NTok::Nine | NTok::Zero);
    let eeee = toks.contains(&NTok::Eeee);
    // Postgres formats a float from its printf text: `NaN`, `Infinity`, or the value at
    // `dig` significant digits; fraction positions past them are dropped, and the point
    // with the fraction when the text has none (unless it overflows: then `#`s and the
    // point)
    let mut float_text = None;
    if let Num::Float(f, dig) = n {
        let point = toks.iter().position(|t| *t == NTok::Point);
        let pre = toks[..point.unwrap_or(toks.len())]
            .iter()
            .filter(|t| is_digit(t))
            .count();
        let post = point.map_or(0, |p| toks[p..].iter().filter(|t| is_digit(t)).count());
        if eeee && !f.is_finite() {
            // `#` in every position but the point's, and the exponent's four
            let mut body = "#".repeat(pre + post + 5);
            body.insert(pre, '.');
            body.truncate(pre + post + 5);
            return Ok(if fill { body } else { format!(" {body}") });
        }
        let int_len = if f.is_nan() {
            float_text = Some("NaN");
            3
        } else if f.is_infinite() {
            float_text = Some("Infinity");
            8
        } else {
            format!("{:.0}", f.abs()).len()
        };
        let keep = match (dig, eeee) {
            (0, _) | (_, true) => post,
            _ if int_len >= dig => 0,
            _ => post.min(dig - int_len),
        };
        // the printf text has a point only with fraction digits; `#`s always do
        let no_point = int_len <= pre && (keep == 0 || float_text.is_some());
        let mut drop = if no_point { post } else { post - keep };
        let mut at = toks.len();
        while drop > 0 && at > point.unwrap_or(0) {
            at -= 1;
            if is_digit(&toks[at]) {
                toks.remove(at);
                drop -= 1;
            }
        }
        if no_point && let Some(p) = point {
            toks.remove(p);
        }
    }
    let point = toks.iter().position(|t| *t == NTok::Point);
    let pre = toks
        .iter()
        .take(point.unwrap_or(toks.len()))
        .filter(|t| is_digit(t))
        .count();
    let post = point
        .map(|p| toks[p..].iter().filter(|t| is_digit(t)).count())
        .unwrap_or(0);
    let negative = n.negative();
    if eeee {
        let f = n.as_f64().abs();
        let s = format!("{:.*e}", post, f);
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i32 = e.parse().unwrap_or(0);
        let sign = if negative { '-' } else { ' ' };
        let body = format!(
            "{m}e{}{:02}",
            if e < 0 { '-' } else { '+' },
            e.unsigned_abs()
        );
        return Ok(if fill && !negative {
            body
        } else {
            format!("{sign}{body}")
        });
    }
    let (int_digits, mut frac_digits) = match float_text {
        Some(text) => (text.to_owned(), String::new()),
        None => n.digits(post),
    };
    let overflow = int_digits.len() > pre && !(int_digits == "0" && pre == 0);
    // FM drops trailing zeros in `9` fraction positions
    let frac_kinds: Vec<NTok> = point
        .map(|p| toks[p..].iter().filter(|t| is_digit(t)).copied().collect())
        .unwrap_or_default();
    if fill {
        while frac_digits.ends_with('0')
            && frac_kinds.get(frac_digits.len() - 1) == Some(&NTok::Nine)
        {
            frac_digits.pop();
        }
    }
    let int_kinds: Vec<NTok> = toks
        .iter()
        .take(point.unwrap_or(toks.len()))
        .filter(|t| is_digit(t))
        .copied()
        .collect();
    let zero_start = int_kinds.iter().position(|t| *t == NTok::Zero);
    // which integer digit goes in each position (None = no digit there)
    let zero_value = int_digits == "0";
    let suppress_zero = zero_value && post > 0 && !(fill && frac_digits.is_empty());
    let shown: Vec<Option<char>> = (0..pre)
        .map(|p| {
            let from_right = pre - 1 - p;
            let digit = if from_right < int_digits.len() {
                let d = int_digits.as_bytes()[int_digits.len() - 1 - from_right] as char;
                if zero_value && suppress_zero {
                    None
                } else {
                    Some(d)
                }
            } else {
                None
            };
            match (digit, zero_start) {
                (Some(d), _) => Some(d),
                (None, Some(z)) if p >= z => Some('0'),
                _ => None,
            }
        })
        .collect();
    let first_digit = shown.iter().position(Option::is_some);
    let anchored_default = !toks
        .iter()
        .any(|t| matches!(t, NTok::Sign | NTok::Minus | NTok::SignAny | NTok::Angle));
    let sign_before = toks
        .iter()
        .position(|t| *t == NTok::Sign)
        .is_some_and(|s| toks[..s].iter().all(|t| !is_digit(t) && *t != NTok::Point));
    let anchored: Option<char> = if toks.contains(&NTok::Angle) {
        Some(if negative {
            '<'
        } else if fill {
            '\0'
        } else {
            ' '
        })
    } else if sign_before {
        Some(if negative { '-' } else { '+' })
    } else if anchored_default {
        Some(if negative {
            '-'
        } else if fill {
            '\0'
        } else {
            ' '
        })
    } else {
        None
    };
    let mut out = String::new();
    let mut pos = 0usize; // integer digit positions written
    let mut frac_pos = 0usize;
    let mut after_point = false;
    let mut anchored_written = false;
    let write_anchor = |out: &mut String, written: &mut bool| {
        if !*written {
            if let Some(c) = anchored
                && c != '\0'
            {
                out.push(c);
            }
            *written = true;
        }
    };
    for t in &toks {
        match t {
            NTok::Nine | NTok::Zero if !after_point => {
                let p = pos;
                pos += 1;
                if overflow {
                    if Some(p) == Some(0) {
                        write_anchor(&mut out, &mut anchored_written);
                    }
                    out.push('#');
                    continue;
                }
                match shown[p] {
                    Some(d) => {
                        if Some(p) == first_digit {
                            write_anchor(&mut out, &mut anchored_written);
                        }
                        out.push(d);
                    }
                    None => {
                        if !fill {
                            out.push(' ');
                        }
                    }
                }
            }
            NTok::Nine | NTok::Zero => {
                if overflow {
                    out.push('#');
                } else if let Some(d) = frac_digits.as_bytes().get(frac_pos) {
                    out.push(*d as char);
                }
                frac_pos += 1;
            }
            NTok::Point => {
                if !overflow && first_digit.is_none() {
                    write_anchor(&mut out, &mut anchored_written);
                }
                after_point = true;
                out.push('.');
            }
            NTok::Group => {
                if overflow || first_digit.is_some_and(|f| f < pos) {
                    out.push(',');
                } else if !fill {
                    out.push(' ');
                }
            }
            NTok::Sign => {
                if !sign_before {
                    out.push(if negative { '-' } else { '+' });
                }
            }
            NTok::Minus => out.push(if negative {
                '-'
            } else if fill {
                '\0'
            } else {
                ' '
            }),
            NTok::Plus => out.push(if negative { '-' } else { '+' }),
            NTok::SignAny => out.push(if negative { '-' } else { '+' }),
            NTok::Angle => {
                if negative {
                    out.push('>');
                } else if !fill {
                    out.push(' ');
                }
            }
            NTok::Th(upper) => {
                if !negative {
                    let v: i64 = int_digits.parse().unwrap_or(0);
                    out.push_str(ordinal(v, *upper));
                }
            }
            NTok::Lit(c) => out.push(*c),
            NTok::Blank => out.push(' '),
            NTok::Eeee => {}
        }
    }
    if !anchored_written && anchored.is_some() && pre == 0 && point.is_none() {
        // no digit positions at all: the sign alone
        write_anchor(&mut out, &mut anchored_written);
    }
    Ok(out.replace('\0', ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(v: f64, f: &str) -> String {
        // exact input like numeric literals: scale from the text
        let s = format!("{v}");
        let scale = s.split_once('.').map(|(_, f)| f.len()).unwrap_or(0);
        let unscaled: i128 = s.replace('.', "").parse().unwrap_or(0);
        format_number(Num::Exact(unscaled, scale as i8), f).unwrap_or_default()
    }

    #[test]
    fn numbers_as_postgres_formats_them() {
        // expected values from PostgreSQL 15
        assert_eq!(num(0.5, "9.99"), "  .50");
        assert_eq!(num(-0.5, "9.99"), " -.50");
        assert_eq!(num(12.0, "9999"), "   12");
        assert_eq!(num(-12.0, "9999"), "  -12");
        assert_eq!(num(12.0, "0000"), " 0012");
        assert_eq!(num(12345.0, "999"), " ###");
        assert_eq!(num(1234.5, "9,999.99"), " 1,234.50");
        assert_eq!(num(34.5, "9,999.99"), "    34.50");
        assert_eq!(num(123.4, "FM999.99"), "123.4");
        assert_eq!(num(5.0, "9099"), "  005");
        assert_eq!(num(-12.0, "S999"), " -12");
        assert_eq!(num(12.0, "999S"), " 12+");
        assert_eq!(num(-12.0, "999MI"), " 12-");
        assert_eq!(num(-12.0, "999PR"), " <12>");
        assert_eq!(num(0.0, "9"), " 0");
        assert_eq!(num(0.0, "FM9.9"), "0.");
        assert_eq!(num(0.05, "FM9.9"), ".1");
        assert_eq!(num(0.0, "FM99.00"), ".00");
        assert_eq!(num(485.0, "RN"), "        CDLXXXV");
    }
}
