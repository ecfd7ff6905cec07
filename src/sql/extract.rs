//! `extract(field FROM x)` and `date_part('field', x)` as Postgres 15 answers them.
//!
//! `extract` is `numeric`, with a scale that depends on the field: `second` and `epoch`
//! have 6 digits (`1.500000`), `milliseconds` 3, the others none; `date_part` is
//! `double precision` (`1.5`). DataFusion's `date_part` (which both planned to) answers
//! an `integer` for most fields, so `extract(second FROM ts)` lost its fraction, and knows
//! no `century`, `decade`, `millennium`, `julian` or `timezone`.
//!
//! Fields, as Postgres reads them: `microseconds`, `milliseconds`, `second`, `minute`,
//! `hour`, `day`, `week` (ISO), `month`, `quarter`, `year` (1 BC is -1), `decade`,
//! `century`, `millennium`, `dow` (Sunday 0), `isodow` (Sunday 7), `doy`, `isoyear`,
//! `julian`, `epoch`, `timezone`, `timezone_hour`, `timezone_minute` (and their plural
//! and short spellings). A date has no time-of-day fields, a time no date fields, an
//! interval counts its own parts (`hour` is all its whole hours, `epoch` counts a month
//! as 30 days and a year as 365.25); a field a type does not have is 0A000 at planning,
//! an unknown field 22023. `timestamptz` fields are in the session's zone (UTC).
//!
//! At `infinity` and `-infinity` Postgres answers ±Infinity for the fields that only
//! grow (year, epoch, ...) and NULL for the others; `date_part` does so, `extract`
//! answers NULL for all of them (Weir's `numeric` has no infinities).
//!
//! One pass per batch: each row's field is computed as an integer at the result's scale
//! (`1.5` seconds at scale 6 is 1500000), then the column is built once.

use std::sync::Arc;

use chrono::{DateTime, Datelike, NaiveDateTime};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, Decimal128Array, Float64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Field, FieldRef, Int64Type, IntervalMonthDayNanoType, IntervalUnit, TimeUnit,
};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

use crate::error::{WeirError, sqlstate};

const USECS_PER_DAY: i64 = 86_400_000_000;
/// Postgres' julian day of 1970-01-01.
const UNIX_EPOCH_JDATE: i64 = 2_440_588;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Microseconds,
    Milliseconds,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Quarter,
    Year,
    Decade,
    Century,
    Millennium,
    Dow,
    Isodow,
    Doy,
    Isoyear,
    Julian,
    Epoch,
    Timezone,
    TimezoneHour,
    TimezoneMinute,
}

impl Unit {
    /// Postgres' spellings of each unit (lower case; `timezone_hour` is read as its
    /// first ten letters, as Postgres reads it).
    fn parse(text: &str) -> Option<Unit> {
        use Unit::*;
        let t = text.trim().to_ascii_lowercase();
        Some(match t.as_str() {
            "microsecond" | "microseconds" | "us" | "usec" | "usecs" => Microseconds,
            "millisecond" | "milliseconds" | "ms" | "msec" | "msecs" => Milliseconds,
            "second" | "seconds" | "s" | "sec" | "secs" => Second,
            "minute" | "minutes" | "m" | "min" | "mins" => Minute,
            "hour" | "hours" | "h" | "hr" | "hrs" => Hour,
            "day" | "days" | "d" => Day,
            "week" | "weeks" | "w" => Week,
            "month" | "months" | "mon" | "mons" => Month,
            "quarter" | "qtr" => Quarter,
            "year" | "years" | "y" | "yr" | "yrs" => Year,
            "decade" | "decades" | "dec" | "decs" => Decade,
            "century" | "centuries" | "c" | "cent" => Century,
            "millennium" | "millennia" | "millenium" | "mil" | "mils" => Millennium,
            "dow" => Dow,
            "isodow" => Isodow,
            "doy" => Doy,
            "isoyear" => Isoyear,
            "julian" | "j" => Julian,
            "epoch" => Epoch,
            "timezone" => Timezone,
            "timezone_h" | "timezone_hour" => TimezoneHour,
            "timezone_m" | "timezone_minute" => TimezoneMinute,
            _ => return None,
        })
    }

    /// Digits after the point of `extract`'s numeric (a date's epoch is whole seconds; a
    /// timestamp's julian day has its time of day as a fraction at Postgres' usual scale,
    /// see [`julian_numeric`]).
    fn scale(self, kind: Kind) -> i8 {
        match self {
            Unit::Epoch if kind == Kind::Date => 0,
            Unit::Julian if kind != Kind::Date => JULIAN_SCALE,
            Unit::Second | Unit::Epoch => 6,
            Unit::Milliseconds => 3,
            _ => 0,
        }
    }

    /// Whether the field grows with time (±Infinity at the ends, else NULL).
    fn monotonic(self) -> bool {
        use Unit::*;
        matches!(
            self,
            Year | Decade | Century | Millennium | Julian | Isoyear | Epoch
        )
    }
}

/// What the argument is read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Date,
    Timestamp,
    TimestampTz,
    Time,
    Interval,
}

impl Kind {
    fn of(t: &DataType) -> Option<Kind> {
        Some(match t {
            DataType::Date32 | DataType::Date64 => Kind::Date,
            DataType::Timestamp(_, None) | DataType::Utf8 | DataType::Null => Kind::Timestamp,
            DataType::Timestamp(_, Some(_)) => Kind::TimestampTz,
            DataType::Time32(_) | DataType::Time64(_) => Kind::Time,
            DataType::Interval(_) | DataType::Duration(_) => Kind::Interval,
            _ => return None,
        })
    }

    fn sql_name(self) -> &'static str {
        match self {
            Kind::Date => "date",
            Kind::Timestamp => "timestamp without time zone",
            Kind::TimestampTz => "timestamp with time zone",
            Kind::Time => "time without time zone",
            Kind::Interval => "interval",
        }
    }

    /// Whether Postgres' function for this type answers `unit`.
    fn has(self, unit: Unit) -> bool {
        use Unit::*;
        match self {
            Kind::Date => !matches!(
                unit,
                Microseconds
                    | Milliseconds
                    | Second
                    | Minute
                    | Hour
                    | Timezone
                    | TimezoneHour
                    | TimezoneMinute
            ),
            Kind::Timestamp => !matches!(unit, Timezone | TimezoneHour | TimezoneMinute),
            Kind::TimestampTz => true,
            Kind::Time => matches!(
                unit,
                Microseconds | Milliseconds | Second | Minute | Hour | Epoch
            ),
            Kind::Interval => matches!(
                unit,
                Microseconds
                    | Milliseconds
                    | Second
                    | Minute
                    | Hour
                    | Day
                    | Month
                    | Quarter
                    | Year
                    | Decade
                    | Century
                    | Millennium
                    | Epoch
            ),
        }
    }
}

/// `extract` (numeric) or `date_part` (double precision).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Extract {
    numeric: bool,
    signature: Signature,
}

impl Extract {
    pub fn numeric() -> Extract {
        Extract {
            numeric: true,
            // field, value [, the session zone a timestamptz is read in]
            signature: Signature::one_of(
                vec![TypeSignature::Any(2), TypeSignature::Any(3)],
                Volatility::Immutable,
            ),
        }
    }
    pub fn date_part() -> Extract {
        Extract {
            numeric: false,
            // field, value [, the session zone a timestamptz is read in]
            signature: Signature::one_of(
                vec![TypeSignature::Any(2), TypeSignature::Any(3)],
                Volatility::Immutable,
            ),
        }
    }

    /// The unit and argument kind, checked as Postgres checks them.
    fn resolve(&self, unit: Option<&ScalarValue>, arg: &DataType) -> DfResult<(Unit, Kind)> {
        let text = unit.and_then(|v| v.try_as_str().flatten()).ok_or_else(|| {
            pg_error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!("{}: the field must be a constant text", self.name()),
            )
        })?;
        let mut kind = Kind::of(arg).ok_or_else(|| {
            pg_error(
                sqlstate::UNDEFINED_FUNCTION,
                format!("function {}(unknown, {arg}) does not exist", self.name()),
            )
        })?;
        // `date_part(text, date)` is Postgres' timestamp function over the date
        if !self.numeric && kind == Kind::Date {
            kind = Kind::Timestamp;
        }
        let unit = Unit::parse(text).ok_or_else(|| {
            pg_error(
                sqlstate::INVALID_PARAMETER_VALUE,
                format!(
                    "unit \"{}\" not recognized for type {}",
                    text.to_lowercase(),
                    kind.sql_name()
                ),
            )
        })?;
        if !kind.has(unit) {
            return Err(pg_error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!(
                    "unit \"{}\" not supported for type {}",
                    text.to_lowercase(),
                    kind.sql_name()
                ),
            ));
        }
        Ok((unit, kind))
    }

    fn output_type(&self, unit: Unit, kind: Kind) -> DataType {
        if self.numeric {
            DataType::Decimal128(38, unit.scale(kind))
        } else {
            DataType::Float64
        }
    }
}

fn pg_error(code: &'static str, msg: String) -> DataFusionError {
    DataFusionError::External(Box::new(WeirError::new(code, msg)))
}

impl ScalarUDFImpl for Extract {
    fn name(&self) -> &str {
        if self.numeric { "extract" } else { "date_part" }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Err(DataFusionError::Internal(
            "extract's type is given by return_field_from_args".into(),
        ))
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let (Some(unit), Some(arg)) = (args.scalar_arguments.first(), args.arg_fields.get(1))
        else {
            return Err(pg_error(
                sqlstate::UNDEFINED_FUNCTION,
                format!("{} takes a field and a value", self.name()),
            ));
        };
        let (unit, kind) = self.resolve(*unit, arg.data_type())?;
        Ok(Arc::new(Field::new(
            self.name(),
            self.output_type(unit, kind),
            true,
        )))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let ColumnarValue::Scalar(unit) = &args.args[0] else {
            return Err(pg_error(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!("{}: the field must be a constant text", self.name()),
            ));
        };
        let scalar = matches!(args.args[1], ColumnarValue::Scalar(_));
        let value = args.args[1].to_array(if scalar { 1 } else { args.number_rows })?;
        let (unit, kind) = self.resolve(Some(unit), value.data_type())?;
        let zone = match args.args.get(2) {
            Some(z) => crate::sql::time_zone::zone_arg(Some(&z.to_array(1)?))?,
            None => crate::sql::time_zone::Zone::utc(),
        };
        let out = self.compute(unit, kind, &value, &zone)?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// One row's field: a value at the unit's scale, or an end (`Err(true)` at `infinity`).
type Part = Result<i128, bool>;

impl Extract {
    fn compute(
        &self,
        unit: Unit,
        kind: Kind,
        value: &ArrayRef,
        zone: &crate::sql::time_zone::Zone,
    ) -> DfResult<ArrayRef> {
        let parts: Vec<Option<Part>> = match kind {
            Kind::Date => {
                let days = cast(value, &DataType::Date32)?;
                let days = days.as_primitive::<datafusion::arrow::datatypes::Date32Type>();
                days.iter()
                    .map(|d| {
                        d.map(|d| match d {
                            i32::MAX => Err(true),
                            i32::MIN => Err(false),
                            d => Ok(date_part(unit, d as i64)),
                        })
                    })
                    .collect()
            }
            Kind::Timestamp => {
                let micros = timestamp_micros(value)?;
                micros
                    .into_iter()
                    .map(|v| v.map(|v| v.map(|us| timestamp_part(unit, us))))
                    .collect()
            }
            // a timestamptz's fields are its wall-clock time's in the session zone; its
            // epoch is the instant's; `timezone*` are the zone's offset then
            Kind::TimestampTz => {
                let micros = timestamp_micros(value)?;
                let utc = zone.is_utc();
                micros
                    .into_iter()
                    .map(|v| {
                        v.map(|v| {
                            v.map(|us| {
                                let offset = if utc { 0 } else { zone.offset_at_us(us) };
                                match unit {
                                    Unit::Epoch => timestamp_part(unit, us),
                                    Unit::Timezone => offset as i128,
                                    Unit::TimezoneHour => (offset / 3600) as i128,
                                    Unit::TimezoneMinute => (offset / 60 % 60) as i128,
                                    _ => {
                                        timestamp_part(unit, us.saturating_add(offset * 1_000_000))
                                    }
                                }
                            })
                        })
                    })
                    .collect()
            }
            Kind::Time => {
                let micros = cast(value, &DataType::Time64(TimeUnit::Microsecond))?;
                let micros = cast(&micros, &DataType::Int64)?;
                micros
                    .as_primitive::<Int64Type>()
                    .iter()
                    .map(|v| v.map(|us| Ok(time_part(unit, us))))
                    .collect()
            }
            Kind::Interval => {
                let iv = cast(value, &DataType::Interval(IntervalUnit::MonthDayNano))?;
                iv.as_primitive::<IntervalMonthDayNanoType>()
                    .iter()
                    .map(|v| {
                        v.map(|v| {
                            Ok(interval_part(
                                unit,
                                v.months as i64,
                                v.days as i64,
                                v.nanoseconds / 1000,
                            ))
                        })
                    })
                    .collect()
            }
        };
        // the julian day of a timestamp has the time of day as a fraction
        let julian_fraction = unit == Unit::Julian && kind != Kind::Date;
        Ok(if self.numeric {
            let scale = unit.scale(kind);
            let values: Decimal128Array = parts
                .into_iter()
                .map(|p| {
                    p.and_then(Result::ok).map(|v| {
                        if julian_fraction {
                            julian_numeric(v as i64)
                        } else {
                            v
                        }
                    })
                })
                .collect();
            Arc::new(values.with_precision_and_scale(38, scale)?)
        } else {
            let div = 10f64.powi(unit.scale(kind) as i32);
            let values: Float64Array = parts
                .into_iter()
                .map(|p| {
                    p.and_then(|p| match p {
                        Ok(v) if julian_fraction => {
                            // (the part is the timestamp's microseconds since the epoch)
                            let us = v as i64;
                            let day = us.div_euclid(USECS_PER_DAY) + UNIX_EPOCH_JDATE;
                            let of_day = us.rem_euclid(USECS_PER_DAY);
                            Some(day as f64 + of_day as f64 / 1e6 / 86400.0)
                        }
                        Ok(v) => Some(v as f64 / div),
                        Err(up) if unit.monotonic() => {
                            Some(if up { f64::INFINITY } else { f64::NEG_INFINITY })
                        }
                        Err(_) => None,
                    })
                })
                .collect();
            Arc::new(values)
        })
    }
}

/// The scale of `extract(julian FROM timestamp)`. Postgres' value is the day plus the time
/// of day divided by 86400 as a numeric division, whose scale depends on the quotient:
/// 20 digits from 8.64 s into the day on, 24 or 28 before; here always 20 (the same value
/// where Postgres shows 20, and Postgres' value rounded at 20 where it shows more).
const JULIAN_SCALE: i8 = 20;

/// The julian day of a timestamp (microseconds since the epoch) at [`JULIAN_SCALE`],
/// rounded half up as Postgres rounds a quotient.
fn julian_numeric(us: i64) -> i128 {
    let day = (us.div_euclid(USECS_PER_DAY) + UNIX_EPOCH_JDATE) as i128;
    let of_day = us.rem_euclid(USECS_PER_DAY) as i128;
    let unit = 10i128.pow(JULIAN_SCALE as u32);
    // (a day's microseconds times 10^20 stay below 10^31)
    let num = of_day * unit;
    let den = USECS_PER_DAY as i128;
    let fraction = num / den + if (num % den) * 2 >= den { 1 } else { 0 };
    day * unit + fraction
}

/// Each row of a timestamp array as microseconds since the epoch; `Err` at the ends.
fn timestamp_micros(value: &ArrayRef) -> DfResult<Vec<Option<Result<i64, bool>>>> {
    let value = match value.data_type() {
        DataType::Timestamp(..) => value.clone(),
        // (a date's infinities stay the ends)
        _ => crate::sql::datetime_in::keeping_infinities(value, |a| {
            Ok(cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None))?)
        })?,
    };
    let DataType::Timestamp(unit, _) = value.data_type() else {
        return Err(DataFusionError::Internal("not a timestamp".into()));
    };
    let to_micros = |v: i64| match unit {
        TimeUnit::Second => v.saturating_mul(1_000_000),
        TimeUnit::Millisecond => v.saturating_mul(1_000),
        TimeUnit::Microsecond => v,
        TimeUnit::Nanosecond => v.div_euclid(1_000),
    };
    let raw = cast(&value, &DataType::Int64)?;
    Ok(raw
        .as_primitive::<Int64Type>()
        .iter()
        .map(|v| {
            v.map(|v| match v {
                i64::MAX => Err(true),
                i64::MIN => Err(false),
                v => Ok(to_micros(v)),
            })
        })
        .collect())
}

/// Year-based fields of an astronomical year (0 is 1 BC), as Postgres counts them.
fn year_part(unit: Unit, y: i64) -> i64 {
    match unit {
        Unit::Year => {
            if y > 0 {
                y
            } else {
                y - 1
            }
        }
        Unit::Decade => {
            if y >= 0 {
                y / 10
            } else {
                -((8 - (y - 1)) / 10)
            }
        }
        Unit::Century => {
            if y > 0 {
                (y + 99) / 100
            } else {
                -((99 - (y - 1)) / 100)
            }
        }
        Unit::Millennium => {
            if y > 0 {
                (y + 999) / 1000
            } else {
                -((999 - (y - 1)) / 1000)
            }
        }
        _ => 0,
    }
}

/// A calendar field of a date (days since the epoch).
fn calendar_part(unit: Unit, dt: &NaiveDateTime) -> i64 {
    let d = dt.date();
    match unit {
        Unit::Day => d.day() as i64,
        Unit::Week => d.iso_week().week() as i64,
        Unit::Month => d.month() as i64,
        Unit::Quarter => (d.month0() / 3 + 1) as i64,
        Unit::Year | Unit::Decade | Unit::Century | Unit::Millennium => {
            year_part(unit, d.year() as i64)
        }
        Unit::Dow => d.weekday().num_days_from_sunday() as i64,
        Unit::Isodow => d.weekday().number_from_monday() as i64,
        Unit::Doy => d.ordinal() as i64,
        Unit::Isoyear => {
            let y = d.iso_week().year() as i64;
            if y > 0 { y } else { y - 1 }
        }
        _ => 0,
    }
}

fn date_part(unit: Unit, days: i64) -> i128 {
    match unit {
        Unit::Epoch => days as i128 * 86_400,
        Unit::Julian => (days + UNIX_EPOCH_JDATE) as i128,
        _ => match DateTime::from_timestamp(days * 86_400, 0) {
            Some(dt) => calendar_part(unit, &dt.naive_utc()) as i128,
            None => 0,
        },
    }
}

/// A field of a timestamp (microseconds since the epoch, UTC) at the unit's scale; for
/// `julian` the microseconds themselves (date_part divides them).
fn timestamp_part(unit: Unit, us: i64) -> i128 {
    let of_day = us.rem_euclid(USECS_PER_DAY);
    match unit {
        Unit::Epoch | Unit::Julian => us as i128,
        Unit::Microseconds | Unit::Milliseconds | Unit::Second => (of_day % 60_000_000) as i128,
        Unit::Minute => ((of_day / 60_000_000) % 60) as i128,
        Unit::Hour => (of_day / 3_600_000_000) as i128,
        Unit::Timezone | Unit::TimezoneHour | Unit::TimezoneMinute => 0,
        _ => match DateTime::from_timestamp_micros(us) {
            Some(dt) => calendar_part(unit, &dt.naive_utc()) as i128,
            None => 0,
        },
    }
}

/// A field of a time of day (microseconds since midnight).
fn time_part(unit: Unit, us: i64) -> i128 {
    match unit {
        Unit::Epoch => us as i128,
        Unit::Microseconds | Unit::Milliseconds | Unit::Second => (us % 60_000_000) as i128,
        Unit::Minute => ((us / 60_000_000) % 60) as i128,
        Unit::Hour => (us / 3_600_000_000) as i128,
        _ => 0,
    }
}

/// A field of an interval (Postgres' `interval2itm`: whole hours are all the hours of its
/// time part; signs follow the parts, divisions truncate toward zero).
fn interval_part(unit: Unit, months: i64, days: i64, us: i64) -> i128 {
    let years = months / 12;
    match unit {
        Unit::Epoch => {
            let secs = 31_557_600 * years + 2_592_000 * (months % 12) + 86_400 * days;
            secs as i128 * 1_000_000 + us as i128
        }
        Unit::Microseconds | Unit::Milliseconds | Unit::Second => (us % 60_000_000) as i128,
        Unit::Minute => ((us / 60_000_000) % 60) as i128,
        Unit::Hour => (us / 3_600_000_000) as i128,
        Unit::Day => days as i128,
        Unit::Month => (months % 12) as i128,
        Unit::Quarter => ((months % 12) / 3 + 1) as i128,
        Unit::Year => years as i128,
        Unit::Decade => (years / 10) as i128,
        Unit::Century => (years / 100) as i128,
        Unit::Millennium => (years / 1000) as i128,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn years_before_christ_count_as_postgres_counts_them() {
        // astronomical 0 is 1 BC: year -1, decade 0 (Postgres' decade 0 is 1 BC to 9 AD),
        // century -1, millennium -1; 11 BC is decade -1
        assert_eq!(year_part(Unit::Year, 0), -1);
        assert_eq!(year_part(Unit::Decade, 0), 0);
        assert_eq!(year_part(Unit::Decade, -10), -1);
        assert_eq!(year_part(Unit::Century, 0), -1);
        assert_eq!(year_part(Unit::Millennium, 0), -1);
        assert_eq!(year_part(Unit::Decade, 2024), 202);
        assert_eq!(year_part(Unit::Century, 2000), 20);
        assert_eq!(year_part(Unit::Century, 2001), 21);
        assert_eq!(year_part(Unit::Millennium, 2001), 3);
    }

    #[test]
    fn interval_parts_follow_their_sign() {
        // -1 day -1.5 seconds
        assert_eq!(interval_part(Unit::Second, 0, -1, -1_500_000), -1_500_000);
        assert_eq!(interval_part(Unit::Day, 0, -1, -1_500_000), -1);
        // 14 months: year 1, month 2; epoch: 365.25 + 60 days
        assert_eq!(interval_part(Unit::Year, 14, 0, 0), 1);
        assert_eq!(interval_part(Unit::Month, 14, 0, 0), 2);
        assert_eq!(
            interval_part(Unit::Epoch, 14, 0, 0),
            (31_557_600 + 2 * 2_592_000) as i128 * 1_000_000
        );
        // 30 hours are 30 hours, not a day
        assert_eq!(interval_part(Unit::Hour, 0, 0, 30 * 3_600_000_000), 30);
    }
}
