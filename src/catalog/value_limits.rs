//! Functions whose result can be far larger than their arguments (`lpad('x', 2147483647)`,
//! `repeat`, `array_repeat`, `replace`, `range`) check the size of what they would build
//! before building it: a value may hold at most 1 GB, as in Postgres, and one call over a
//! batch of rows at most 1 GB in all. Past that the statement fails with 54000 ("requested
//! length too large") instead of the server allocating it. Everything else is the wrapped
//! DataFusion function's own (`sql/hooked.rs`).

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::execution::FunctionRegistry;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF};

use crate::limits::{MAX_VALUE_BYTES, value_too_large};
use crate::sql::hooked::{CallHook, Hooked};

/// How a function's output size follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `lpad(s, n [, fill])`, `rpad`: `n` characters, up to 4 bytes each.
    Pad,
    /// `repeat(s, n)`: `len(s) · n` bytes.
    Repeat,
    /// `array_repeat(x, n)`: `n` elements.
    ArrayRepeat,
    /// `replace(s, from, to)`: every `from` may become `to`.
    Replace,
    /// `range(start, stop [, step])`, `generate_series` as an array: that many elements.
    Range,
}

/// The value of argument `k` at row `i` as an integer, where it is one.
fn int_at(v: &ColumnarValue, i: usize) -> Option<i64> {
    match v {
        ColumnarValue::Scalar(s) => scalar_int(s),
        ColumnarValue::Array(a) => {
            if a.is_null(i) {
                return None;
            }
            let s = ScalarValue::try_from_array(a, i).ok()?;
            scalar_int(&s)
        }
    }
}

fn scalar_int(s: &ScalarValue) -> Option<i64> {
    match s {
        ScalarValue::Int8(v) => v.map(i64::from),
        ScalarValue::Int16(v) => v.map(i64::from),
        ScalarValue::Int32(v) => v.map(i64::from),
        ScalarValue::Int64(v) => *v,
        ScalarValue::UInt8(v) => v.map(i64::from),
        ScalarValue::UInt16(v) => v.map(i64::from),
        ScalarValue::UInt32(v) => v.map(i64::from),
        ScalarValue::UInt64(v) => v.map(|x| x.min(i64::MAX as u64) as i64),
        _ => None,
    }
}

/// Byte length of a string argument at row `i` (0 for NULL or non-strings).
fn len_at(v: &ColumnarValue, i: usize) -> u128 {
    match v {
        ColumnarValue::Scalar(s) => match s {
            ScalarValue::Utf8(Some(x))
            | ScalarValue::LargeUtf8(Some(x))
            | ScalarValue::Utf8View(Some(x)) => x.len() as u128,
            ScalarValue::Binary(Some(x))
            | ScalarValue::LargeBinary(Some(x))
            | ScalarValue::BinaryView(Some(x)) => x.len() as u128,
            _ => 0,
        },
        ColumnarValue::Array(a) => {
            if a.is_null(i) {
                return 0;
            }
            match a.data_type() {
                DataType::Utf8 => a.as_string::<i32>().value(i).len() as u128,
                DataType::LargeUtf8 => a.as_string::<i64>().value(i).len() as u128,
                DataType::Utf8View => a.as_string_view().value(i).len() as u128,
                DataType::Binary => a.as_binary::<i32>().value(i).len() as u128,
                DataType::LargeBinary => a.as_binary::<i64>().value(i).len() as u128,
                _ => 0,
            }
        }
    }
}

fn rows(args: &[ColumnarValue], n: usize) -> usize {
    if args.iter().any(|a| matches!(a, ColumnarValue::Array(_))) {
        n
    } else {
        1
    }
}

impl Growth {
    /// Bytes row `i` would produce (an upper bound).
    fn row_bytes(&self, args: &[ColumnarValue], i: usize) -> u128 {
        let n = |k: usize| args.get(k).and_then(|a| int_at(a, i)).unwrap_or(0).max(0) as u128;
        match self {
            Growth::Pad => n(1) * 4,
            Growth::Repeat => args.first().map(|a| len_at(a, i)).unwrap_or(0) * n(1),
            Growth::ArrayRepeat => n(1) * 8,
            Growth::Replace => {
                let s = args.first().map(|a| len_at(a, i)).unwrap_or(0);
                let from = args.get(1).map(|a| len_at(a, i)).unwrap_or(0).max(1);
                let to = args.get(2).map(|a| len_at(a, i)).unwrap_or(0);
                s + (s / from) * to
            }
            Growth::Range => {
                let start = args.first().and_then(|a| int_at(a, i)).unwrap_or(0) as i128;
                let stop = args.get(1).and_then(|a| int_at(a, i)).unwrap_or(0) as i128;
                let step = args.get(2).and_then(|a| int_at(a, i)).unwrap_or(1) as i128;
                if step == 0 {
                    return 0;
                }
                let count = ((stop - start) / step).max(0) as u128 + 1;
                count * 8
            }
        }
    }

    fn check(&self, name: &str, args: &[ColumnarValue], number_rows: usize) -> DfResult<()> {
        let mut total: u128 = 0;
        for i in 0..rows(args, number_rows) {
            let b = self.row_bytes(args, i);
            if b > MAX_VALUE_BYTES as u128 {
                return Err(DataFusionError::External(Box::new(value_too_large(name))));
            }
            total += b;
            if total > MAX_VALUE_BYTES as u128 {
                return Err(DataFusionError::External(Box::new(value_too_large(
                    &format!("{name} (over these rows together)"),
                ))));
            }
        }
        Ok(())
    }
}

impl CallHook for Growth {
    fn call(&self, inner: &ScalarUDF, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.check(inner.name(), &args.args, args.number_rows)?;
        inner.invoke_with_args(args)
    }
}

/// Wrap the session's functions that can grow without bound.
pub fn register(ctx: &SessionContext) {
    let growth = [
        ("lpad", Growth::Pad),
        ("rpad", Growth::Pad),
        ("repeat", Growth::Repeat),
        ("array_repeat", Growth::ArrayRepeat),
        ("replace", Growth::Replace),
        ("range", Growth::Range),
        ("generate_series", Growth::Range),
    ];
    for (name, g) in growth {
        if let Ok(inner) = ctx.udf(name) {
            ctx.register_udf(Hooked::udf(inner, g));
        }
    }
}
