//! Postgres' math functions where DataFusion's namesakes answer otherwise, registered over
//! them by [`crate::sql::pg_functions`]:
//!
//! - `ln`, `log` (base 10, or `log(b, x)`), `log10`, `sqrt`, `exp` and `power`/`pow`
//!   compute in `double precision` as DataFusion's do, but where IEEE gives `-Infinity`,
//!   `NaN` or an overflowed infinity Postgres raises: `cannot take logarithm of zero`
//!   (2201E), `cannot take square root of a negative number` (2201F), `zero raised to a
//!   negative power is undefined` (2201F), `value out of range: overflow` (22003);
//! - `degrees` and `radians` by Postgres' constant (`x / RADIANS_PER_DEGREE`: DataFusion's
//!   `x * (180 / pi)` differs in the last bit, `degrees(1e300)`);
//! - `sin`, `cos`, `tan`, `cot` of an infinity, `asin`/`acos`/`atanh` outside [-1, 1] and
//!   `acosh` below 1: `input is out of range` (22003) where IEEE gives NaN;
//! - `mod(a, b)`: the remainder with the dividend's sign, of the wider integer type (or
//!   `numeric`, exactly), `division by zero` (22012) for a zero divisor;
//! - `gcd(a, b)`, `lcm(a, b)`: of `integer`s an `integer`, of `bigint`s a `bigint`, of
//!   numerics exactly, past the type's range 22003;
//! - `width_bucket(operand, low, high, count)`: the bucket of `count` equal-width buckets
//!   (0 below, `count + 1` above), exact over `numeric` operands, as Postgres'
//!   `width_bucket_float8` / `width_bucket_numeric`.
//! - `scale`, `min_scale` and `trim_scale` of a `numeric` (integers are numerics of scale
//!   0): the digits shown (an unconstrained `numeric`'s own, a `numeric(p, s)`'s `s`), the
//!   digits needed, and the value without its trailing zeros.
//!
//! A row with a NULL argument is NULL (every function here is strict). One pass per batch
//! over the argument arrays.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array, Int32Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Float64Type, Int64Type, i256};
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::TypeSignature;

use crate::error::sqlstate;
use crate::sql::pg_functions::{PgFunction, immutable, pg_error};

const INVALID_ARGUMENT_FOR_LOG: &str = "2201E";
const INVALID_ARGUMENT_FOR_POWER: &str = "2201F";
const INVALID_ARGUMENT_FOR_WIDTH_BUCKET: &str = "2201G";

type Checked1 = fn(f64) -> DfResult<f64>;

/// Postgres' `RADIANS_PER_DEGREE` (float.h), what `degrees` and `radians` use.
#[allow(clippy::excessive_precision)]
const RADIANS_PER_DEGREE: f64 = 0.0174532925199432957692;

/// `x` when it is NaN or `inside` the function's domain, else Postgres' 22003.
fn trig_domain(x: f64, inside: bool) -> DfResult<f64> {
    if x.is_nan() || inside {
        Ok(x)
    } else {
        Err(pg_error(
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            "input is out of range",
        ))
    }
}

/// Every function of this module.
pub(crate) fn definitions() -> Vec<PgFunction> {
    let unary: [(&'static str, Checked1); 14] = [
        ("ln", |x| log_domain(x).map(|x| x.ln())),
        ("log10", |x| log_domain(x).map(|x| x.log10())),
        ("sqrt", |x| {
            if x < 0.0 {
                Err(pg_error(
                    INVALID_ARGUMENT_FOR_POWER,
                    "cannot take square root of a negative number",
                ))
            } else {
                Ok(x.sqrt())
            }
        }),
        ("exp", |x| in_range(x.exp(), &[x], x != f64::NEG_INFINITY)),
        // (NaN in, NaN out; an argument outside the domain is 22003, as Postgres' `dsin`..)
        ("sin", |x| trig_domain(x, !x.is_infinite()).map(f64::sin)),
        ("cos", |x| trig_domain(x, !x.is_infinite()).map(f64::cos)),
        ("tan", |x| trig_domain(x, !x.is_infinite()).map(f64::tan)),
        ("cot", |x| {
            trig_domain(x, !x.is_infinite()).map(|x| 1.0 / x.tan())
        }),
        ("asin", |x| {
            trig_domain(x, (-1.0..=1.0).contains(&x)).map(f64::asin)
        }),
        ("acos", |x| {
            trig_domain(x, (-1.0..=1.0).contains(&x)).map(f64::acos)
        }),
        ("acosh", |x| trig_domain(x, x >= 1.0).map(f64::acosh)),
        // Postgres divides by (multiplies by) the radians in a degree; x * (180 / pi) can
        // differ in the last bit (`degrees(1e300)`)
        ("degrees", |x| {
            in_range(x / RADIANS_PER_DEGREE, &[x], x != 0.0)
        }),
        ("radians", |x| {
            in_range(x * RADIANS_PER_DEGREE, &[x], x != 0.0)
        }),
        ("atanh", |x| {
            trig_domain(x, (-1.0..=1.0).contains(&x)).map(f64::atanh)
        }),
    ];
    let degree_trig: [(&'static str, Checked1); 7] = [
        ("sind", degrees::sind),
        ("cosd", degrees::cosd),
        ("tand", |x| degrees::tangent(x, false)),
        ("cotd", |x| degrees::tangent(x, true)),
        ("asind", degrees::asind),
        ("acosd", degrees::acosd),
        ("atand", |x| Ok(degrees::atand(x))),
    ];
    let mut out: Vec<PgFunction> = unary
        .into_iter()
        .chain(degree_trig)
        .map(|(name, f)| {
            immutable(
                name,
                TypeSignature::Any(1),
                |_| DataType::Float64,
                move |args, _| float_map(name, args, |v| f(v[0])),
            )
        })
        .collect();
    out.push(immutable(
        "log",
        TypeSignature::OneOf(vec![TypeSignature::Any(1), TypeSignature::Any(2)]),
        |_| DataType::Float64,
        |args, _| {
            float_map("log", args, |v| match v {
                [x] => log_domain(*x).map(|x| x.log10()),
                [b, x] => {
                    let (b, x) = (log_domain(*b)?, log_domain(*x)?);
                    // (in the base's own logarithm where there is one: log(10, 1000) is 3)
                    Ok(match b {
                        1.0 => {
                            return Err(pg_error(sqlstate::DIVISION_BY_ZERO, "division by zero"));
                        }
                        10.0 => x.log10(),
                        2.0 => x.log2(),
                        _ => x.ln() / b.ln(),
                    })
                }
                _ => unreachable!("log has one or two arguments by its signature"),
            })
        },
    ));
    out.push(immutable(
        "atan2d",
        TypeSignature::Any(2),
        |_| DataType::Float64,
        |args, _| float_map("atan2d", args, |v| Ok(degrees::atan2d(v[0], v[1]))),
    ));
    for name in ["power", "pow"] {
        out.push(immutable(
            name,
            TypeSignature::Any(2),
            |_| DataType::Float64,
            move |args, _| float_map(name, args, |v| power(v[0], v[1])),
        ));
    }
    out.push(immutable(
        "mod",
        TypeSignature::Any(2),
        |t| match t {
            [l, r] => mod_type(l, r).unwrap_or(DataType::Int32),
            _ => DataType::Int32,
        },
        |args, _| modulo(&args[0], &args[1]),
    ));
    for (name, lcm) in [("gcd", false), ("lcm", true)] {
        out.push(immutable(
            name,
            TypeSignature::Any(2),
            |t| match t {
                [l, r] => gcd_type(l, r).unwrap_or(DataType::Int32),
                _ => DataType::Int32,
            },
            move |args, _| gcd_lcm(name, &args[0], &args[1], lcm),
        ));
    }
    out.push(immutable(
        "div",
        TypeSignature::Any(2),
        |_| DataType::Decimal128(38, 0),
        |args, _| div(&args[0], &args[1]),
    ));
    out.push(immutable(
        "width_bucket",
        TypeSignature::OneOf(vec![TypeSignature::Any(2), TypeSignature::Any(4)]),
        |_| DataType::Int32,
        |args, _| match args {
            [x, thresholds] => width_bucket_thresholds(x, thresholds),
            _ => width_bucket(args),
        },
    ));
    for (name, trimmed) in [("scale", false), ("min_scale", true)] {
        out.push(immutable(
            name,
            TypeSignature::Any(1),
            |_| DataType::Int32,
            move |args, _| scale(name, &args[0], trimmed),
        ));
    }
    out.push(immutable(
        "trim_scale",
        TypeSignature::Any(1),
        |t| trim_scale_type(t.first().unwrap_or(&DataType::Null)),
        |args, _| {
            let to = trim_scale_type(args[0].data_type());
            if args[0].data_type() == &DataType::Null {
                return Ok(datafusion::arrow::array::new_null_array(&to, args[0].len()));
            }
            if exact_scale(args[0].data_type()).is_none() {
                return Err(no_such_function("trim_scale", &[&args[0]]));
            }
            Ok(cast(&args[0], &to)?)
        },
    ));
    out.push(immutable(
        FLOAT_IN,
        TypeSignature::Any(2),
        |t| t.get(1).cloned().unwrap_or(DataType::Float64),
        |args, _| float_in(&args[0], args[1].data_type()),
    ));
    out.push(immutable(
        FLOAT4_OF_FLOAT8,
        TypeSignature::Any(1),
        |_| DataType::Float32,
        |args, _| float4_of_float8(&args[0]),
    ));
    out
}

/// The trigonometric functions in degrees, computed as Postgres' `dsind`.. are: the
/// argument reduced to the first quadrant, and the results scaled so that the exact
/// angles give exact values (`sind(30)` is 0.5, `tand(45)` 1, `acosd(0.5)` 60).
mod degrees {
    use super::{DfResult, RADIANS_PER_DEGREE, trig_domain};

    fn sin_30() -> f64 {
        (30.0 * RADIANS_PER_DEGREE).sin()
    }
    fn one_minus_cos_60() -> f64 {
        1.0 - (60.0 * RADIANS_PER_DEGREE).cos()
    }
    fn sind_0_to_30(x: f64) -> f64 {
        ((x * RADIANS_PER_DEGREE).sin() / sin_30()) / 2.0
    }
    fn cosd_0_to_60(x: f64) -> f64 {
        1.0 - ((1.0 - (x * RADIANS_PER_DEGREE).cos()) / one_minus_cos_60()) / 2.0
    }
    fn sind_q1(x: f64) -> f64 {
        if x <= 30.0 {
            sind_0_to_30(x)
        } else {
            cosd_0_to_60(90.0 - x)
        }
    }
    fn cosd_q1(x: f64) -> f64 {
        if x <= 60.0 {
            cosd_0_to_60(x)
        } else {
            sind_0_to_30(90.0 - x)
        }
    }
    fn asind_q1(x: f64) -> f64 {
        if x <= 0.5 {
            (x.asin() / 0.5f64.asin()) * 30.0
        } else {
            90.0 - (x.acos() / 0.5f64.acos()) * 60.0
        }
    }
    fn acosd_q1(x: f64) -> f64 {
        if x <= 0.5 {
            90.0 - (x.asin() / 0.5f64.asin()) * 30.0
        } else {
            (x.acos() / 0.5f64.acos()) * 60.0
        }
    }

    /// NaN passes; an infinity is 22003; else the angle in (-360, 360).
    fn reduced(x: f64) -> DfResult<f64> {
        trig_domain(x, !x.is_infinite()).map(|x| x % 360.0)
    }

    /// A reduced angle folded into [0, 180], and whether sine's sign flipped on the way
    /// (it was negative, or past 180, not both).
    fn half_turn(x: f64) -> (f64, bool) {
        let (mut x, mut flipped) = (x, false);
        if x < 0.0 {
            x = -x;
            flipped = !flipped;
        }
        if x > 180.0 {
            x = 360.0 - x;
            flipped = !flipped;
        }
        (x, flipped)
    }

    fn signed(flipped: bool, v: f64) -> f64 {
        if flipped { -v } else { v }
    }

    pub(super) fn sind(x: f64) -> DfResult<f64> {
        let x = reduced(x)?;
        if x.is_nan() {
            return Ok(x);
        }
        let (x, flipped) = half_turn(x);
        Ok(signed(
            flipped,
            sind_q1(if x > 90.0 { 180.0 - x } else { x }),
        ))
    }

    pub(super) fn cosd(x: f64) -> DfResult<f64> {
        let x = reduced(x)?;
        if x.is_nan() {
            return Ok(x);
        }
        let (x, _) = half_turn(x);
        Ok(match x > 90.0 {
            true => -cosd_q1(180.0 - x),
            false => cosd_q1(x),
        })
    }

    /// `tand` (`cot`: `cotd`): the ratio in the first quadrant, scaled so 45 gives 1.
    pub(super) fn tangent(x: f64, cot: bool) -> DfResult<f64> {
        let x = reduced(x)?;
        if x.is_nan() {
            return Ok(x);
        }
        let (mut x, mut flipped) = half_turn(x);
        if x > 90.0 {
            x = 180.0 - x;
            flipped = !flipped;
        }
        let ratio = |x: f64| match cot {
            true => cosd_q1(x) / sind_q1(x),
            false => sind_q1(x) / cosd_q1(x),
        };
        // (no minus zero, as Postgres)
        Ok(signed(flipped, ratio(x) / ratio(45.0)) + 0.0)
    }

    pub(super) fn asind(x: f64) -> DfResult<f64> {
        let x = trig_domain(x, (-1.0..=1.0).contains(&x))?;
        Ok(if x.is_nan() {
            x
        } else if x >= 0.0 {
            asind_q1(x)
        } else {
            -asind_q1(-x)
        })
    }

    pub(super) fn acosd(x: f64) -> DfResult<f64> {
        let x = trig_domain(x, (-1.0..=1.0).contains(&x))?;
        Ok(if x.is_nan() {
            x
        } else if x >= 0.0 {
            acosd_q1(x)
        } else {
            90.0 + asind_q1(-x)
        })
    }

    pub(super) fn atand(x: f64) -> f64 {
        (x.atan() / 1.0f64.atan()) * 45.0
    }

    pub(super) fn atan2d(y: f64, x: f64) -> f64 {
        (y.atan2(x) / 1.0f64.atan()) * 45.0
    }
}

/// `weir_float_in(text, NULL::target)`: text as `double precision` or `real` input, as
/// Postgres reads it: a number past the type's range (`'1e400'::float8`, `'1e39'::real`)
/// or one that underflows to zero (`'1e-400'`) is 22003 `"1e400" is out of range for type
/// double precision` (arrow reads infinity or 0); `-NaN` is the one NaN.
pub const FLOAT_IN: &str = "weir_float_in";

fn float_in(text: &ArrayRef, target: &DataType) -> DfResult<ArrayRef> {
    let strict = datafusion::arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let parsed = datafusion::arrow::compute::cast_with_options(text, target, &strict)?;
    let texts = cast(text, &DataType::Utf8)?;
    if let Some((_, e)) = float_out_of_range(texts.as_string::<i32>(), &parsed)? {
        return Err(DataFusionError::External(Box::new(e)));
    }
    Ok(crate::sql::pg_functions::canonical_nan_array(&parsed))
}

/// The first row of `parsed` (floats read from `texts`) that is infinite or zero where its
/// text says neither: Postgres' 22003 `"1e400" is out of range for type double precision`
/// (every path that reads float text checks it: casts, INSERT literals, COPY).
pub(crate) fn float_out_of_range(
    texts: &datafusion::arrow::array::StringArray,
    parsed: &ArrayRef,
) -> DfResult<Option<(usize, crate::error::WeirError)>> {
    let name = match parsed.data_type() {
        DataType::Float32 => "real",
        _ => "double precision",
    };
    let as_double = cast(parsed, &DataType::Float64)?;
    let values = as_double.as_primitive::<Float64Type>();
    for i in 0..values.len() {
        if values.is_null(i) || texts.is_null(i) {
            continue;
        }
        let v = values.value(i);
        if v.is_finite() && v != 0.0 {
            continue;
        }
        let written = texts.value(i);
        let mantissa = written
            .trim()
            .trim_start_matches(['+', '-'])
            .split(['e', 'E'])
            .next()
            .unwrap_or_default();
        let spelled_infinite =
            mantissa.eq_ignore_ascii_case("inf") || mantissa.eq_ignore_ascii_case("infinity");
        let nonzero = mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b));
        if (v.is_infinite() && !spelled_infinite) || (v == 0.0 && nonzero) {
            return Ok(Some((
                i,
                crate::error::WeirError::new(
                    sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                    format!("\"{written}\" is out of range for type {name}"),
                ),
            )));
        }
    }
    Ok(None)
}

/// `double precision` to `real`, as Postgres' `dtof`: a finite value past real's range is
/// `value out of range: overflow`, a non-zero one that becomes 0 `... underflow` (22003);
/// arrow's cast gives infinity and 0.
pub const FLOAT4_OF_FLOAT8: &str = "weir_float4_of_float8";

fn float4_of_float8(a: &ArrayRef) -> DfResult<ArrayRef> {
    let a = cast(a, &DataType::Float64)?;
    let a = a.as_primitive::<Float64Type>();
    let out: datafusion::arrow::array::Float32Array = a
        .try_unary(|x| {
            let r = x as f32;
            if r.is_infinite() && x.is_finite() {
                Err(datafusion::arrow::error::ArrowError::ComputeError(
                    "overflow".into(),
                ))
            } else if r == 0.0 && x != 0.0 {
                Err(datafusion::arrow::error::ArrowError::ComputeError(
                    "underflow".into(),
                ))
            } else {
                Ok(r)
            }
        })
        .map_err(|e| {
            let what = if e.to_string().contains("underflow") {
                "underflow"
            } else {
                "overflow"
            };
            pg_error(
                sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                format!("value out of range: {what}"),
            )
        })?;
    Ok(Arc::new(out))
}

/// `scale(numeric)`: the decimal digits shown, which for an unconstrained `numeric` (shown
/// without trailing zeros) are the value's own and for a `numeric(p, s)` are `s`;
/// `min_scale(numeric)`: the digits needed, without trailing zeros.
fn scale(name: &str, a: &ArrayRef, trimmed: bool) -> DfResult<ArrayRef> {
    let (declared, unconstrained) = match a.data_type() {
        DataType::Null => return Ok(Arc::new(Int32Array::new_null(a.len()))),
        DataType::Decimal128(p, s) => (
            *s,
            (*p, *s)
                == (
                    crate::sql::types::NUMERIC_DEFAULT_PRECISION,
                    crate::sql::types::NUMERIC_DEFAULT_SCALE,
                ),
        ),
        t if integer_rank(t).is_some() => (0, false),
        _ => return Err(no_such_function(name, &[a])),
    };
    let d = cast(a, &DataType::Decimal128(38, declared))?;
    let d = d.as_primitive::<Decimal128Type>();
    let out: Int32Array = d
        .iter()
        .map(|v| {
            v.map(|mut v| {
                if !(trimmed || unconstrained) {
                    return declared as i32;
                }
                let mut digits = declared.max(0) as i32;
                while digits > 0 && v % 10 == 0 {
                    v /= 10;
                    digits -= 1;
                }
                digits
            })
        })
        .collect();
    Ok(Arc::new(out))
}

/// `trim_scale(numeric)`'s type: an unconstrained `numeric` (shown without trailing zeros)
/// where the value fits one, else the argument's own.
fn trim_scale_type(t: &DataType) -> DataType {
    let unconstrained = DataType::Decimal128(
        crate::sql::types::NUMERIC_DEFAULT_PRECISION,
        crate::sql::types::NUMERIC_DEFAULT_SCALE,
    );
    match t {
        DataType::Decimal128(p, s)
            if *s <= crate::sql::types::NUMERIC_DEFAULT_SCALE
                && (*p as i32 - *s as i32)
                    <= (crate::sql::types::NUMERIC_DEFAULT_PRECISION as i32
                        - crate::sql::types::NUMERIC_DEFAULT_SCALE as i32) =>
        {
            unconstrained
        }
        DataType::Decimal128(..) => t.clone(),
        _ => unconstrained,
    }
}

fn log_domain(x: f64) -> DfResult<f64> {
    if x == 0.0 {
        Err(pg_error(
            INVALID_ARGUMENT_FOR_LOG,
            "cannot take logarithm of zero",
        ))
    } else if x < 0.0 {
        Err(pg_error(
            INVALID_ARGUMENT_FOR_LOG,
            "cannot take logarithm of a negative number",
        ))
    } else {
        Ok(x)
    }
}

/// A finite result of finite arguments that came out infinite overflowed, one that came
/// out zero (when `zero_is_underflow`) underflowed: both 22003 in Postgres.
fn in_range(result: f64, args: &[f64], zero_is_underflow: bool) -> DfResult<f64> {
    let finite_args = args.iter().all(|a| a.is_finite());
    if result.is_infinite() && finite_args {
        Err(pg_error(
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            "value out of range: overflow",
        ))
    } else if result == 0.0 && zero_is_underflow && finite_args {
        Err(pg_error(
            sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
            "value out of range: underflow",
        ))
    } else {
        Ok(result)
    }
}

/// Postgres' `dpow`: C's `pow` (which Rust's `powf` is) with its errors.
fn power(x: f64, y: f64) -> DfResult<f64> {
    if x.is_nan() || y.is_nan() {
        return Ok(x.powf(y));
    }
    if x == 0.0 && y < 0.0 {
        return Err(pg_error(
            INVALID_ARGUMENT_FOR_POWER,
            "zero raised to a negative power is undefined",
        ));
    }
    if x < 0.0 && y.is_finite() && y.floor() != y {
        return Err(pg_error(
            INVALID_ARGUMENT_FOR_POWER,
            "a negative number raised to a non-integer power yields a complex result",
        ));
    }
    in_range(x.powf(y), &[x, y], x != 0.0)
}

/// Each row's arguments as doubles into `f`; NULL where one is NULL. Arguments must be
/// numbers (or text, read as a number, as Postgres reads an untyped literal).
fn float_map(
    name: &str,
    args: &[ArrayRef],
    f: impl Fn(&[f64]) -> DfResult<f64>,
) -> DfResult<ArrayRef> {
    let cols = args
        .iter()
        .map(|a| {
            let t = a.data_type();
            if !(t.is_numeric() || matches!(t, DataType::Null | DataType::Utf8)) {
                return Err(no_such_function(name, &[a]));
            }
            Ok(cast(a, &DataType::Float64)?)
        })
        .collect::<DfResult<Vec<_>>>()?;
    let cols: Vec<&Float64Array> = cols
        .iter()
        .map(|c| c.as_primitive::<Float64Type>())
        .collect();
    let rows = cols.first().map_or(0, |c| c.len());
    let mut out = Vec::with_capacity(rows);
    let mut row = vec![0.0; cols.len()];
    for i in 0..rows {
        if cols.iter().any(|c| c.is_null(i)) {
            out.push(None);
            continue;
        }
        for (slot, c) in row.iter_mut().zip(&cols) {
            *slot = c.value(i);
        }
        out.push(Some(f(&row)?));
    }
    Ok(Arc::new(Float64Array::from(out)))
}

/// 42883, naming the function with its arguments' types as Postgres does.
fn no_such_function(name: &str, args: &[&ArrayRef]) -> DataFusionError {
    let types: Vec<String> = args
        .iter()
        .map(|a| {
            let t = a.data_type();
            crate::sql::types::SqlType::from_arrow(t)
                .map(|t| t.display_name())
                .unwrap_or_else(|| t.to_string())
        })
        .collect();
    pg_error(
        sqlstate::UNDEFINED_FUNCTION,
        format!("function {name}({}) does not exist", types.join(", ")),
    )
}

/// The scale an exact number (an integer, or a `numeric`) is computed at: none for a float.
fn exact_scale(t: &DataType) -> Option<i8> {
    match t {
        DataType::Decimal128(_, s) => Some((*s).max(0)),
        t if integer_rank(t).is_some() => Some(0),
        _ => None,
    }
}

fn integer_rank(t: &DataType) -> Option<u8> {
    match t {
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => Some(1),
        DataType::Int32 | DataType::UInt16 => Some(2),
        DataType::Int64 | DataType::UInt32 | DataType::Null => Some(3),
        _ => None,
    }
}

/// `mod`'s result type: the wider integer type of two integers, else `numeric` at the
/// larger scale (Postgres' `numeric_mod`), else none (`mod` of a float does not exist).
fn mod_type(l: &DataType, r: &DataType) -> Option<DataType> {
    match (integer_rank(l), integer_rank(r)) {
        (Some(a), Some(b)) => Some(match a.max(b) {
            1 => DataType::Int16,
            2 => DataType::Int32,
            _ => DataType::Int64,
        }),
        _ => Some(DataType::Decimal128(
            38,
            exact_scale(l)?.max(exact_scale(r)?),
        )),
    }
}

fn modulo(l: &ArrayRef, r: &ArrayRef) -> DfResult<ArrayRef> {
    let t =
        mod_type(l.data_type(), r.data_type()).ok_or_else(|| no_such_function("mod", &[l, r]))?;
    let zero = || pg_error(sqlstate::DIVISION_BY_ZERO, "division by zero");
    // computed in 64 (integers) or 128 bits (decimals at one scale), then cast back
    let wide = match &t {
        DataType::Decimal128(..) => t.clone(),
        _ => DataType::Int64,
    };
    let (a, b) = (cast(l, &wide)?, cast(r, &wide)?);
    let out: ArrayRef = match &wide {
        DataType::Decimal128(p, s) => {
            let (a, b) = (
                a.as_primitive::<Decimal128Type>(),
                b.as_primitive::<Decimal128Type>(),
            );
            let v =
                datafusion::arrow::compute::kernels::arity::try_binary::<_, _, _, Decimal128Type>(
                    a,
                    b,
                    |x, y| {
                        if y == 0 {
                            return Err(datafusion::arrow::error::ArrowError::DivideByZero);
                        }
                        Ok(x % y)
                    },
                )
                .map_err(|_| zero())?;
            Arc::new(v.with_precision_and_scale(*p, *s)?)
        }
        _ => {
            let (a, b) = (a.as_primitive::<Int64Type>(), b.as_primitive::<Int64Type>());
            let v = datafusion::arrow::compute::kernels::arity::try_binary::<_, _, _, Int64Type>(
                a,
                b,
                |x, y| {
                    if y == 0 {
                        return Err(datafusion::arrow::error::ArrowError::DivideByZero);
                    }
                    // (i64::MIN % -1 is 0, as in Postgres, not an overflow)
                    Ok(x.checked_rem(y).unwrap_or(0))
                },
            )
            .map_err(|_| zero())?;
            Arc::new(v)
        }
    };
    Ok(cast(&out, &t)?)
}

/// `gcd`'s and `lcm`'s type: `integer` for two integers of at most 32 bits (Postgres has no
/// smallint ones), `bigint` with a bigint, else `numeric` at the larger scale.
fn gcd_type(l: &DataType, r: &DataType) -> Option<DataType> {
    Some(match mod_type(l, r)? {
        DataType::Int16 => DataType::Int32,
        t => t,
    })
}

/// `gcd(a, b)` / `lcm(a, b)` as Postgres': non-negative, `gcd(0, 0)` and `lcm(0, x)` 0,
/// exact over numerics (computed on the values at one scale), and a result past the type's
/// range `integer out of range` / `bigint out of range` (22003) where DataFusion's widened
/// to bigint or overflowed (`lcm(2147483647, 4)`, `gcd(-2147483648, 0)`).
fn gcd_lcm(name: &str, l: &ArrayRef, r: &ArrayRef, lcm: bool) -> DfResult<ArrayRef> {
    let t =
        gcd_type(l.data_type(), r.data_type()).ok_or_else(|| no_such_function(name, &[l, r]))?;
    let scale = match &t {
        DataType::Decimal128(_, s) => *s,
        _ => 0,
    };
    let wide = DataType::Decimal128(38, scale);
    let (a, b) = (cast(l, &wide)?, cast(r, &wide)?);
    let (a, b) = (
        a.as_primitive::<Decimal128Type>(),
        b.as_primitive::<Decimal128Type>(),
    );
    let (max, message) = match &t {
        DataType::Int32 => (i32::MAX as u128, "integer out of range"),
        DataType::Int64 => (i64::MAX as u128, "bigint out of range"),
        _ => (10u128.pow(38) - 1, "value overflows numeric format"),
    };
    let euclid = |mut x: u128, mut y: u128| {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    let v = datafusion::arrow::compute::kernels::arity::try_binary::<_, _, _, Decimal128Type>(
        a,
        b,
        |x, y| {
            let (x, y) = (x.unsigned_abs(), y.unsigned_abs());
            let g = euclid(x, y);
            let v = match lcm {
                false => Some(g),
                true if x == 0 || y == 0 => Some(0),
                true => (x / g).checked_mul(y),
            };
            v.filter(|v| *v <= max)
                .map(|v| v as i128)
                .ok_or_else(|| datafusion::arrow::error::ArrowError::ComputeError(message.into()))
        },
    )
    .map_err(|_| pg_error(sqlstate::NUMERIC_VALUE_OUT_OF_RANGE, message))?;
    Ok(cast(
        &(Arc::new(v.with_precision_and_scale(38, scale)?) as ArrayRef),
        &t,
    )?)
}

/// `div(a, b)`: the integer quotient of two numerics, truncated toward zero (a `numeric`
/// of scale 0), as Postgres' `numeric_div_trunc`; 22012 for a zero divisor.
fn div(l: &ArrayRef, r: &ArrayRef) -> DfResult<ArrayRef> {
    let (Some(a), Some(b)) = (exact_scale(l.data_type()), exact_scale(r.data_type())) else {
        return Err(no_such_function("div", &[l, r]));
    };
    let t = DataType::Decimal128(38, a.max(b));
    let (x, y) = (cast(l, &t)?, cast(r, &t)?);
    let (x, y) = (
        x.as_primitive::<Decimal128Type>(),
        y.as_primitive::<Decimal128Type>(),
    );
    let q = datafusion::arrow::compute::kernels::arity::try_binary::<_, _, _, Decimal128Type>(
        x,
        y,
        |x, y| {
            if y == 0 {
                return Err(datafusion::arrow::error::ArrowError::DivideByZero);
            }
            // (the same scale on both sides: the raw quotient is the integer quotient)
            Ok(x.checked_div(y).unwrap_or(0))
        },
    )
    .map_err(|_| pg_error(sqlstate::DIVISION_BY_ZERO, "division by zero"))?;
    Ok(Arc::new(q.with_precision_and_scale(38, 0)?))
}

/// The bucket of `x` between `lo` and `hi` (either order): 0 before `lo`, `n + 1` at or
/// past `hi`, else `inside`'s bucket (1 to `n`).
fn bucket<T: PartialOrd + Copy>(
    x: T,
    lo: T,
    hi: T,
    n: i32,
    inside: impl Fn(T, T, T) -> i32,
) -> DfResult<i32> {
    let above = || {
        n.checked_add(1)
            .ok_or_else(|| pg_error(sqlstate::NUMERIC_VALUE_OUT_OF_RANGE, "integer out of range"))
    };
    let ascending = lo < hi;
    if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less)
        && lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Greater)
    {
        return Err(pg_error(
            INVALID_ARGUMENT_FOR_WIDTH_BUCKET,
            "lower bound cannot equal upper bound",
        ));
    }
    let (before, past) = if ascending {
        (x < lo, x >= hi)
    } else {
        (x > lo, x <= hi)
    };
    if before {
        Ok(0)
    } else if past {
        above()
    } else {
        Ok(inside(x, lo, hi))
    }
}

/// `width_bucket(operand, low, high, count)`: exact (in 256 bits at one scale) when no
/// argument is a float, else in doubles; Postgres' errors (2201G).
fn width_bucket(args: &[ArrayRef]) -> DfResult<ArrayRef> {
    let bad = |msg: &str| pg_error(INVALID_ARGUMENT_FOR_WIDTH_BUCKET, msg.to_owned());
    let scale = args[..3]
        .iter()
        .map(|a| exact_scale(a.data_type()))
        .try_fold(0i8, |acc, s| s.map(|s| acc.max(s)));
    match scale {
        Some(scale) => {
            each_bucket::<Decimal128Type>(args, &DataType::Decimal128(38, scale), |x, lo, hi, n| {
                // floor(n * (the operand - from) / (the far bound - from)) + 1: both
                // differences of one sign, at most 2^128 each, the product within 2^160
                let inside = |x: i128, from: i128, to: i128| {
                    let wide = i256::from_i128;
                    let num = wide(n as i128).wrapping_mul(wide(x).wrapping_sub(wide(from)));
                    let den = wide(to).wrapping_sub(wide(from));
                    let q = num.wrapping_div(den).as_i128().min(n as i128 - 1);
                    q as i32 + 1
                };
                bucket(x, lo, hi, n, inside)
            })
        }
        None => each_bucket::<Float64Type>(args, &DataType::Float64, |x, lo, hi, n| {
            if x.is_nan() || lo.is_nan() || hi.is_nan() {
                return Err(bad("operand, lower bound, and upper bound cannot be NaN"));
            }
            if lo.is_infinite() || hi.is_infinite() {
                return Err(bad("lower and upper bounds must be finite"));
            }
            // the fraction of the way from `from` to `to`, halved first where the
            // difference would overflow (as Postgres)
            let fraction = |x: f64, from: f64, to: f64| {
                if (to - from).is_finite() {
                    (x - from) / (to - from)
                } else {
                    (x / 2.0 - from / 2.0) / (to / 2.0 - from / 2.0)
                }
            };
            bucket(x, lo, hi, n, |x, lo, hi| {
                let b = (n as f64 * fraction(x, lo, hi)).floor();
                // (the product can round up to n, which would be the next bucket)
                (b as i64).min(n as i64 - 1) as i32 + 1
            })
        }),
    }
}

/// `width_bucket(operand, thresholds)`: the bucket of the operand among buckets whose lower
/// bounds the (sorted) array lists, found by Postgres' binary search
/// (`width_bucket_array`): 0 below the first bound; the operand and the bounds compared
/// exactly when both are integers or numerics, else as floats, or as the bounds' type
/// (dates, timestamps, text).
fn width_bucket_thresholds(x: &ArrayRef, thresholds: &ArrayRef) -> DfResult<ArrayRef> {
    use datafusion::arrow::array::make_comparator;
    use datafusion::arrow::compute::SortOptions;
    let list = match thresholds.data_type() {
        DataType::Null => {
            return Ok(datafusion::arrow::array::new_null_array(
                &DataType::Int32,
                x.len(),
            ));
        }
        DataType::List(_) => thresholds.as_list::<i32>().clone(),
        DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            cast(thresholds, &DataType::List(f.clone()))?
                .as_list::<i32>()
                .clone()
        }
        _ => return Err(no_such_function("width_bucket", &[x, thresholds])),
    };
    let elem = list.value_type();
    if matches!(elem, DataType::List(_) | DataType::LargeList(_)) {
        return Err(pg_error(
            "2202E",
            "thresholds must be one-dimensional array".to_owned(),
        ));
    }
    let numeric = |t: &DataType| t.is_numeric() || matches!(t, DataType::Null);
    let common = match (exact_scale(x.data_type()), exact_scale(&elem)) {
        (Some(a), Some(b)) => DataType::Decimal128(38, a.max(b)),
        _ if numeric(x.data_type()) && numeric(&elem) => DataType::Float64,
        _ => elem.clone(),
    };
    let xs = cast(x, &common)?;
    let values = cast(list.values(), &common)?;
    // (arrow's order: floats by total order, NaN above every number, as Postgres sorts)
    let cmp = make_comparator(xs.as_ref(), values.as_ref(), SortOptions::default())?;
    let offsets = list.value_offsets();
    let mut out = Int32Array::builder(x.len());
    for i in 0..x.len() {
        if xs.is_null(i) || list.is_null(i) {
            out.append_null();
            continue;
        }
        let (start, end) = (offsets[i] as usize, offsets[i + 1] as usize);
        if (start..end).any(|j| values.is_null(j)) {
            return Err(pg_error(
                "22004",
                "thresholds array must not contain NULLs".to_owned(),
            ));
        }
        let (mut left, mut right) = (start, end);
        while left < right {
            let mid = (left + right) / 2;
            if cmp(i, mid).is_lt() {
                right = mid;
            } else {
                left = mid + 1;
            }
        }
        out.append_value((left - start) as i32);
    }
    Ok(Arc::new(out.finish()))
}

/// `f(operand, low, high, count)` per row, the three read as `as_type`; NULL where an
/// argument is NULL, 2201G for a count below 1.
fn each_bucket<T: datafusion::arrow::datatypes::ArrowPrimitiveType>(
    args: &[ArrayRef],
    as_type: &DataType,
    f: impl Fn(T::Native, T::Native, T::Native, i32) -> DfResult<i32>,
) -> DfResult<ArrayRef> {
    let count = cast(&args[3], &DataType::Int32)?;
    let count = count.as_primitive::<datafusion::arrow::datatypes::Int32Type>();
    let cols = args[..3]
        .iter()
        .map(|a| Ok(cast(a, as_type)?))
        .collect::<DfResult<Vec<_>>>()?;
    let cols: Vec<_> = cols.iter().map(|c| c.as_primitive::<T>()).collect();
    let mut out = Int32Array::builder(count.len());
    for i in 0..count.len() {
        if count.is_null(i) || cols.iter().any(|c| c.is_null(i)) {
            out.append_null();
            continue;
        }
        let n = count.value(i);
        if n <= 0 {
            return Err(pg_error(
                INVALID_ARGUMENT_FOR_WIDTH_BUCKET,
                "count must be greater than zero",
            ));
        }
        out.append_value(f(cols[0].value(i), cols[1].value(i), cols[2].value(i), n)?);
    }
    Ok(Arc::new(out.finish()))
}
