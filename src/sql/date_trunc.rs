//! `date_trunc(unit, ts)` as Postgres answers it at the ends: `infinity` and `-infinity`
//! stay themselves (DataFusion's `date_trunc` overflows on them), and before 1678 or after
//! 2261 (DataFusion's works in nanoseconds: it refused `1500-03-15` and every BC year). (A
//! date is truncated as
//! a `timestamptz`, as in Postgres: `catalog/pg_semantics.rs` sets the type it is cast to.)
//! DataFusion's function with a hook around its call (`sql/hooked.rs`), so everything that
//! recognises `date_trunc` (the view planner's windows and event-time keys, its ordering
//! and bounds for the optimizer) still does.

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

impl CallHook for KeepEnds {
    /// The timestamp (second argument) with its ends replaced before DataFusion's call and
    /// put back after, and years DataFusion's nanosecond arithmetic cannot hold (before
    /// 1678, BC) moved by whole 400-year cycles and back; the usual batch goes straight
    /// through after a pass or two over its values.
    fn call(&self, inner: &ScalarUDF, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let Some(ts) = args.args.get(1) else {
            return inner.invoke_with_args(args);
        };
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if all_scalar { 1 } else { args.number_rows };
        let ts = ts.to_array(rows)?;
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
