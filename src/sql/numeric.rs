//! `numeric` multiplication and division as Postgres computes them, where DataFusion's
//! decimal rules give other answers. `catalog/pg_semantics.rs` puts these in place of `*`
//! and `/` after type coercion:
//!
//! - **`*` with an unconstrained `numeric` operand** (an Arrow decimal of precision 38, what
//!   an unconstrained column, `x::numeric`, `sum` of one and a quotient are). DataFusion
//!   types `Decimal(38,10) * Decimal(38,10)` as `Decimal(38,20)`: shown with 20 decimals,
//!   and failing past 1.7·10^18 (the raw product overflows 128 bits). Here the exact
//!   product is taken in 256 bits and rounded half away from zero at the larger of the
//!   operands' scales, or 10 (an unconstrained `numeric`, shown without trailing zeros),
//!   never more than the sum of the scales; it fails only past what 38 digits at that scale
//!   hold (10^28 for two unconstrained operands, as storing the product would).
//!   Products of two constrained operands (literals, `numeric(p,s)` columns) are left to
//!   DataFusion, whose scale (the sum of the scales) is Postgres' exactly.
//! - **`/` of decimals**. DataFusion truncates the quotient at a scale of its own (`1.0/3`
//!   is `0.33333`, `2/3::numeric` ends in 6). Postgres rounds, keeping at least 16
//!   significant digits. Here the quotient is rounded half away from zero at scale 20 when
//!   the operands' precisions leave room for it, else 16 (never below either operand's
//!   scale), so every quotient Postgres gives with up to that many decimals is the same
//!   value here; a `numeric` is one scale per column (Arrow), so where Postgres shows fewer
//!   decimals (`33333.333333333333`), Weir shows the same value with more
//!   (`33333.3333333333333333`). A quotient of two constants is computed when planning
//!   ([`constant_quotient`]) at exactly Postgres' scale for those values.
//!
//! Errors as Postgres: `division by zero` (22012), `numeric field overflow` (22003).
//! One pass per batch over the raw 128-bit values; no per-row allocation.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Decimal128Array, PrimitiveArray};
use datafusion::arrow::compute::kernels::arity::try_binary;
use datafusion::arrow::datatypes::{DataType, Decimal128Type, i256};
use datafusion::arrow::error::ArrowError;
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::error::{WeirError, sqlstate};

/// Precision of an unconstrained `numeric` (and of what DataFusion computes from one).
const UNCONSTRAINED_PRECISION: u8 = 38;
/// Scale of an unconstrained `numeric` ([`crate::sql::types::NUMERIC_DEFAULT_SCALE`]).
const UNCONSTRAINED_SCALE: i8 = crate::sql::types::NUMERIC_DEFAULT_SCALE;
/// Postgres keeps at least this many significant digits in a quotient
/// (`NUMERIC_MIN_SIG_DIGITS`).
const MIN_SIG_DIGITS: i8 = 16;
/// The scale of a quotient when its operands leave room: Postgres' for a quotient in
/// [0.0001, 1).
const ROOMY_QUOTIENT_SCALE: i8 = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NumericOp {
    Mul,
    Div,
    /// `avg` of integers or numerics: the sum divided by the count (`/`'s kernel), at
    /// Postgres' 16 significant decimals (what it shows for an average from 1 to 9999), or
    /// the argument's scale if larger.
    Avg,
}

impl NumericOp {
    pub fn name(self) -> &'static str {
        match self {
            NumericOp::Mul => "weir_numeric_mul",
            NumericOp::Div => "weir_numeric_div",
            NumericOp::Avg => "weir_numeric_avg",
        }
    }

    /// The type `l op r` has in Postgres' rules, or `None` where DataFusion's own operator
    /// already answers as Postgres does (and is kept).
    pub fn result_type(self, l: &DataType, r: &DataType) -> Option<DataType> {
        let (&DataType::Decimal128(lp, ls), &DataType::Decimal128(rp, rs)) = (l, r) else {
            return None;
        };
        match self {
            // the exact product's scale, but no more than the operands' own (at least an
            // unconstrained numeric's): 38 digits do not hold the 20 decimals of a product
            // of two unconstrained numerics and the integer digits too
            NumericOp::Mul => (lp == UNCONSTRAINED_PRECISION || rp == UNCONSTRAINED_PRECISION)
                .then(|| {
                    let scale = (ls.max(0) + rs.max(0))
                        .min(ls.max(rs).max(UNCONSTRAINED_SCALE))
                        .min(UNCONSTRAINED_PRECISION as i8);
                    DataType::Decimal128(UNCONSTRAINED_PRECISION, scale)
                }),
            NumericOp::Avg => Some(DataType::Decimal128(
                UNCONSTRAINED_PRECISION,
                MIN_SIG_DIGITS
                    .max(ls)
                    .max(rs)
                    .min(UNCONSTRAINED_PRECISION as i8),
            )),
            NumericOp::Div => {
                // the quotient's integer digits are at most the dividend's plus the
                // divisor's decimals (dividing by its smallest non-zero value)
                let int_digits = (lp as i16 - ls as i16).max(0) + rs.max(0) as i16;
                let room = UNCONSTRAINED_PRECISION as i16 - int_digits;
                let scale = if room >= ROOMY_QUOTIENT_SCALE as i16 {
                    ROOMY_QUOTIENT_SCALE
                } else {
                    MIN_SIG_DIGITS
                };
                let scale = scale.max(ls).max(rs).min(UNCONSTRAINED_PRECISION as i8);
                Some(DataType::Decimal128(UNCONSTRAINED_PRECISION, scale))
            }
        }
    }
}

/// The decimal an operand of numeric `*` or `/` is taken as: itself, or an integer's
/// exact decimal (as DataFusion's coercion takes it). `None` for the rest (a float makes
/// the operation a float one).
pub fn as_decimal(t: &DataType) -> Option<DataType> {
    Some(match t {
        DataType::Decimal128(..) => t.clone(),
        DataType::Int8 | DataType::UInt8 => DataType::Decimal128(3, 0),
        DataType::Int16 | DataType::UInt16 => DataType::Decimal128(5, 0),
        DataType::Int32 | DataType::UInt32 => DataType::Decimal128(10, 0),
        DataType::Int64 => DataType::Decimal128(19, 0),
        DataType::UInt64 => DataType::Decimal128(20, 0),
        _ => return None,
    })
}

/// An unsigned number with an exponent (`1.25e3`) written without it (`1250`), with the
/// scale Postgres gives it (`1.50e1` is `15.0`); None without an exponent or for anything
/// else.
pub fn expand_exponent(text: &str) -> Option<String> {
    let (mantissa, exp) = text.split_once(['e', 'E'])?;
    let exp: i64 = exp.parse().ok()?;
    if exp.abs() > 1000 {
        return None;
    }
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut digits = format!("{int}{frac}");
    let scale = frac.len() as i64 - exp;
    if scale <= 0 {
        digits.push_str(&"0".repeat((-scale) as usize));
        let t = digits.trim_start_matches('0');
        return Some(if t.is_empty() { "0".into() } else { t.into() });
    }
    let scale = scale as usize;
    if digits.len() <= scale {
        digits = format!("{}{digits}", "0".repeat(scale + 1 - digits.len()));
    }
    let (i, f) = digits.split_at(digits.len() - scale);
    let i = i.trim_start_matches('0');
    Some(format!("{}.{f}", if i.is_empty() { "0" } else { i }))
}

/// Text a `numeric` is read from, in the form arrow's cast reads: an exponent written out
/// (`1e3` is `1000`, `-1.5E-2` `-0.015`, as Postgres reads them), blanks around it dropped.
/// None when the text is read as it is.
pub fn numeric_text(text: &str) -> Option<String> {
    if !text.bytes().any(|b| b == b'e' || b == b'E') {
        return None;
    }
    let t = text.trim();
    let (sign, body) = match t.as_bytes().first() {
        Some(b'-') => ("-", &t[1..]),
        Some(b'+') => ("", &t[1..]),
        _ => ("", t),
    };
    let plain = expand_exponent(body)?;
    Some(format!("{sign}{plain}"))
}

/// [`numeric_text`] over a column: the column itself when no value has an exponent.
pub fn numeric_text_array(a: &ArrayRef) -> DfResult<ArrayRef> {
    let s = datafusion::arrow::compute::cast(a, &DataType::Utf8)?;
    let s = s.as_string::<i32>();
    if !s
        .iter()
        .flatten()
        .any(|v| v.bytes().any(|b| b == b'e' || b == b'E'))
    {
        return Ok(a.clone());
    }
    let out: datafusion::arrow::array::StringArray = s
        .iter()
        .map(|v| v.map(|v| numeric_text(v).unwrap_or_else(|| v.to_owned())))
        .collect();
    Ok(Arc::new(out))
}

/// A number's weight and first digit in Postgres' base-10000 `numeric` form (`raw` at
/// `scale` decimals): the first non-zero digit group stands for 10000^weight. Zero is
/// weight 0, digit 0.
fn base10000_head(raw: i128, scale: i8) -> (i32, u128) {
    let v = raw.unsigned_abs();
    if v == 0 {
        return (0, 0);
    }
    let scale = scale.max(0) as u32;
    let unit = 10u128.pow(scale);
    let int = v / unit;
    if int > 0 {
        let digits = int.ilog10() as i32 + 1;
        let weight = (digits - 1) / 4;
        return (weight, int / 10000u128.pow(weight as u32));
    }
    // only decimals: padded to whole groups of four, the first non-zero group
    let groups = scale.div_ceil(4);
    let frac = (v % unit) * 10u128.pow(groups * 4 - scale);
    for k in 1..=groups {
        let g = (frac / 10000u128.pow(groups - k)) % 10000;
        if g != 0 {
            return (-(k as i32), g);
        }
    }
    (0, 0)
}

/// The scale Postgres gives the quotient of these two values (`select_div_scale`): at
/// least 16 significant digits, at least either operand's scale.
pub fn quotient_scale(l: i128, ls: i8, r: i128, rs: i8) -> i32 {
    let (w1, d1) = base10000_head(l, ls);
    let (w2, d2) = base10000_head(r, rs);
    let mut qweight = w1 - w2;
    if d1 <= d2 {
        qweight -= 1;
    }
    (MIN_SIG_DIGITS as i32 - qweight * 4)
        .max(ls as i32)
        .max(rs as i32)
        .max(0)
}

/// `l / r` of two constants as Postgres computes it, at the scale it gives this quotient
/// (`5.0 / 2` is `2.5000000000000000`, `1 / 3.0` `0.33333333333333333333`, `100000 / 3.0`
/// `33333.333333333333`): raw value and scale. `None` when the divisor is zero (the
/// division's own error then) or the quotient does not fit 38 digits at that scale.
pub fn constant_quotient(l: i128, ls: i8, r: i128, rs: i8) -> Option<(i128, i8)> {
    if r == 0 {
        return None;
    }
    let s = quotient_scale(l, ls, r, rs);
    let s = i8::try_from(s)
        .ok()
        .filter(|s| *s <= UNCONSTRAINED_PRECISION as i8)?;
    let la = Decimal128Array::from(vec![l]);
    let ra = Decimal128Array::from(vec![r]);
    let q = arith(NumericOp::Div, &la, ls, &ra, rs, UNCONSTRAINED_PRECISION, s).ok()?;
    (!q.is_null(0)).then(|| (q.value(0), s))
}

/// `l * r` or `l / r` over decimals, typed by [`NumericOp::result_type`].
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NumericArith {
    op: NumericOp,
    signature: Signature,
}

impl NumericArith {
    pub fn udf(op: NumericOp) -> Arc<ScalarUDF> {
        Arc::new(ScalarUDF::new_from_impl(NumericArith {
            op,
            signature: Signature::user_defined(Volatility::Immutable),
        }))
    }
}

fn pg_error(code: &'static str, msg: String, detail: Option<String>) -> DataFusionError {
    let mut e = WeirError::new(code, msg);
    if let Some(d) = detail {
        e = e.with_detail(d);
    }
    DataFusionError::External(Box::new(e))
}

/// 10^n, saturating (never reached: scales are at most 38 each).
pub(crate) fn pow10(n: u32) -> i256 {
    i256::from_i128(10).checked_pow(n).unwrap_or(i256::MAX)
}

/// `n / d` rounded half away from zero (`d` > 0).
pub(crate) fn div_round(n: i256, d: i256) -> i256 {
    let (q, r) = (n.wrapping_div(d), n.wrapping_rem(d));
    if r.wrapping_abs().wrapping_mul(i256::from_i128(2)) >= d {
        if n.is_negative() {
            q.wrapping_sub(i256::ONE)
        } else {
            q.wrapping_add(i256::ONE)
        }
    } else {
        q
    }
}

impl ScalarUDFImpl for NumericArith {
    fn name(&self) -> &str {
        self.op.name()
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        match args {
            [l, r] => self
                .op
                .result_type(l, r)
                .ok_or_else(|| DataFusionError::Plan(format!("{} of {l} and {r}", self.op.name()))),
            _ => Err(DataFusionError::Plan(format!(
                "{} takes two arguments",
                self.op.name()
            ))),
        }
    }
    /// Integers are taken as their exact decimals, decimals as themselves.
    fn coerce_types(&self, args: &[DataType]) -> DfResult<Vec<DataType>> {
        args.iter()
            .map(|t| {
                as_decimal(t)
                    .ok_or_else(|| DataFusionError::Plan(format!("{} of {t}", self.op.name())))
            })
            .collect()
    }
    /// A constant name (the planner aliases the expression back to its own).
    fn schema_name(&self, _args: &[Expr]) -> DfResult<String> {
        Ok(self.op.name().to_owned())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let n = args.number_rows;
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = args
            .args
            .iter()
            .map(|a| match a {
                ColumnarValue::Array(a) => Ok(a.clone()),
                ColumnarValue::Scalar(s) => s.to_array_of_size(if scalar { 1 } else { n }),
            })
            .collect::<DfResult<Vec<ArrayRef>>>()?;
        let (DataType::Decimal128(_, ls), DataType::Decimal128(_, rs)) =
            (arrays[0].data_type(), arrays[1].data_type())
        else {
            return Err(DataFusionError::Internal(format!(
                "{} of {} and {}",
                self.op.name(),
                arrays[0].data_type(),
                arrays[1].data_type()
            )));
        };
        let DataType::Decimal128(p, s) = args.return_field.data_type().clone() else {
            return Err(DataFusionError::Internal(format!(
                "{} typed {}",
                self.op.name(),
                args.return_field.data_type()
            )));
        };
        let result = arith(
            self.op,
            arrays[0].as_primitive::<Decimal128Type>(),
            *ls,
            arrays[1].as_primitive::<Decimal128Type>(),
            *rs,
            p,
            s,
        )?;
        let result: ArrayRef = Arc::new(result);
        if scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                &result, 0,
            )?))
        } else {
            Ok(ColumnarValue::Array(result))
        }
    }
}

/// The kernel: each pair of raw values (at scales `ls`, `rs`) to the raw result at scale
/// `s`, exact in 256 bits, rounded once.
/// `n / d` rounded half away from zero in 128 bits (None: `MIN / -1`). `d` is not 0.
fn div_round_i128(n: i128, d: i128) -> Option<i128> {
    let (q, r) = (n.checked_div(d)?, n.checked_rem(d)?);
    // |r| < |d| <= 2^127, so 2|r| fits 128 unsigned bits
    if r.unsigned_abs() * 2 >= d.unsigned_abs() {
        Some(if (n < 0) != (d < 0) { q - 1 } else { q + 1 })
    } else {
        Some(q)
    }
}

/// `a * factor / b` rounded half away from zero, in 128 bits: None when it does not fit
/// (the caller divides in 256 bits then). `b` is not 0.
fn div_scaled_i128(a: i128, factor: i128, b: i128) -> Option<i128> {
    div_round_i128(a.checked_mul(factor)?, b)
}

/// [`div_scaled_i128`] in 256 bits, for any shift (`shift < 0`: `a / (b * factor)`).
fn div_scaled_i256(a: i128, b: i128, shift: i32, factor: i256) -> Option<i256> {
    let a = i256::from_i128(a);
    let (num, den) = if shift >= 0 {
        (a.checked_mul(factor)?, i256::from_i128(b))
    } else {
        (a, i256::from_i128(b).wrapping_mul(factor))
    };
    Some(if den.is_negative() {
        div_round(num.wrapping_neg(), den.wrapping_neg())
    } else {
        div_round(num, den)
    })
}

fn arith(
    op: NumericOp,
    l: &PrimitiveArray<Decimal128Type>,
    ls: i8,
    r: &PrimitiveArray<Decimal128Type>,
    rs: i8,
    p: u8,
    s: i8,
) -> DfResult<Decimal128Array> {
    // 10^p: a Decimal128's precision is at most 38, and 10^38 fits 128 bits
    let limit = pow10(p as u32).to_i128().unwrap_or(i128::MAX);
    // a value rounded to the result's scale (None: past 128 bits), checked against p
    let fits = |v: Option<i128>| {
        v.filter(|v| v.unsigned_abs() < limit.unsigned_abs())
            .ok_or_else(|| ArrowError::ComputeError("numeric field overflow".into()))
    };
    let res: Result<PrimitiveArray<Decimal128Type>, ArrowError> = match op {
        NumericOp::Mul => {
            // the exact product is at scale ls + rs
            let shift = ls as i32 + rs as i32 - s as i32;
            let factor = pow10(shift.unsigned_abs());
            // the usual product fits 128 bits: divided there (256-bit division is slow)
            let factor128 = factor.to_i128().filter(|_| shift >= 0);
            try_binary(l, r, |a, b| {
                fits(
                    factor128
                        .zip(a.checked_mul(b))
                        .and_then(|(f, p)| div_round_i128(p, f))
                        .or_else(|| {
                            let exact = i256::from_i128(a).wrapping_mul(i256::from_i128(b));
                            let v = if shift >= 0 {
                                Some(div_round(exact, factor))
                            } else {
                                exact.checked_mul(factor)
                            };
                            v.and_then(|v| v.to_i128())
                        }),
                )
            })
        }
        NumericOp::Div | NumericOp::Avg => {
            // (a / 10^ls) / (b / 10^rs) at scale s = a * 10^(s + rs - ls) / b
            let shift = s as i32 + rs as i32 - ls as i32;
            let factor = pow10(shift.unsigned_abs());
            // the usual quotient fits 128 bits: divided there (256-bit division is slow)
            let factor128 = factor.to_i128().filter(|_| shift >= 0);
            try_binary(l, r, |a, b| {
                if b == 0 {
                    return Err(ArrowError::DivideByZero);
                }
                fits(
                    factor128
                        .and_then(|f| div_scaled_i128(a, f, b))
                        .or_else(|| div_scaled_i256(a, b, shift, factor)?.to_i128()),
                )
            })
        }
    };
    let out = match res {
        Ok(v) => v,
        Err(ArrowError::DivideByZero) => {
            return Err(pg_error(
                sqlstate::DIVISION_BY_ZERO,
                "division by zero".into(),
                None,
            ));
        }
        Err(_) => {
            return Err(pg_error(
                sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                "numeric field overflow".into(),
                Some(format!(
                    "A field with precision {p}, scale {s} must round to an absolute value less than 10^{}.",
                    p as i16 - s as i16
                )),
            ));
        }
    };
    Ok(out.with_precision_and_scale(p, s)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(vals: &[Option<i128>], p: u8, s: i8) -> Decimal128Array {
        Decimal128Array::from(vals.to_vec())
            .with_precision_and_scale(p, s)
            .unwrap()
    }

    fn text(a: &Decimal128Array) -> Vec<String> {
        (0..a.len())
            .map(|i| {
                if a.is_null(i) {
                    "NULL".into()
                } else {
                    a.value_as_string(i)
                }
            })
            .collect()
    }

    #[test]
    fn products_of_unconstrained_are_exact_past_128_bits_and_rounded() {
        let u = |v: &[Option<i128>]| dec(v, 38, 10);
        // 1e15 * 1e10 (raw 1e25 * 1e20: past 128 bits), 1.5 * 2.25, NULL,
        // 0.00000000005 rounded half away from zero both ways
        let l = u(&[
            Some(10i128.pow(25)),
            Some(15_000_000_000),
            None,
            Some(5),
            Some(-5),
        ]);
        let r = u(&[
            Some(10i128.pow(20)),
            Some(22_500_000_000),
            Some(1),
            Some(1_000_000_000),
            Some(1_000_000_000),
        ]);
        let t = NumericOp::Mul
            .result_type(l.data_type(), r.data_type())
            .unwrap();
        assert_eq!(t, DataType::Decimal128(38, 10));
        let out = arith(NumericOp::Mul, &l, 10, &r, 10, 38, 10).unwrap();
        assert_eq!(
            text(&out),
            [
                "10000000000000000000000000.0000000000",
                "3.3750000000",
                "NULL",
                "0.0000000001",
                "-0.0000000001"
            ]
        );
        // 10^27 * 10: past 10^28, an unconstrained numeric's integer digits
        let big = u(&[Some(10i128.pow(37))]);
        let ten = u(&[Some(10 * 10i128.pow(10))]);
        let e = arith(NumericOp::Mul, &big, 10, &ten, 10, 38, 10).unwrap_err();
        assert!(e.to_string().contains("numeric field overflow"), "{e}");
        // two constrained operands keep DataFusion's exact product
        assert_eq!(
            NumericOp::Mul.result_type(&DataType::Decimal128(3, 2), &DataType::Decimal128(20, 0)),
            None
        );
    }

    /// The 128-bit quotient is the 256-bit one wherever it answers, on values at the
    /// edges (signs, halves, the largest operands) and on random ones.
    #[test]
    fn quotients_in_128_bits_are_the_256_bit_ones() {
        let edges = [
            0i128,
            1,
            -1,
            5,
            -5,
            15,
            -15,
            25,
            7,
            -7,
            999_999_999,
            i128::MAX,
            i128::MIN,
            i128::MAX / 10,
            i128::MIN / 10,
            10i128.pow(30),
            -(10i128.pow(30)),
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut values: Vec<i128> = edges.to_vec();
        for _ in 0..300 {
            let digits = (next() % 36) as u32;
            let v = (next() as i128 % 10i128.pow(digits.min(18)).max(1))
                * 10i128.pow(digits.saturating_sub(18));
            values.push(if next() % 2 == 0 { v } else { -v });
        }
        let mut fast = 0;
        for shift in [0i32, 1, 2, 16, 20, 30, 38] {
            let factor = pow10(shift as u32);
            let f128 = factor.to_i128().expect("10^38 fits");
            for &a in &values {
                for &b in values.iter().filter(|b| **b != 0) {
                    if let Some(q) = div_scaled_i128(a, f128, b) {
                        fast += 1;
                        assert_eq!(
                            Some(i256::from_i128(q)),
                            div_scaled_i256(a, b, shift, factor),
                            "{a} * 10^{shift} / {b}"
                        );
                    }
                }
            }
        }
        assert!(fast > 100_000, "the 128-bit path answered {fast} times");
    }

    #[test]
    fn quotients_round_at_postgres_digits() {
        // 2/3 with integer operands: room for 20 decimals, the last one rounded up
        let t = NumericOp::Div
            .result_type(&DataType::Decimal128(10, 0), &DataType::Decimal128(10, 0))
            .unwrap();
        assert_eq!(t, DataType::Decimal128(38, 20));
        // a bigint dividend leaves 19 decimals: 16
        let t = NumericOp::Div
            .result_type(&DataType::Decimal128(19, 0), &DataType::Decimal128(2, 1))
            .unwrap();
        assert_eq!(t, DataType::Decimal128(38, 16));
        let out = arith(
            NumericOp::Div,
            &dec(&[Some(2), Some(-2), Some(10), None], 20, 0),
            0,
            &dec(&[Some(3), Some(3), Some(-4), Some(0)], 20, 0),
            0,
            38,
            20,
        )
        .unwrap();
        assert_eq!(
            text(&out),
            [
                "0.66666666666666666667",
                "-0.66666666666666666667",
                "-2.50000000000000000000",
                "NULL"
            ]
        );
        // unconstrained operands: 16 decimals (22 integer digits left)
        let t = NumericOp::Div
            .result_type(&DataType::Decimal128(38, 10), &DataType::Decimal128(38, 10))
            .unwrap();
        assert_eq!(t, DataType::Decimal128(38, 16));
        let e = arith(
            NumericOp::Div,
            &dec(&[Some(1)], 38, 10),
            10,
            &dec(&[Some(0)], 38, 10),
            10,
            38,
            16,
        )
        .unwrap_err();
        assert!(e.to_string().contains("division by zero"), "{e}");
        // a divisor with more decimals than the result: shifted the other way
        let out = arith(
            NumericOp::Div,
            &dec(&[Some(1)], 5, 0),
            0,
            &dec(&[Some(3 * 10i128.pow(30))], 38, 30),
            30,
            38,
            20,
        )
        .unwrap();
        assert_eq!(text(&out), ["0.33333333333333333333"]);
    }
}

#[cfg(test)]
mod quotient_scale_tests {
    use super::*;

    /// Exponent literals and numeric input text read as Postgres reads them.
    #[test]
    fn exponents_written_out() {
        for (text, want) in [
            ("1e6", Some("1000000")),
            ("1.25e3", Some("1250")),
            ("1.50e1", Some("15.0")),
            ("1.5e-3", Some("0.0015")),
            ("0e0", Some("0")),
            ("12.5", None),
        ] {
            assert_eq!(expand_exponent(text).as_deref(), want, "{text}");
        }
        for (text, want) in [
            (" -2.5E+1 ", Some("-25")),
            ("+1e3", Some("1000")),
            ("1.5e-2", Some("0.015")),
            ("12.5", None),
            ("1e", None),
            ("abc", None),
        ] {
            assert_eq!(numeric_text(text).as_deref(), want, "{text}");
        }
    }

    /// Scales and values Postgres 15 gives (`SELECT 5.0 / 2` ...).
    #[test]
    fn constant_quotients_are_postgres() {
        let cases: &[(i128, i8, i128, i8, i128, i8)] = &[
            // 5.0 / 2 = 2.5000000000000000
            (50, 1, 2, 0, 25_000_000_000_000_000, 16),
            // 1 / 3.0 = 0.33333333333333333333
            (1, 0, 30, 1, 33_333_333_333_333_333_333, 20),
            // 100000 / 3.0 = 33333.333333333333
            (100_000, 0, 30, 1, 33_333_333_333_333_333, 12),
            // 171 / 16.0 = 10.6875000000000000
            (171, 0, 160, 1, 106_875_000_000_000_000, 16),
            // -7.5 / 2.5 = -3.0000000000000000 (first digits 7 > 2)
            (-75, 1, 25, 1, -30_000_000_000_000_000, 16),
            // 2.5 / 7.5 = 0.33333333333333333333 (2 <= 7: one weight less)
            (25, 1, 75, 1, 33_333_333_333_333_333_333, 20),
            // 0.00012 / 1 = 0.000120000000000000000000 (weight -1: 24 decimals)
            (12, 5, 1, 0, 120_000_000_000_000_000_000, 24),
            // 0 / 5 = 0.00000000000000000000
            (0, 0, 5, 0, 0, 20),
        ];
        for &(l, ls, r, rs, want, want_s) in cases {
            assert_eq!(
                constant_quotient(l, ls, r, rs),
                Some((want, want_s)),
                "{l}e-{ls} / {r}e-{rs}"
            );
        }
        assert_eq!(constant_quotient(1, 0, 0, 0), None);
    }
}
