//! `date_trunc(unit, ts)` as Postgres answers it at the ends: `infinity` and `-infinity`
//! stay themselves (DataFusion's `date_trunc` overflows on them). (A date is truncated as
//! a `timestamptz`, as in Postgres: `catalog/pg_semantics.rs` sets the type it is cast to.) Registered over
//! DataFusion's function under its name, so everything that recognises `date_trunc` (the
//! view planner's windows and event-time keys, its ordering and bounds for the optimizer)
//! still does: every method but the call is DataFusion's.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::interval_arithmetic::Interval;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::sort_properties::{ExprProperties, SortProperties};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

use crate::sql::datetime_in::{has_ends, keeping_infinities};

/// DataFusion's `date_trunc` with the timestamp's ends kept.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DateTrunc {
    inner: Arc<ScalarUDF>,
}

impl DateTrunc {
    pub fn new() -> DateTrunc {
        DateTrunc {
            inner: datafusion::functions::datetime::date_trunc(),
        }
    }
}

impl Default for DateTrunc {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalarUDFImpl for DateTrunc {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }
    fn evaluate_bounds(&self, input: &[&Interval]) -> DfResult<Interval> {
        self.inner.evaluate_bounds(input)
    }
    fn output_ordering(&self, inputs: &[ExprProperties]) -> DfResult<SortProperties> {
        self.inner.output_ordering(inputs)
    }
    fn preserves_lex_ordering(&self, inputs: &[ExprProperties]) -> DfResult<bool> {
        self.inner.preserves_lex_ordering(inputs)
    }
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        self.inner.documentation()
    }

    /// The timestamp (second argument) with its ends replaced before DataFusion's call and
    /// put back after; batches without an end go straight through.
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let Some(ts) = args.args.get(1) else {
            return self.inner.invoke_with_args(args);
        };
        let all_scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if all_scalar { 1 } else { args.number_rows };
        let ts = ts.to_array(rows)?;
        if !has_ends(&ts) {
            return self.inner.invoke_with_args(args);
        }
        let out = keeping_infinities(&ts, |finite| {
            let mut call = args.clone();
            call.args[1] = ColumnarValue::Array(finite.clone());
            call.number_rows = rows;
            self.inner.invoke_with_args(call)?.to_array(rows)
        })?;
        Ok(if all_scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}
