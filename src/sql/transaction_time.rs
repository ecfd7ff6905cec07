//! `now()`, `current_timestamp` and `transaction_timestamp()` as Postgres has them: the start
//! of the transaction — inside a block (BEGIN ... COMMIT) the block's start, the same for
//! every statement of it; outside one the statement's start (DataFusion's `now()`, which
//! this wraps). `statement_timestamp()` stays the statement's start, `clock_timestamp()`
//! the time now.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use datafusion::arrow::datatypes::{DataType, FieldRef, TimeUnit};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

/// The start of a session's transaction block (None outside one), shared with its `now()`.
pub type TransactionStart = Arc<parking_lot::RwLock<Option<DateTime<Utc>>>>;

#[derive(Debug)]
struct TransactionNow {
    name: &'static str,
    /// DataFusion's `now()`: its zone and, outside a block, its answer (in nanoseconds,
    /// given here in microseconds: Postgres' resolution and every other timestamp's here,
    /// so that comparing one with `now()` casts nothing, and `'infinity'` or a date past
    /// 2262 compares without overflowing nanoseconds).
    inner: Arc<ScalarUDF>,
    /// The session's block start; None for `statement_timestamp()`.
    start: Option<TransactionStart>,
    aliases: Vec<String>,
}

impl PartialEq for TransactionNow {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && match (&self.start, &other.start) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }
}

impl Eq for TransactionNow {}

impl std::hash::Hash for TransactionNow {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        "weir_transaction_now".hash(state);
        self.name.hash(state);
    }
}

/// A nanosecond timestamp (DataFusion's `now()`) in microseconds, same zone.
fn in_micros(v: ScalarValue) -> ScalarValue {
    match v {
        ScalarValue::TimestampNanosecond(ns, tz) => {
            ScalarValue::TimestampMicrosecond(ns.map(|n| n.div_euclid(1000)), tz)
        }
        other => other,
    }
}

impl ScalarUDFImpl for TransactionNow {
    fn name(&self) -> &str {
        self.name
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
        let f = self.inner.return_field_from_args(args)?;
        let DataType::Timestamp(_, tz) = f.data_type() else {
            return Ok(f);
        };
        let t = DataType::Timestamp(TimeUnit::Microsecond, tz.clone());
        Ok(Arc::new(f.as_ref().clone().with_data_type(t)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let to = args.return_field.data_type().clone();
        match self.inner.invoke_with_args(args)? {
            ColumnarValue::Scalar(v) => Ok(ColumnarValue::Scalar(in_micros(v))),
            ColumnarValue::Array(a) => Ok(ColumnarValue::Array(datafusion::arrow::compute::cast(
                &a, &to,
            )?)),
        }
    }
    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> DfResult<ExprSimplifyResult> {
        let Some(start) = self.start.as_ref().and_then(|s| *s.read()) else {
            return Ok(match self.inner.simplify(args, info)? {
                ExprSimplifyResult::Simplified(Expr::Literal(v, meta)) => {
                    ExprSimplifyResult::Simplified(Expr::Literal(in_micros(v), meta))
                }
                ExprSimplifyResult::Simplified(e) => ExprSimplifyResult::Simplified(e),
                ExprSimplifyResult::Original(args) => ExprSimplifyResult::Original(args),
            });
        };
        let field = self.inner.return_field_from_args(ReturnFieldArgs {
            arg_fields: &[],
            scalar_arguments: &[],
        })?;
        let DataType::Timestamp(_, tz) = field.data_type() else {
            return self.inner.simplify(args, info);
        };
        Ok(ExprSimplifyResult::Simplified(Expr::Literal(
            ScalarValue::TimestampMicrosecond(Some(start.timestamp_micros()), tz.clone()),
            None,
        )))
    }
}

/// Put the session's `now()` (and `current_timestamp`, `transaction_timestamp()`) in place
/// of DataFusion's.
pub fn register(ctx: &datafusion::prelude::SessionContext, start: TransactionStart) {
    wrap_now(
        ctx,
        "now",
        Some(start),
        vec!["current_timestamp".into(), "transaction_timestamp".into()],
    );
}

/// `statement_timestamp()`: the statement's start (DataFusion's `now()`, in microseconds).
pub fn register_statement_timestamp(ctx: &datafusion::prelude::SessionContext) {
    wrap_now(ctx, "statement_timestamp", None, vec![]);
}

/// DataFusion's `now()` (unwrapped, if a registration before wrapped it) under `name`.
fn wrap_now(
    ctx: &datafusion::prelude::SessionContext,
    name: &'static str,
    start: Option<TransactionStart>,
    aliases: Vec<String>,
) {
    let Ok(inner) = datafusion::execution::FunctionRegistry::udf(ctx, "now") else {
        tracing::error!("no now() to wrap");
        return;
    };
    let inner = match inner.inner().downcast_ref::<TransactionNow>() {
        Some(t) => t.inner.clone(),
        None => inner,
    };
    ctx.register_udf(ScalarUDF::new_from_impl(TransactionNow {
        name,
        inner,
        start,
        aliases,
    }));
}

/// `pg_sleep(seconds)`: waits, and stops with the statement's cancel or timeout (`check`
/// says whether one was raised: asked every 10 ms). Answers `void` (`sql/void.rs`).
pub fn register_sleep(
    ctx: &datafusion::prelude::SessionContext,
    check: Arc<dyn Fn() -> crate::error::Result<()> + Send + Sync>,
) {
    use datafusion::arrow::array::{Array, AsArray};
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
            ColumnarValue::Scalar(_) => ColumnarValue::Scalar(ScalarValue::Null),
            ColumnarValue::Array(a) => {
                ColumnarValue::Array(Arc::new(datafusion::arrow::array::NullArray::new(a.len())))
            }
        })
    };
    ctx.register_udf(crate::sql::void::void(
        datafusion::logical_expr::create_udf(
            "pg_sleep",
            vec![DataType::Float64],
            DataType::Null,
            datafusion::logical_expr::Volatility::Volatile,
            Arc::new(sleep),
        ),
    ));
}
