//! `variance`/`var_samp`, `var_pop`, `stddev`/`stddev_samp`, `stddev_pop` as Postgres
//! computes them (DataFusion's answer `16.249999999999996` where Postgres says `16.25`):
//!
//! - over `real`/`double precision`: Postgres' float8 accumulator (Youngs–Cramer: N, Σx and
//!   Sxx = Σ(x − mean)² kept as each value arrives, `float8_accum`; partial states combined as
//!   `float8_combine` does), result a double;
//! - over integers and `numeric`: exact, as Postgres' numeric accumulator — N, Σx and Σx²
//!   in 256-bit integers, the variance `(N·Σx² − (Σx)²) / (N·(N−1))` (or `N²` for the
//!   population) rounded half away from zero, the deviation its square root rounded at the
//!   same scale; result a `numeric` at scale 16 (Postgres' `select_div_scale` for values
//!   under 10⁴; over a `numeric(p, s)`, at least 2s). Postgres' scale shrinks as the
//!   value's integer digits grow; Weir keeps one scale per column (see docs/sql.md).
//!
//! Samples of fewer than two values are NULL (`var_samp`), populations of none.
//! Retraction (sliding window frames) takes a value back out of the same sums.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Field, FieldRef, Float64Type, i256};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;

use crate::error::{WeirError, sqlstate};
use crate::sql::numeric::{div_round, pow10};

/// The scale of an exact variance or deviation (Postgres' 16 significant digits for a
/// value under 10⁴).
const EXACT_SCALE: i8 = 16;

#[derive(Debug, PartialEq, Eq, Hash)]
struct Variance {
    name: &'static str,
    /// of the population (else of a sample)
    population: bool,
    /// the square root: the standard deviation
    deviation: bool,
    signature: Signature,
}

/// The six: (name, population, deviation).
pub const AGGREGATES: [(&str, bool, bool); 6] = [
    ("variance", false, false),
    ("var_samp", false, false),
    ("var_pop", true, false),
    ("stddev", false, true),
    ("stddev_samp", false, true),
    ("stddev_pop", true, true),
];

/// Register the six, replacing DataFusion's.
pub fn register(ctx: &SessionContext) {
    for (name, population, deviation) in AGGREGATES {
        ctx.register_udaf(AggregateUDF::new_from_impl(Variance {
            name,
            population,
            deviation,
            signature: Signature::user_defined(Volatility::Immutable),
        }));
    }
}

/// What the argument is read as: a double, or an exact decimal (with its scale).
fn input_type(t: &DataType) -> Option<DataType> {
    match t {
        DataType::Float16 | DataType::Float32 | DataType::Float64 | DataType::Null => {
            Some(DataType::Float64)
        }
        t if t.is_integer() => Some(DataType::Decimal128(38, 0)),
        DataType::Decimal128(p, s) => Some(DataType::Decimal128(*p, *s)),
        _ => None,
    }
}

/// The result's scale over a decimal of scale `s`: 16, or the squares' 2s when more (an
/// unconstrained numeric's values keep no scale of their own: 16).
fn exact_scale(p: u8, s: i8) -> i8 {
    if p >= 38 {
        EXACT_SCALE
    } else {
        EXACT_SCALE.max(s.saturating_mul(2)).min(38)
    }
}

impl AggregateUDFImpl for Variance {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, args: &[DataType]) -> DfResult<Vec<DataType>> {
        match args {
            [t] => input_type(t).map(|t| vec![t]).ok_or_else(|| {
                DataFusionError::External(Box::new(crate::error::no_function_for(self.name, args)))
            }),
            _ => Err(DataFusionError::Plan(format!(
                "{} takes one argument",
                self.name
            ))),
        }
    }
    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        Ok(match args.first() {
            Some(DataType::Decimal128(p, s)) => DataType::Decimal128(38, exact_scale(*p, *s)),
            _ => DataType::Float64,
        })
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let input = args
            .exprs
            .first()
            .map(|e| e.data_type(args.schema))
            .transpose()?
            .unwrap_or(DataType::Float64);
        let sums = match input {
            DataType::Decimal128(p, s) => Sums::Exact {
                n: 0,
                sx: i256::ZERO,
                sxx: i256::ZERO,
                scale: s,
                out_scale: exact_scale(p, s),
            },
            _ => Sums::Float {
                n: 0.0,
                sx: 0.0,
                sxx: 0.0,
            },
        };
        Ok(Box::new(VarianceAcc {
            sums,
            population: self.population,
            deviation: self.deviation,
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        let exact = matches!(args.return_field.data_type(), DataType::Decimal128(..));
        let field =
            |n: &str, t: DataType| Arc::new(Field::new(format!("{}_{n}", args.name), t, true));
        Ok(if exact {
            vec![
                field("n", DataType::Int64),
                field("sx", DataType::Decimal256(76, 0)),
                field("sxx", DataType::Decimal256(76, 0)),
            ]
        } else {
            vec![
                field("n", DataType::Float64),
                field("sx", DataType::Float64),
                field("sxx", DataType::Float64),
            ]
        })
    }
}

#[derive(Debug)]
enum Sums {
    /// Postgres' float8 transition values.
    Float { n: f64, sx: f64, sxx: f64 },
    /// Exact sums of the values (raw decimals at `scale`) and of their squares (at 2·scale).
    Exact {
        n: i64,
        sx: i256,
        sxx: i256,
        scale: i8,
        out_scale: i8,
    },
}

#[derive(Debug)]
struct VarianceAcc {
    sums: Sums,
    population: bool,
    deviation: bool,
}

fn overflow() -> DataFusionError {
    DataFusionError::External(Box::new(WeirError::new(
        sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
        "value overflows numeric format",
    )))
}

/// Postgres' `float8_accum` step: one value into (N, Σx, Sxx).
fn float_add(n: &mut f64, sx: &mut f64, sxx: &mut f64, x: f64) {
    let before = *n;
    *n += 1.0;
    *sx += x;
    if before > 0.0 {
        let t = x * *n - *sx;
        *sxx += t * t / (*n * before);
        if sx.is_infinite() || sxx.is_infinite() {
            *sxx = f64::NAN;
        }
    } else if x.is_nan() || x.is_infinite() {
        *sxx = f64::NAN;
    }
}

/// The inverse of [`float_add`]: the value taken back out.
fn float_remove(n: &mut f64, sx: &mut f64, sxx: &mut f64, x: f64) {
    if *n <= 1.0 {
        (*n, *sx, *sxx) = (0.0, 0.0, 0.0);
        return;
    }
    let t = x * *n - *sx;
    *sxx -= t * t / (*n * (*n - 1.0));
    *n -= 1.0;
    *sx -= x;
    if *sxx < 0.0 {
        *sxx = 0.0;
    }
}

/// `⌊√v⌉` (rounded half up) of a non-negative 256-bit integer.
fn sqrt_round(v: i256) -> i256 {
    if v <= i256::ZERO {
        return i256::ZERO;
    }
    // Newton from above: 2^(⌈bits/2⌉) ≥ √v
    let two = i256::from_i128(2);
    let mut x = two.wrapping_pow(v.ilog2() / 2 + 1);
    loop {
        let y = x.wrapping_add(v.wrapping_div(x)).wrapping_div(two);
        if y >= x {
            break;
        }
        x = y;
    }
    // x = ⌊√v⌋; one more when v is past (x + ½)², i.e. v > x² + x
    if v > x.wrapping_mul(x).wrapping_add(x) {
        x.wrapping_add(i256::ONE)
    } else {
        x
    }
}

impl VarianceAcc {
    fn each_value(&mut self, values: &ArrayRef, remove: bool) -> DfResult<()> {
        match &mut self.sums {
            Sums::Float { n, sx, sxx } => {
                let v = values.as_primitive::<Float64Type>();
                for x in v.iter().flatten() {
                    if remove {
                        float_remove(n, sx, sxx, x);
                    } else {
                        float_add(n, sx, sxx, x);
                    }
                }
            }
            Sums::Exact { n, sx, sxx, .. } => {
                let v = values.as_primitive::<Decimal128Type>();
                for x in v.iter().flatten() {
                    let x = i256::from_i128(x);
                    let sq = x.checked_mul(x).ok_or_else(overflow)?;
                    if remove {
                        *n -= 1;
                        *sx = sx.checked_sub(x).ok_or_else(overflow)?;
                        *sxx = sxx.checked_sub(sq).ok_or_else(overflow)?;
                    } else {
                        *n += 1;
                        *sx = sx.checked_add(x).ok_or_else(overflow)?;
                        *sxx = sxx.checked_add(sq).ok_or_else(overflow)?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Accumulator for VarianceAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.each_value(&values[0], false)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        self.each_value(&values[0], true)
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        match &mut self.sums {
            Sums::Float { n, sx, sxx } => {
                let (n2, sx2, sxx2) = (
                    states[0].as_primitive::<Float64Type>(),
                    states[1].as_primitive::<Float64Type>(),
                    states[2].as_primitive::<Float64Type>(),
                );
                for i in 0..n2.len() {
                    if n2.is_null(i) || n2.value(i) == 0.0 {
                        continue;
                    }
                    let (m, sy, syy) = (n2.value(i), sx2.value(i), sxx2.value(i));
                    if *n == 0.0 {
                        (*n, *sx, *sxx) = (m, sy, syy);
                        continue;
                    }
                    // Postgres' float8_combine
                    let total = *n + m;
                    let t = *sx / *n - sy / m;
                    *sxx += syy + *n * m * t * t / total;
                    *sx += sy;
                    *n = total;
                }
            }
            Sums::Exact { n, sx, sxx, .. } => {
                let n2 = states[0].as_primitive::<datafusion::arrow::datatypes::Int64Type>();
                let sx2 = states[1].as_primitive::<datafusion::arrow::datatypes::Decimal256Type>();
                let sxx2 = states[2].as_primitive::<datafusion::arrow::datatypes::Decimal256Type>();
                for i in 0..n2.len() {
                    if n2.is_null(i) {
                        continue;
                    }
                    *n += n2.value(i);
                    *sx = sx.checked_add(sx2.value(i)).ok_or_else(overflow)?;
                    *sxx = sxx.checked_add(sxx2.value(i)).ok_or_else(overflow)?;
                }
            }
        }
        Ok(())
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(match &self.sums {
            Sums::Float { n, sx, sxx } => vec![
                ScalarValue::Float64(Some(*n)),
                ScalarValue::Float64(Some(*sx)),
                ScalarValue::Float64(Some(*sxx)),
            ],
            Sums::Exact { n, sx, sxx, .. } => vec![
                ScalarValue::Int64(Some(*n)),
                ScalarValue::Decimal256(Some(*sx), 76, 0),
                ScalarValue::Decimal256(Some(*sxx), 76, 0),
            ],
        })
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let too_few = |n: f64| if self.population { n < 1.0 } else { n < 2.0 };
        match &self.sums {
            Sums::Float { n, sxx, .. } => {
                if too_few(*n) {
                    return Ok(ScalarValue::Float64(None));
                }
                let var = sxx / if self.population { *n } else { n - 1.0 };
                Ok(ScalarValue::Float64(Some(if self.deviation {
                    var.sqrt()
                } else {
                    var
                })))
            }
            Sums::Exact {
                n,
                sx,
                sxx,
                scale,
                out_scale,
            } => {
                if too_few(*n as f64) {
                    return Ok(ScalarValue::Decimal128(None, 38, *out_scale));
                }
                let big_n = i256::from_i128(*n as i128);
                // N·Σx² − (Σx)², at scale 2·scale
                let num = big_n
                    .checked_mul(*sxx)
                    .and_then(|a| sx.checked_mul(*sx).and_then(|b| a.checked_sub(b)))
                    .ok_or_else(overflow)?;
                let den = if self.population {
                    big_n.checked_mul(big_n)
                } else {
                    big_n.checked_mul(big_n.wrapping_sub(i256::ONE))
                }
                .ok_or_else(overflow)?;
                let value = if num <= i256::ZERO {
                    // (rounding of the sums cannot make it negative, but exactly 0 is)
                    i256::ZERO
                } else {
                    let shift = *out_scale as i32 - 2 * *scale as i32;
                    let var = if shift >= 0 {
                        div_round(
                            num.checked_mul(pow10(shift as u32)).ok_or_else(overflow)?,
                            den,
                        )
                    } else {
                        div_round(
                            num,
                            den.checked_mul(pow10(shift.unsigned_abs()))
                                .ok_or_else(overflow)?,
                        )
                    };
                    if self.deviation {
                        // √(var / 10^s) at scale s = √(var · 10^s)
                        sqrt_round(
                            var.checked_mul(pow10(*out_scale as u32))
                                .ok_or_else(overflow)?,
                        )
                    } else {
                        var
                    }
                };
                let value = value
                    .to_i128()
                    .filter(|v| v.unsigned_abs() < 10u128.pow(38))
                    .ok_or_else(overflow)?;
                Ok(ScalarValue::Decimal128(Some(value), 38, *out_scale))
            }
        }
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Float64Array;

    fn run(values: ArrayRef, population: bool, deviation: bool) -> ScalarValue {
        let exact = matches!(values.data_type(), DataType::Decimal128(..));
        let mut acc = VarianceAcc {
            sums: if exact {
                Sums::Exact {
                    n: 0,
                    sx: i256::ZERO,
                    sxx: i256::ZERO,
                    scale: 0,
                    out_scale: EXACT_SCALE,
                }
            } else {
                Sums::Float {
                    n: 0.0,
                    sx: 0.0,
                    sxx: 0.0,
                }
            },
            population,
            deviation,
        };
        acc.update_batch(&[values]).expect("update");
        acc.evaluate().expect("evaluate")
    }

    /// Postgres 15's answers: `SELECT var_samp(x), stddev(x), var_pop(x) FROM (VALUES
    /// (1), (2), (4), (10)) v(x)` over integers and over doubles.
    #[test]
    fn answers_as_postgres() {
        let ints: ArrayRef = Arc::new(
            datafusion::arrow::array::Decimal128Array::from(vec![1, 2, 4, 10])
                .with_precision_and_scale(38, 0)
                .expect("decimal"),
        );
        let shown = |v: ScalarValue| v.to_string();
        assert_eq!(
            shown(run(ints.clone(), false, false)),
            "16.2500000000000000"
        );
        assert_eq!(shown(run(ints.clone(), false, true)), "4.0311288741492748");
        assert_eq!(shown(run(ints.clone(), true, false)), "12.1875000000000000");
        assert_eq!(shown(run(ints, true, true)), "3.4910600109422353");
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![1.0, 2.0, 4.0, 10.0]));
        assert_eq!(
            run(floats.clone(), false, false),
            ScalarValue::Float64(Some(16.25))
        );
        assert_eq!(
            run(floats, true, false),
            ScalarValue::Float64(Some(12.1875))
        );
        let one: ArrayRef = Arc::new(Float64Array::from(vec![3.0]));
        assert_eq!(run(one, false, false), ScalarValue::Float64(None));
    }

    #[test]
    fn square_roots_round_half_up() {
        for v in [
            0i128,
            1,
            2,
            3,
            4,
            8,
            9,
            15,
            16,
            17,
            1_000_000,
            999_999_999_999,
        ] {
            let r = sqrt_round(i256::from_i128(v)).to_i128().expect("small");
            let want = (v as f64).sqrt().round() as i128;
            assert_eq!(r, want, "√{v}");
        }
    }
}
