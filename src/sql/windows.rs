//! Window table functions. `TUMBLE(src, ts, size [, offset])`, `HOP(src, ts, hop, size [, offset])`
//! and `SESSION(src, ts, gap)` in FROM are rewritten to derived tables that add
//! `window_start` and `window_end`:
//!
//! - TUMBLE: one window per row, `weir_window_start(ts, size, offset, 0)`;
//! - HOP: `size / hop` windows per row, a UNION ALL of that many projections with
//!   `weir_window_start(ts, hop, 0, j)` (j = 0..n), so no new operator is needed;
//! - SESSION: placeholders `weir_session_start/end(ts, gap)`; sessions depend on the GROUP
//!   BY keys, so the view planner replaces the aggregate over them with the session
//!   operator. Outside a materialized view SESSION is refused.
//!
//! The UDFs work on microsecond timestamps (with or without time zone).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, TimestampMicrosecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::sql::sqlparser::ast;

use crate::error::{Result, WeirError};
use crate::sql::time::interval_expr_micros;

/// The window functions' result: the first argument's timestamp type, in microseconds.
fn ts_type(t: &DataType) -> DataType {
    match t {
        DataType::Timestamp(_, tz) => DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
        _ => DataType::Timestamp(TimeUnit::Microsecond, None),
    }
}

#[derive(Debug, PartialEq, Eq, Hash, Clone, Copy)]
enum Kind {
    /// (ts, stride, offset, back): floor((ts - offset) / stride) * stride + offset - back * stride
    Start,
    /// (start, size): start + size
    End,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct WindowFn {
    name: &'static str,
    kind: Kind,
    signature: Signature,
}

impl ScalarUDFImpl for WindowFn {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        Ok(ts_type(args.first().unwrap_or(&DataType::Null)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let n = args.number_rows;
        let out_type = ts_type(&args.args[0].data_type());
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let ts = cast(
            &arrays[0],
            &DataType::Timestamp(TimeUnit::Microsecond, None),
        )?;
        let ts = ts
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .expect("cast to timestamp(us)");
        let int = |i: usize| -> DfResult<Int64Array> {
            let a = cast(&arrays[i], &DataType::Int64)?;
            Ok(a.as_any()
                .downcast_ref::<Int64Array>()
                .expect("cast to int64")
                .clone())
        };
        let out: TimestampMicrosecondArray = match self.kind {
            Kind::Start => {
                let (stride, offset, back) = (int(1)?, int(2)?, int(3)?);
                (0..ts.len())
                    .map(|i| {
                        if ts.is_null(i) {
                            return None;
                        }
                        let s = stride.value(i).max(1);
                        let o = offset.value(i);
                        let t = ts.value(i);
                        Some((t - o).div_euclid(s) * s + o - back.value(i) * s)
                    })
                    .collect()
            }
            Kind::End => {
                let size = int(1)?;
                (0..ts.len())
                    .map(|i| (!ts.is_null(i)).then(|| ts.value(i) + size.value(i)))
                    .collect()
            }
        };
        let out: ArrayRef = Arc::new(out);
        let out = cast(&out, &out_type)?;
        if args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)))
            && n == 1
        {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

pub const WINDOW_START: &str = "weir_window_start";
pub const WINDOW_END: &str = "weir_window_end";
/// Placeholders of SESSION: the row's own event time, and that plus the gap.
pub const SESSION_START: &str = "weir_session_start";
pub const SESSION_END: &str = "weir_session_end";

pub fn register(ctx: &SessionContext) {
    for (name, kind) in [
        (WINDOW_START, Kind::Start),
        (WINDOW_END, Kind::End),
        (SESSION_END, Kind::End),
    ] {
        ctx.register_udf(ScalarUDF::new_from_impl(WindowFn {
            name,
            kind,
            signature: Signature::any(
                if kind == Kind::Start { 4 } else { 2 },
                Volatility::Immutable,
            ),
        }));
    }
    // session start is the event time itself: (ts, gap) -> ts, computed as ts + 0
    ctx.register_udf(ScalarUDF::new_from_impl(SessionStart {
        signature: Signature::any(2, Volatility::Immutable),
    }));
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionStart {
    signature: Signature,
}

impl ScalarUDFImpl for SessionStart {
    fn name(&self) -> &str {
        SESSION_START
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        Ok(ts_type(args.first().unwrap_or(&DataType::Null)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let out_type = ts_type(&args.args[0].data_type());
        match &args.args[0] {
            ColumnarValue::Array(a) => Ok(ColumnarValue::Array(cast(a, &out_type)?)),
            ColumnarValue::Scalar(s) => Ok(ColumnarValue::Scalar(s.cast_to(&out_type)?)),
        }
    }
}

/// Rewrite window table functions in FROM. Returns whether a SESSION was rewritten.
pub fn rewrite_table_factor(tf: &mut ast::TableFactor) -> Result<bool> {
    let ast::TableFactor::Table {
        name, args, alias, ..
    } = tf
    else {
        return Ok(false);
    };
    let Some(args) = args else {
        return Ok(false);
    };
    let fname = name
        .0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.to_lowercase())
        .unwrap_or_default();
    if !matches!(fname.as_str(), "tumble" | "hop" | "session") {
        return Ok(false);
    }
    let exprs: Vec<ast::Expr> = args
        .args
        .iter()
        .map(|a| match a {
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Ok(e.clone()),
            other => Err(WeirError::syntax(format!(
                "{} takes positional arguments, got {other}",
                fname.to_uppercase()
            ))),
        })
        .collect::<Result<_>>()?;
    let usage = |msg: &str| WeirError::syntax(format!("{}: {msg}", fname.to_uppercase()));
    let most = match fname.as_str() {
        "tumble" => 4,
        "hop" => 5,
        _ => 3,
    };
    if exprs.len() > most {
        return Err(usage(&format!(
            "takes at most {most} arguments, got {}",
            exprs.len()
        )));
    }
    let src = match exprs.first() {
        Some(ast::Expr::Identifier(id)) => id.to_string(),
        Some(ast::Expr::CompoundIdentifier(ids)) => ids
            .iter()
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join("."),
        _ => return Err(usage("the first argument is a table or view")),
    };
    let ts = match exprs.get(1) {
        Some(e @ (ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_))) => e.to_string(),
        _ => return Err(usage("the second argument is the event-time column")),
    };
    let micros = |i: usize, what: &str| -> Result<i64> {
        let e = exprs
            .get(i)
            .ok_or_else(|| usage(&format!("missing {what}")))?;
        let v = interval_expr_micros(e)?;
        if v <= 0 && what != "offset" {
            return Err(usage(&format!("{what} must be positive")));
        }
        Ok(v)
    };
    let alias_name = alias
        .as_ref()
        .map(|a| a.name.to_string())
        .unwrap_or_else(|| src.rsplit('.').next().unwrap_or(&src).to_owned());
    let (sql, session) = match fname.as_str() {
        "tumble" => {
            let size = micros(2, "window size")?;
            let offset = if exprs.len() > 3 {
                micros(3, "offset")?
            } else {
                0
            };
            let start = format!("{WINDOW_START}({ts}, {size}, {offset}, 0)");
            (
                format!(
                    "(SELECT *, {start} AS window_start, {WINDOW_END}({start}, {size}) AS window_end FROM {src})"
                ),
                false,
            )
        }
        "hop" => {
            let hop = micros(2, "hop")?;
            let size = micros(3, "window size")?;
            if size % hop != 0 {
                return Err(usage("the window size must be a multiple of the hop"));
            }
            let n = size / hop;
            if n > 1000 {
                return Err(usage("a window may overlap at most 1000 hops"));
            }
            // windows start at offset + k * hop, as TUMBLE's offset moves its windows
            let offset = if exprs.len() > 4 {
                micros(4, "offset")?
            } else {
                0
            };
            let parts: Vec<String> = (0..n)
                .map(|j| {
                    let start = format!("{WINDOW_START}({ts}, {hop}, {offset}, {j})");
                    format!(
                        "SELECT *, {start} AS window_start, {WINDOW_END}({start}, {size}) AS window_end FROM {src}"
                    )
                })
                .collect();
            (format!("({})", parts.join(" UNION ALL ")), false)
        }
        _ => {
            let gap = micros(2, "gap")?;
            (
                format!(
                    "(SELECT *, {SESSION_START}({ts}, {gap}) AS window_start, {SESSION_END}({ts}, {gap}) AS window_end FROM {src})"
                ),
                true,
            )
        }
    };
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    let mut p = datafusion::sql::sqlparser::parser::Parser::new(&dialect).try_with_sql(&sql)?;
    let derived = p.parse_table_factor()?;
    let ast::TableFactor::Derived { subquery, .. } = derived else {
        return Err(WeirError::internal(
            "window rewrite did not give a derived table",
        ));
    };
    *tf = ast::TableFactor::Derived {
        lateral: false,
        subquery,
        alias: Some(ast::TableAlias {
            explicit: true,
            name: ast::Ident::new(alias_name),
            columns: vec![],
            at: None,
        }),
        sample: None,
    };
    Ok(session)
}
