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

/// `pg_sleep(seconds)`: waits, and stops with the statement's cancel or timeout (`check`
/// says whether one was raised: asked every 10 ms). Answers NULL (Postgres' `void`).
pub fn register_sleep(
    ctx: &datafusion::prelude::SessionContext,
    check: Arc<dyn Fn() -> crate::error::Result<()> + Send + Sync>,
) {
    use datafusion::arrow::array::{Array, AsArray, StringArray};
    use datafusion::arrow::datatypes::Float64Type;
    let sleep = move |args: &[ColumnarValue]| -> DfResult<ColumnarValue> {
        let seconds = match &args[0] {
            ColumnarValue::Scalar(s) => match s.cast_to(&DataType::Float64)? {
                ScalarValue::Float64(v) => vec![v],
                _ => vec![None],
            },
            ColumnarValue::Array(a) => {
                let a = datafusion::arrow::compute::cast(a, &DataType::Float64)?;
                let a = a.as_primitive::<Float64Type>();
                (0..a.len())
                    .map(|i| (!a.is_null(i)).then(|| a.value(i)))
                    .collect()
            }
        };
        let total: f64 = seconds
            .iter()
            .flatten()
            .filter(|s| s.is_finite() && **s > 0.0)
            .sum();
        let until = std::time::Instant::now() + std::time::Duration::from_secs_f64(total.min(1e9));
        let wait = || -> DfResult<()> {
            loop {
                check().map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
                let now = std::time::Instant::now();
                if now >= until {
                    return Ok(());
                }
                std::thread::sleep((until - now).min(std::time::Duration::from_millis(10)));
            }
        };
        // a worker of the multi-threaded runtime hands its other tasks on while it waits
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait)?,
            _ => wait()?,
        }
        Ok(match &args[0] {
            ColumnarValue::Scalar(_) => ColumnarValue::Scalar(ScalarValue::Utf8(None)),
            ColumnarValue::Array(a) => {
                ColumnarValue::Array(Arc::new(StringArray::new_null(a.len())))
            }
        })
    };
    ctx.register_udf(datafusion::logical_expr::create_udf(
        "pg_sleep",
        vec![DataType::Float64],
        DataType::Utf8,
        datafusion::logical_expr::Volatility::Volatile,
        Arc::new(sleep),
    ));
}
