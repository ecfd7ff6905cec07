//! `date_trunc(unit, ts)` as Postgres answers it at the ends: `infinity` and `-infinity`
//! stay themselves (DataFusion's `date_trunc` overflows on them), and before 1678 or after
//! 2261 (DataFusion's works in nanoseconds: it refused `1500-03-15` and every BC year). (A
//! date is truncated as
//! a `timestamptz`, as in Postgres: `catalog/pg_semantics.rs` sets the type it is cast to.)
//! DataFusion's function with a hook around its call (`sql/hooked.rs`), so everything that
//! recognises `date_trunc` (the view planner's windows and event-time keys, its ordering
//! and bounds for the optimizer) still does.

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF};

use crate::sql::datetime_in::{keeping_infinities, within_nanosecond_range};
use crate::sql::hooked::{CallHook, Hooked};

/// DataFusion's `date_trunc` with the timestamp's ends kept.
pub fn date_trunc() -> ScalarUDF {
    Hooked::udf(datafusion::functions::datetime::date_trunc(), KeepEnds)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct KeepEnds;

/// The timestamps with 0 under their NULLs: DataFusion's kernel computes every slot, and a
/// NULL's may hold any value (one near `i64::MIN` overflows its arithmetic).
fn zero_null_slots(a: &ArrayRef) -> DfResult<ArrayRef> {
    use datafusion::arrow::array::{Array, AsArray, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Int64Type};
    if a.null_count() == 0 || !matches!(a.data_type(), DataType::Timestamp(..)) {
        return Ok(a.clone());
    }
    let w = datafusion::arrow::compute::cast(a, &DataType::Int64)?;
    let w = w.as_primitive::<Int64Type>();
    let values: Vec<i64> = (0..w.len())
        .map(|i| if w.is_null(i) { 0 } else { w.value(i) })
        .collect();
    let zeroed = Int64Array::new(values.into(), w.nulls().cloned());
    Ok(datafusion::arrow::compute::cast(&zeroed, a.data_type())?)
}

impl CallHook for KeepEnds {
    /// The timestamp (second argument) with its ends replaced before DataFusion's call and
    /// put back after, and years DataFusion's nanosecond arithmetic cannot hold (before
    /// 1678, BC) moved by whole 400-year cycles and back; the usual batch goes straight
    /// through after a pass or two over its values.
    fn call(&self, inner: &ScalarUDF, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let Some(ts) = args.args.get(1) else {
            return inner.invoke_with_args(args);
        };
        if let Some(ColumnarValue::Scalar(
            ScalarValue::Utf8(Some(u))
            | ScalarValue::Utf8View(Some(u))
            | ScalarValue::LargeUtf8(Some(u)),
        )) = args.args.first()
            && let Some(long) = LongUnit::of(u)
        {
            // to the year first (ends, old years as below), then to the year `long` starts
            let mut by_year = args.clone();
            by_year.args[0] = ColumnarValue::Scalar(ScalarValue::Utf8(Some("year".into())));
            return Ok(match self.call(inner, by_year)? {
                ColumnarValue::Array(a) => ColumnarValue::Array(long.starts_of_years(&a)?),
                ColumnarValue::Scalar(v) => ColumnarValue::Scalar(ScalarValue::try_from_array(
                    &long.starts_of_years(&v.to_array()?)?,
                    0,
                )?),
            });
        }
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if all_scalar { 1 } else { args.number_rows };
        let ts = zero_null_slots(&ts.to_array(rows)?)?;
        if let Some(width) = fixed_width(args.args.first(), ts.data_type()) {
            // a unit of fixed length on a timestamp without time zone: arithmetic on the
            // microseconds (DataFusion's kernel goes through chrono for every row: 4% of
            // Nexmark q17's process for its `date_trunc('day', ...)`)
            let out = keeping_infinities(&ts, |finite| {
                use datafusion::arrow::array::AsArray;
                use datafusion::arrow::datatypes::TimestampMicrosecondType;
                let a = finite.as_primitive::<TimestampMicrosecondType>();
                let (width, origin) = width;
                Ok(Arc::new(
                    a.unary::<_, TimestampMicrosecondType>(|t| t - (t - origin).rem_euclid(width)),
                ) as ArrayRef)
            })?;
            return Ok(if all_scalar {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            } else {
                ColumnarValue::Array(out)
            });
        }
        let out = keeping_infinities(&ts, |finite| {
            within_nanosecond_range(finite, |ts| {
                let mut call = args.clone();
                call.args[1] = ColumnarValue::Array(ts.clone());
                call.number_rows = rows;
                inner.invoke_with_args(call)?.to_array(rows)
            })
        })?;
        Ok(if all_scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

/// The length and an origin (a start, in microseconds since the epoch) of `unit` when it
/// has a fixed length and `ty` is a timestamp without time zone in microseconds (the
/// others go through DataFusion's kernel: months and years vary, and a time zone's days
/// do across its offset changes). Weeks start on Monday, as ISO's and Postgres' do
/// (1969-12-29 was one).
fn fixed_width(unit: Option<&ColumnarValue>, ty: &DataType) -> Option<(i64, i64)> {
    use datafusion::arrow::datatypes::TimeUnit;
    if *ty != DataType::Timestamp(TimeUnit::Microsecond, None) {
        return None;
    }
    let Some(ColumnarValue::Scalar(
        ScalarValue::Utf8(Some(u))
        | ScalarValue::Utf8View(Some(u))
        | ScalarValue::LargeUtf8(Some(u)),
    )) = unit
    else {
        return None;
    };
    const DAY: i64 = 86_400_000_000;
    Some(match u.to_ascii_lowercase().as_str() {
        "microseconds" | "microsecond" => (1, 0),
        "milliseconds" | "millisecond" => (1_000, 0),
        "second" => (1_000_000, 0),
        "minute" => (60_000_000, 0),
        "hour" => (3_600_000_000, 0),
        "day" => (DAY, 0),
        "week" => (7 * DAY, -3 * DAY),
        _ => return None,
    })
}

/// Units DataFusion's `date_trunc` does not have, computed from the year it truncates to.
#[derive(Debug, Clone, Copy)]
enum LongUnit {
    Decade,
    Century,
    Millennium,
}

impl LongUnit {
    fn of(unit: &str) -> Option<LongUnit> {
        Some(match unit.trim().to_ascii_lowercase().as_str() {
            "decade" | "decades" | "dec" | "decs" => LongUnit::Decade,
            "century" | "centuries" | "c" | "cent" | "cents" => LongUnit::Century,
            "millennium" | "millennia" | "millenniums" | "mil" | "mils" => LongUnit::Millennium,
            _ => return None,
        })
    }

    /// The first year (astronomical: 1 BC is 0) of the decade, century or millennium of
    /// year `y`, by Postgres' rules (centuries and millennia start at years ending in 1;
    /// BC ones run backwards from 1 BC).
    fn start(self, y: i64) -> i64 {
        match self {
            LongUnit::Decade if y > 0 => (y / 10) * 10,
            LongUnit::Decade => -((8 - (y - 1)) / 10) * 10,
            LongUnit::Century if y > 0 => ((y + 99) / 100) * 100 - 99,
            LongUnit::Century => -((99 - (y - 1)) / 100) * 100 + 1,
            LongUnit::Millennium if y > 0 => ((y + 999) / 1000) * 1000 - 999,
            LongUnit::Millennium => -((999 - (y - 1)) / 1000) * 1000 + 1,
        }
    }

    /// Timestamps already truncated to their year, moved to the first year of `self`.
    fn starts_of_years(self, a: &ArrayRef) -> DfResult<ArrayRef> {
        use chrono::{DateTime, Datelike, NaiveDate};
        use datafusion::arrow::array::{Array, AsArray, Int64Array};
        use datafusion::arrow::compute::cast;
        use datafusion::arrow::datatypes::{DataType, Int64Type, TimeUnit};
        let per_second: i64 = match a.data_type() {
            DataType::Timestamp(TimeUnit::Second, _) => 1,
            DataType::Timestamp(TimeUnit::Millisecond, _) => 1_000,
            DataType::Timestamp(TimeUnit::Microsecond, _) => 1_000_000,
            DataType::Timestamp(TimeUnit::Nanosecond, _) => 1_000_000_000,
            _ => return Ok(a.clone()),
        };
        let w = cast(a, &DataType::Int64)?;
        let w = w.as_primitive::<Int64Type>();
        let values: Vec<i64> = w
            .iter()
            .map(|v| match v {
                // the ends stay themselves
                Some(v) if v == i64::MIN || v == i64::MAX => v,
                Some(v) => DateTime::from_timestamp(v.div_euclid(per_second), 0)
                    .and_then(|dt| {
                        let y = self.start(dt.year() as i64);
                        NaiveDate::from_ymd_opt(i32::try_from(y).ok()?, 1, 1)
                    })
                    .and_then(|d| d.and_hms_opt(0, 0, 0))
                    .map(|d| d.and_utc().timestamp().saturating_mul(per_second))
                    .unwrap_or(v),
                None => 0,
            })
            .collect();
        let out: ArrayRef = Arc::new(Int64Array::new(values.into(), w.nulls().cloned()));
        Ok(cast(&out, a.data_type())?)
    }
}
