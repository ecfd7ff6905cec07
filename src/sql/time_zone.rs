//! `x AT TIME ZONE zone` and `timezone(zone, x)`, as Postgres:
//!
//! - of a `timestamptz`: the wall-clock time in `zone` at that instant, a `timestamp`;
//! - of a `timestamp` (or a date): that wall-clock time read in `zone`, a `timestamptz`. A
//!   local time a daylight-saving change repeats is read as standard time; one it skips,
//!   with the offset before the change (Postgres' `DetermineTimeZoneOffset`).
//!
//! Zones: Postgres' common abbreviations (fixed offsets: `PST`, `CET`), IANA names in any
//! case (`america/new_york`), and numeric
//! offsets in the POSIX sense Postgres gives a zone string (`'+05'` and `'UTC+5'` are five
//! hours WEST of Greenwich); anything else is `time zone "x" not recognized` (22023). The
//! infinities stay themselves.

use std::str::FromStr;
use std::sync::Arc;

use chrono::{FixedOffset, NaiveDateTime, Offset, TimeZone};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, TimestampMicrosecondBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use datafusion::common::{DataFusionError, Result as DfResult};

use crate::error::{WeirError, sqlstate};

datafusion::common::extensions_options! {
    /// Weir's own settings in a DataFusion session's configuration, read by the planning
    /// rules (`catalog/pg_semantics.rs`).
    pub struct WeirOptions {
        /// The session's TimeZone as [`Zone::arg_text`] names it; empty for UTC.
        pub time_zone: String, default = String::new()
    }
}

impl datafusion::common::config::ConfigExtension for WeirOptions {
    const PREFIX: &'static str = "weir";
}

/// The session zone a plan is made in (UTC when the configuration has none).
pub fn plan_zone(config: &datafusion::common::config::ConfigOptions) -> Zone {
    config
        .extensions
        .get::<WeirOptions>()
        .filter(|o| !o.time_zone.is_empty())
        .and_then(|o| Zone::parse(&o.time_zone).ok())
        .unwrap_or_else(Zone::utc)
}

/// Make plans of `config` in `zone` (`None`: UTC).
pub fn set_plan_zone(config: &mut datafusion::common::config::ConfigOptions, zone: Option<Zone>) {
    let text = zone
        .filter(|z| !z.is_utc())
        .map(|z| z.arg_text())
        .unwrap_or_default();
    match config.extensions.get_mut::<WeirOptions>() {
        Some(o) => o.time_zone = text,
        None => config.extensions.insert(WeirOptions { time_zone: text }),
    }
}

fn err(code: &'static str, msg: impl Into<String>) -> DataFusionError {
    DataFusionError::External(Box::new(WeirError::new(code, msg)))
}

/// The result type of `timezone(zone, x)` for `x` of type `t`.
pub fn result_type(t: &DataType) -> DataType {
    match t {
        DataType::Timestamp(_, Some(_)) | DataType::Date32 => {
            DataType::Timestamp(TimeUnit::Microsecond, None)
        }
        _ => crate::sql::types::SqlType::TimestampTz(None).arrow_type(),
    }
}

/// A time zone: an IANA zone (its offsets change with the dates) or a fixed offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zone {
    Named(chrono_tz::Tz),
    Fixed(FixedOffset),
}

impl Zone {
    /// UTC, the default session zone.
    pub fn utc() -> Zone {
        Zone::Fixed(FixedOffset::east_opt(0).expect("a zero offset"))
    }

    pub fn is_utc(&self) -> bool {
        use chrono_tz::Tz;
        match self {
            Zone::Fixed(f) => f.local_minus_utc() == 0,
            Zone::Named(tz) => matches!(
                tz,
                Tz::UTC
                    | Tz::Etc__UTC
                    | Tz::Etc__UCT
                    | Tz::UCT
                    | Tz::Universal
                    | Tz::Etc__Universal
                    | Tz::Zulu
                    | Tz::Etc__Zulu
            ),
        }
    }

    /// A fixed offset east of UTC (seconds) as a zone, and how SHOW shows a zone set as a
    /// number (`<+02>-02`: its name, then the POSIX offset).
    fn numeric(east: i32) -> Option<(Zone, String)> {
        let zone = FixedOffset::east_opt(east).map(Zone::Fixed)?;
        Some((
            zone,
            format!("<{0}>{1}", offset_text(east), offset_text(-east)),
        ))
    }

    /// The session zone a `SET TIME ZONE` / `SET timezone` value names, and how SHOW then
    /// shows it, as Postgres reads the setting: a number is hours EAST of UTC (`'+02'`,
    /// `-7`, `5.5`; shown `<+02>-02`), a POSIX offset is hours west (`UTC+5`), else an IANA
    /// zone name in any case (shown in its own case). Abbreviations that are not zone
    /// names (`PST`) are refused, as Postgres refuses them.
    pub fn setting(value: &str) -> Option<(Zone, String)> {
        let t = value.trim();
        let lower = t.to_ascii_lowercase();
        if matches!(lower.as_str(), "local" | "default") {
            return Some((Zone::utc(), "UTC".into()));
        }
        // `SET TIME ZONE INTERVAL '+05:30' HOUR TO MINUTE`: an offset east of UTC
        if lower.starts_with("interval") {
            let rest = t.get("interval".len()..)?.trim_start();
            let quoted = rest.split_whitespace().next()?.trim_matches('\'');
            let (sign, body) = match quoted.as_bytes().first()? {
                b'-' => (-1, &quoted[1..]),
                b'+' => (1, &quoted[1..]),
                _ => (1, quoted),
            };
            let mut parts = body.split(':');
            let h: i32 = parts.next()?.trim().parse().ok()?;
            let m: i32 = parts.next().map_or(Some(0), |p| p.trim().parse().ok())?;
            return Zone::numeric(sign * (h * 3600 + m * 60));
        }
        if let Ok(hours) = t.parse::<f64>() {
            if !hours.is_finite() || hours.abs() > 168.0 {
                return None;
            }
            return Zone::numeric((hours * 3600.0).round() as i32);
        }
        if let Some(east) = posix_offset(t) {
            return FixedOffset::east_opt(east).map(|f| (Zone::Fixed(f), t.to_owned()));
        }
        // what SHOW showed for a number: `<+02>-02` (the POSIX part after the name)
        if let Some(rest) = t.strip_prefix('<')
            && let Some((_, posix)) = rest.split_once('>')
        {
            let east = posix_offset(posix)?;
            return FixedOffset::east_opt(east).map(|f| (Zone::Fixed(f), t.to_owned()));
        }
        let tz = chrono_tz::Tz::from_str(t).ok().or_else(|| {
            chrono_tz::TZ_VARIANTS
                .iter()
                .find(|z| z.name().eq_ignore_ascii_case(t))
                .copied()
        })?;
        let zone = Zone::Named(tz);
        // UTC by another name (`Etc/UTC`, pgJDBC's on many machines) is the fixed zone:
        // one check per value where timestamps are shown
        let zone = if zone.is_utc() { Zone::utc() } else { zone };
        Some((zone, tz.name().to_owned()))
    }

    /// The text [`Zone::parse`] (and so `timezone(zone, x)`) reads back as this zone: how a
    /// plan names the session zone.
    pub fn arg_text(&self) -> String {
        match self {
            Zone::Named(tz) => tz.name().to_owned(),
            // POSIX: the sign is west-positive
            Zone::Fixed(f) => {
                let east = f.local_minus_utc();
                if east == 0 {
                    "UTC".into()
                } else {
                    let a = east.unsigned_abs();
                    format!(
                        "{}{:02}:{:02}:{:02}",
                        if east > 0 { '-' } else { '+' },
                        a / 3600,
                        a / 60 % 60,
                        a % 60
                    )
                }
            }
        }
    }

    /// The zone as an arrow timestamp type names it (`America/New_York`, `+05:30`): arrow's
    /// calendar arithmetic on a timestamp of that type is done in the zone.
    pub fn arrow_tz(&self) -> String {
        match self {
            Zone::Named(tz) => tz.name().to_owned(),
            Zone::Fixed(f) => {
                let east = f.local_minus_utc();
                let a = east.unsigned_abs();
                format!(
                    "{}{:02}:{:02}",
                    if east < 0 { '-' } else { '+' },
                    a / 3600,
                    a / 60 % 60
                )
            }
        }
    }

    /// The instant of a wall-clock time in the zone (microseconds since the epoch, both),
    /// a time a daylight-saving change repeats or skips read as [`timezone`] reads it.
    pub fn utc_of_local_us(&self, local: i64) -> Option<i64> {
        self.utc_of_local(local, 1_000_000)
    }

    /// [`Zone::utc_of_local_us`] for a count of `per_sec` units since the epoch.
    fn utc_of_local(&self, local: i64, per_sec: i64) -> Option<i64> {
        if local == i64::MAX || local == i64::MIN {
            return Some(local);
        }
        if let Zone::Fixed(f) = self {
            return local.checked_sub(f.local_minus_utc() as i64 * per_sec);
        }
        let wall = chrono::DateTime::from_timestamp(local.div_euclid(per_sec), 0)?.naive_utc();
        local.checked_sub(self.offset_at_local(&wall) * per_sec)
    }

    /// The offset east of UTC, in seconds, at an instant (microseconds since the epoch).
    pub fn offset_at_us(&self, us: i64) -> i64 {
        match self {
            Zone::Fixed(f) => f.local_minus_utc() as i64,
            Zone::Named(_) => match chrono::DateTime::from_timestamp_micros(us) {
                Some(t) => self.offset_at_utc(&t.naive_utc()),
                None => 0,
            },
        }
    }

    /// The zone's abbreviation at an instant, as `to_char`'s `TZ` shows it: `EDT`, `CET`;
    /// a fixed offset (and a zone that has no letters for it) as its offset, `+02`.
    pub fn abbreviation_at_us(&self, us: i64) -> String {
        if let Zone::Named(tz) = self
            && let Some(t) = chrono::DateTime::from_timestamp_micros(us)
        {
            use chrono_tz::OffsetName;
            let o = tz.offset_from_utc_datetime(&t.naive_utc());
            if let Some(a) = o.abbreviation()
                && a.chars().all(|c| c.is_ascii_alphabetic())
            {
                return a.to_owned();
            }
        }
        if self.is_utc() {
            return "UTC".into();
        }
        offset_text(self.offset_at_us(us) as i32)
    }

    pub fn parse(s: &str) -> DfResult<Zone> {
        let t = s.trim();
        let not_recognized = || {
            err(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!("time zone \"{s}\" not recognized"),
            )
        };
        if let Some(off) = posix_offset(t) {
            return FixedOffset::east_opt(off)
                .map(Zone::Fixed)
                .ok_or_else(not_recognized);
        }
        if let Some((_, off)) = ABBREVIATIONS
            .iter()
            .find(|(a, _)| a.eq_ignore_ascii_case(t))
        {
            return FixedOffset::east_opt(*off)
                .map(Zone::Fixed)
                .ok_or_else(not_recognized);
        }
        if let Ok(tz) = chrono_tz::Tz::from_str(t) {
            return Ok(Zone::Named(tz));
        }
        chrono_tz::TZ_VARIANTS
            .iter()
            .find(|z| z.name().eq_ignore_ascii_case(t))
            .map(|z| Zone::Named(*z))
            .ok_or_else(not_recognized)
    }

    /// The zone's offset east of UTC, in seconds, at a UTC instant.
    fn offset_at_utc(&self, utc: &NaiveDateTime) -> i64 {
        match self {
            Zone::Named(tz) => tz.offset_from_utc_datetime(utc).fix().local_minus_utc() as i64,
            Zone::Fixed(f) => f.local_minus_utc() as i64,
        }
    }

    /// The zone's offset east of UTC, in seconds, for a local wall-clock time.
    fn offset_at_local(&self, local: &NaiveDateTime) -> i64 {
        let Zone::Named(tz) = self else {
            return self.offset_at_utc(local);
        };
        match tz.offset_from_local_datetime(local) {
            chrono::LocalResult::Single(o) => o.fix().local_minus_utc() as i64,
            // repeated: standard time, the smaller offset
            chrono::LocalResult::Ambiguous(a, b) => {
                (a.fix().local_minus_utc() as i64).min(b.fix().local_minus_utc() as i64)
            }
            // skipped: the offset in force before the change
            chrono::LocalResult::None => {
                let before = *local - chrono::Duration::hours(3);
                tz.offset_from_utc_datetime(&before).fix().local_minus_utc() as i64
            }
        }
    }
}

/// A named zone as `pg_timezone_names` shows it now.
pub struct ZoneNow {
    pub name: &'static str,
    pub abbrev: String,
    /// seconds east of UTC
    pub utc_offset: i32,
    pub is_dst: bool,
}

/// Every named zone, with its abbreviation, offset and summer time at this moment, by name.
pub fn zones_now() -> Vec<ZoneNow> {
    use chrono_tz::OffsetComponents;
    let now = chrono::Utc::now();
    let mut zones: Vec<ZoneNow> = chrono_tz::TZ_VARIANTS
        .iter()
        .map(|tz| {
            let o = tz.offset_from_utc_datetime(&now.naive_utc());
            ZoneNow {
                name: tz.name(),
                abbrev: Zone::Named(*tz).abbreviation_at_us(now.timestamp_micros()),
                utc_offset: o.fix().local_minus_utc(),
                is_dst: !o.dst_offset().is_zero(),
            }
        })
        .collect();
    zones.sort_by_key(|z| z.name);
    zones
}

/// The abbreviations a time zone may be written as (`pg_timezone_abbrevs`): each with its
/// offset east of UTC in seconds and whether it names summer time.
pub fn abbreviations() -> impl Iterator<Item = (&'static str, i32, bool)> {
    const SUMMER: &[&str] = &[
        "AEDT", "AKDT", "BST", "CDT", "CEST", "EDT", "EEST", "MDT", "NZDT", "PDT",
    ];
    ABBREVIATIONS
        .iter()
        .map(|(a, off)| (*a, *off, SUMMER.contains(a)))
}

/// An offset east of UTC as Postgres writes it after a time: `+02`, `-05:30`.
pub fn offset_text(east: i32) -> String {
    let mut b = bytes::BytesMut::new();
    crate::sql::pg_text::write_offset(&mut b, east as i64);
    String::from_utf8_lossy(&b).into_owned()
}

/// Zone abbreviations of Postgres' default set, each a fixed offset east of UTC in
/// seconds; an abbreviation is read before a zone name (`CET` is +1 all year, as in
/// Postgres, not the zone `CET`, which has summer time).
const ABBREVIATIONS: &[(&str, i32)] = &[
    ("ACST", 34200),
    ("AEDT", 39600),
    ("AEST", 36000),
    ("AKDT", -28800),
    ("AKST", -32400),
    ("AWST", 28800),
    ("BST", 3600),
    ("CDT", -18000),
    ("CEST", 7200),
    ("CET", 3600),
    ("CST", -21600),
    ("EDT", -14400),
    ("EEST", 10800),
    ("EET", 7200),
    ("EST", -18000),
    ("GMT", 0),
    ("HKT", 28800),
    ("HST", -36000),
    ("IST", 7200),
    ("JST", 32400),
    ("KST", 32400),
    ("MDT", -21600),
    ("MSK", 10800),
    ("MST", -25200),
    ("NZDT", 46800),
    ("NZST", 43200),
    ("PDT", -25200),
    ("PST", -28800),
    ("SGT", 28800),
    ("UT", 0),
    ("UTC", 0),
    ("WET", 0),
    ("Z", 0),
    ("ZULU", 0),
];

/// A numeric zone string as POSIX reads it, as seconds EAST of UTC: `+05`, `-3:30`, `5`,
/// `UTC+5`, `GMT-02:00` (the sign is west-positive, so `+05` is -5 hours).
fn posix_offset(t: &str) -> Option<i32> {
    let upper = t.to_ascii_uppercase();
    let body = upper
        .strip_prefix("UTC")
        .or_else(|| upper.strip_prefix("GMT"))
        .unwrap_or(&upper);
    if body.is_empty() {
        return None;
    }
    let (sign, digits) = match body.as_bytes()[0] {
        b'+' => (1, &body[1..]),
        b'-' => (-1, &body[1..]),
        b'0'..=b'9' => (1, body),
        _ => return None,
    };
    let mut parts = digits.split(':');
    let h: i32 = parts.next()?.parse().ok()?;
    let m: i32 = parts.next().map_or(Some(0), |p| p.parse().ok())?;
    let s: i32 = parts.next().map_or(Some(0), |p| p.parse().ok())?;
    if parts.next().is_some() || !(0..60).contains(&m) || !(0..60).contains(&s) || h > 168 {
        return None;
    }
    Some(-sign * (h * 3600 + m * 60 + s))
}

/// The session zone a plan passed a function as its extra argument (a constant, as
/// [`Zone::arg_text`] names it); UTC without one.
pub fn zone_arg(a: Option<&ArrayRef>) -> DfResult<Zone> {
    let Some(a) = a else {
        return Ok(Zone::utc());
    };
    let a = cast(a, &DataType::Utf8)?;
    let a = a.as_string::<i32>();
    match (0..a.len()).find(|&i| a.is_valid(i)) {
        Some(i) => Zone::parse(a.value(i)),
        None => Ok(Zone::utc()),
    }
}

/// `timestamptz` values read from `text` with each wall-clock time taken as UTC (`parsed`),
/// moved to `zone`: the rows whose text names no zone or instant
/// ([`crate::sql::datetime_in::names_its_instant`]) are that wall-clock time in `zone`
/// (a time a daylight-saving change repeats or skips read as [`timezone`] reads it).
pub fn read_in_zone(text: &dyn Array, parsed: ArrayRef, zone: &Zone) -> DfResult<ArrayRef> {
    let (Some(text), DataType::Timestamp(unit, tz)) =
        (text.as_string_opt::<i32>(), parsed.data_type().clone())
    else {
        return Ok(parsed);
    };
    if zone.is_utc() || text.len() != parsed.len() {
        return Ok(parsed);
    }
    let per_sec: i64 = match unit {
        TimeUnit::Second => 1,
        TimeUnit::Millisecond => 1_000,
        TimeUnit::Microsecond => 1_000_000,
        TimeUnit::Nanosecond => 1_000_000_000,
    };
    let values = cast(&parsed, &DataType::Int64)?;
    let values = values.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
    let mut out = Vec::with_capacity(values.len());
    for i in 0..values.len() {
        let v = values.value(i);
        if values.is_null(i) || crate::sql::datetime_in::names_its_instant(text.value(i)) {
            out.push(v);
            continue;
        }
        out.push(
            zone.utc_of_local(v, per_sec)
                .ok_or_else(|| err(sqlstate::DATETIME_FIELD_OVERFLOW, "timestamp out of range"))?,
        );
    }
    let ints = datafusion::arrow::array::Int64Array::new(out.into(), values.nulls().cloned());
    Ok(cast(&ints, &DataType::Timestamp(unit, tz))?)
}

/// `timezone(zone, x)` over whole columns.
pub fn timezone(args: &[ArrayRef], _rows: usize) -> DfResult<ArrayRef> {
    let zones = cast(&args[0], &DataType::Utf8)?;
    let zones = zones.as_string::<i32>();
    // (a date is a timestamptz here, as Postgres reads it: midnight in the session zone)
    let to_local = matches!(
        args[1].data_type(),
        DataType::Timestamp(_, Some(_)) | DataType::Date32
    );
    let x = match args[1].data_type() {
        DataType::Timestamp(..) | DataType::Date32 | DataType::Null => {
            crate::sql::datetime_in::keeping_infinities(&args[1], |a| {
                Ok(cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None))?)
            })?
        }
        t => {
            return Err(err(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function timezone(text, {t}) does not exist"),
            ));
        }
    };
    let x = x.as_primitive::<TimestampMicrosecondType>();
    let mut out = TimestampMicrosecondBuilder::with_capacity(x.len());
    let mut last: Option<(String, Zone)> = None;
    for i in 0..x.len() {
        if x.is_null(i) || zones.is_null(i) {
            out.append_null();
            continue;
        }
        let v = x.value(i);
        if v == i64::MAX || v == i64::MIN {
            out.append_value(v);
            continue;
        }
        let name = zones.value(i);
        let zone = match &last {
            Some((n, z)) if n == name => *z,
            _ => {
                let z = Zone::parse(name)?;
                last = Some((name.to_owned(), z));
                z
            }
        };
        let wall = chrono::DateTime::from_timestamp_micros(v)
            .map(|t| t.naive_utc())
            .ok_or_else(|| err(sqlstate::DATETIME_FIELD_OVERFLOW, "timestamp out of range"))?;
        let shifted = if to_local {
            v.checked_add(zone.offset_at_utc(&wall) * 1_000_000)
        } else {
            v.checked_sub(zone.offset_at_local(&wall) * 1_000_000)
        };
        out.append_value(
            shifted
                .ok_or_else(|| err(sqlstate::DATETIME_FIELD_OVERFLOW, "timestamp out of range"))?,
        );
    }
    let out = out.finish();
    Ok(match result_type(args[1].data_type()) {
        DataType::Timestamp(_, tz) => Arc::new(out.with_timezone_opt(tz)),
        _ => Arc::new(out),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_zone_settings_read_and_show_as_postgres() {
        let shown = |v: &str| Zone::setting(v).map(|(_, s)| s);
        assert_eq!(
            shown("america/new_york").as_deref(),
            Some("America/New_York")
        );
        // a number is hours east; a POSIX offset hours west
        assert_eq!(shown("+02").as_deref(), Some("<+02>-02"));
        assert_eq!(shown("5.5").as_deref(), Some("<+05:30>-05:30"));
        assert_eq!(
            shown("INTERVAL '-03:30' HOUR TO MINUTE").as_deref(),
            Some("<-03:30>+03:30")
        );
        assert_eq!(
            shown("INTERVAL-03:30 HOUR TO MINUTE").as_deref(),
            Some("<-03:30>+03:30")
        );
        assert_eq!(shown("UTC+5").as_deref(), Some("UTC+5"));
        assert_eq!(shown("PST"), None);
        assert_eq!(shown("Nowhere/City"), None);
        // what SHOW showed reads back as the same zone
        for v in ["+02", "5.5", "UTC+5", "America/New_York"] {
            let (z, s) = Zone::setting(v).expect("a zone");
            assert_eq!(Zone::setting(&s).map(|(z, _)| z), Some(z));
            // and a plan's name of it too
            assert_eq!(Zone::parse(&z.arg_text()).ok(), Some(z));
        }
        let (east2, _) = Zone::setting("+02").expect("a zone");
        assert_eq!(east2.offset_at_us(0), 7200);
        assert!(Zone::setting("UTC").is_some_and(|(z, _)| z.is_utc()));
    }

    #[test]
    fn text_without_a_zone_is_a_wall_clock_time_in_the_session_zone() {
        use datafusion::arrow::array::{StringArray, TimestampMicrosecondArray};
        let ny = Zone::parse("America/New_York").expect("New York's zone");
        let text = StringArray::from(vec![
            Some("2024-07-01 12:00"),
            Some("2024-07-01 12:00+00"),
            Some("2024-07-01T12:00:00Z"),
            Some("infinity"),
            None,
        ]);
        let noon = 1_719_835_200_000_000i64;
        let parsed: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![
                Some(noon),
                Some(noon),
                Some(noon),
                Some(i64::MAX),
                None,
            ])
            .with_timezone("UTC"),
        );
        let read = read_in_zone(&text, parsed, &ny).expect("read");
        let read = read.as_primitive::<TimestampMicrosecondType>();
        // noon in New York (EDT) is 16:00 UTC; the rest name their instant
        assert_eq!(read.value(0), noon + 4 * 3_600_000_000);
        assert_eq!(read.value(1), noon);
        assert_eq!(read.value(2), noon);
        assert_eq!(read.value(3), i64::MAX);
        assert!(read.is_null(4));
    }

    #[test]
    fn zone_strings_read_as_postgres_reads_them() {
        assert_eq!(posix_offset("+05"), Some(-5 * 3600));
        assert_eq!(posix_offset("UTC+5"), Some(-5 * 3600));
        assert_eq!(posix_offset("-03:30"), Some(3 * 3600 + 1800));
        assert_eq!(posix_offset("Europe/Berlin"), None);
        assert!(Zone::parse("america/new_york").is_ok());
        assert!(Zone::parse("Nowhere/City").is_err());
        let ny = Zone::parse("America/New_York").expect("New York's zone");
        // 2024-11-03 01:30 happens twice in New York: standard time (-5) is taken
        let repeated = chrono::NaiveDate::from_ymd_opt(2024, 11, 3)
            .and_then(|d| d.and_hms_opt(1, 30, 0))
            .unwrap_or_default();
        assert_eq!(ny.offset_at_local(&repeated), -5 * 3600);
        // 2024-03-10 02:30 does not happen: the offset before the change (-5)
        let skipped = chrono::NaiveDate::from_ymd_opt(2024, 3, 10)
            .and_then(|d| d.and_hms_opt(2, 30, 0))
            .unwrap_or_default();
        assert_eq!(ny.offset_at_local(&skipped), -5 * 3600);
    }
}
