//! `now()`, `current_timestamp` and `transaction_timestamp()` as Postgres has them: the start
//! of the transaction — inside a block (BEGIN ... COMMIT) the block's start, the same for
//! every statement of it; outside one the statement's start (DataFusion's `now()`, which
//! this wraps). `statement_timestamp()` stays the statement's start, `clock_timestamp()`
//! the time now.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// The start of a session's transaction block (None outside one), shared with its `now()`.
pub type TransactionStart = Arc<parking_lot::RwLock<Option<DateTime<Utc>>>>;

#[derive(Debug)]
struct TransactionNow {
    /// DataFusion's `now()`: its type and, outside a block, its answer.
    inner: Arc<ScalarUDF>,
    start: TransactionStart,
    aliases: Vec<String>,
}

impl PartialEq for TransactionNow {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.start, &other.start)
    }
}

impl Eq for TransactionNow {}

impl std::hash::Hash for TransactionNow {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        "weir_transaction_now".hash(state);
    }
}

impl ScalarUDFImpl for TransactionNow {
    fn name(&self) -> &str {
        "now"
    }
    fn aliases(&self) -> &[String] {
        &self.aliases
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        datafusion::common::internal_err!("return_field_from_args is asked instead")
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.inner.invoke_with_args(args)
    }
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        let Some(start) = *self.start.read() else {
            return self.inner.simplify(args, info);
        };
        let field = self.inner.return_field_from_args(ReturnFieldArgs {
            arg_fields: &[],
            scalar_arguments: &[],
        })?;
        let DataType::Timestamp(_, tz) = field.data_type() else {
            return self.inner.simplify(args, info);
        };
        Ok(ExprSimplifyResult::Simplified(Expr::Literal(
            ScalarValue::TimestampNanosecond(start.timestamp_nanos_opt(), tz.clone()),
            None,
        )))
    }
}

/// Put the session's `now()` (and `current_timestamp`, `transaction_timestamp()`) in place
/// of DataFusion's.
pub fn register(ctx: &datafusion::prelude::SessionContext, start: TransactionStart) {
    let Ok(inner) = datafusion::execution::FunctionRegistry::udf(ctx, "now") else {
        tracing::error!("no now() to wrap");
        return;
    };
    ctx.register_udf(ScalarUDF::new_from_impl(TransactionNow {
        inner,
        start,
        aliases: vec!["current_timestamp".into(), "transaction_timestamp".into()],
    }));
}
