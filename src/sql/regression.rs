//! `corr`, `covar_pop`, `covar_samp` and the `regr_*` aggregates as Postgres computes them:
//! its float8 accumulator over (Y, X) pairs (`float8_regr_accum`: N, Σx, Σy and the
//! Youngs–Cramer sums Sxx, Syy, Sxy kept as each pair arrives; partial states combined as
//! `float8_regr_combine`), so the answers agree to the last digit (DataFusion's own give
//! `regr_slope` `1.7500000000000002` where Postgres says `1.75`). A pair with a NULL is
//! skipped; the arguments are read as doubles and the results are doubles (`regr_count`
//! a bigint). Retraction (sliding window frames) takes a pair back out of the same sums.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Float64Type};
use datafusion::common::{Result as DfResult, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;

/// What the aggregate answers from the sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Corr,
    CovarPop,
    CovarSamp,
    Count,
    Sxx,
    Syy,
    Sxy,
    AvgX,
    AvgY,
    R2,
    Slope,
    Intercept,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Regression {
    name: &'static str,
    kind: Kind,
    signature: Signature,
}

/// The twelve, by name.
const AGGREGATES: [(&str, Kind); 12] = [
    ("corr", Kind::Corr),
    ("covar_pop", Kind::CovarPop),
    ("covar_samp", Kind::CovarSamp),
    ("regr_count", Kind::Count),
    ("regr_sxx", Kind::Sxx),
    ("regr_syy", Kind::Syy),
    ("regr_sxy", Kind::Sxy),
    ("regr_avgx", Kind::AvgX),
    ("regr_avgy", Kind::AvgY),
    ("regr_r2", Kind::R2),
    ("regr_slope", Kind::Slope),
    ("regr_intercept", Kind::Intercept),
];

/// Whether `name` is one of the twelve.
pub fn is_regression(name: &str) -> bool {
    AGGREGATES.iter().any(|(n, _)| *n == name)
}

/// Register the twelve, replacing DataFusion's.
pub fn register(ctx: &SessionContext) {
    for (name, kind) in AGGREGATES {
        ctx.register_udaf(AggregateUDF::new_from_impl(Regression {
            name,
            kind,
            signature: Signature::user_defined(Volatility::Immutable),
        }));
    }
}

impl AggregateUDFImpl for Regression {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, args: &[DataType]) -> DfResult<Vec<DataType>> {
        let numeric = |t: &DataType| t.is_numeric() || *t == DataType::Null;
        match args {
            [y, x] if numeric(y) && numeric(x) => Ok(vec![DataType::Float64, DataType::Float64]),
            _ => Err(datafusion::common::DataFusionError::External(Box::new(
                crate::error::no_function_for(self.name, args),
            ))),
        }
    }
    fn return_type(&self, _: &[DataType]) -> DfResult<DataType> {
        Ok(match self.kind {
            Kind::Count => DataType::Int64,
            _ => DataType::Float64,
        })
    }
    fn accumulator(&self, _: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::new(RegressionAcc {
            kind: self.kind,
            s: Sums::default(),
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(["n", "sx", "sxx", "sy", "syy", "sxy"]
            .iter()
            .map(|n| {
                Arc::new(Field::new(
                    format!("{}_{n}", args.name),
                    DataType::Float64,
                    true,
                ))
            })
            .collect())
    }
    fn default_value(&self, data_type: &DataType) -> DfResult<ScalarValue> {
        match self.kind {
            Kind::Count => Ok(ScalarValue::Int64(Some(0))),
            _ => ScalarValue::try_from(data_type),
        }
    }
}

/// Postgres' transition values.
#[derive(Debug, Default, Clone, Copy)]
struct Sums {
    n: f64,
    sx: f64,
    sxx: f64,
    sy: f64,
    syy: f64,
    sxy: f64,
}

impl Sums {
    /// `float8_regr_accum`: one pair in.
    fn add(&mut self, y: f64, x: f64) {
        let before = self.n;
        self.n += 1.0;
        self.sx += x;
        self.sy += y;
        if before > 0.0 {
            let tx = x * self.n - self.sx;
            let ty = y * self.n - self.sy;
            let scale = 1.0 / (self.n * before);
            self.sxx += tx * tx * scale;
            self.syy += ty * ty * scale;
            self.sxy += tx * ty * scale;
            if self.sx.is_infinite() || self.sxx.is_infinite() {
                self.sxx = f64::NAN;
                self.sxy = f64::NAN;
            }
            if self.sy.is_infinite() || self.syy.is_infinite() {
                self.syy = f64::NAN;
                self.sxy = f64::NAN;
            }
            if self.sxy.is_infinite() {
                self.sxy = f64::NAN;
            }
        } else {
            if x.is_nan() || x.is_infinite() {
                self.sxx = f64::NAN;
                self.sxy = f64::NAN;
            }
            if y.is_nan() || y.is_infinite() {
                self.syy = f64::NAN;
                self.sxy = f64::NAN;
            }
        }
    }

    /// The inverse of [`Sums::add`]: a pair taken back out.
    fn remove(&mut self, y: f64, x: f64) {
        if self.n <= 1.0 {
            *self = Sums::default();
            return;
        }
        let tx = x * self.n - self.sx;
        let ty = y * self.n - self.sy;
        let scale = 1.0 / (self.n * (self.n - 1.0));
        self.sxx -= tx * tx * scale;
        self.syy -= ty * ty * scale;
        self.sxy -= tx * ty * scale;
        self.n -= 1.0;
        self.sx -= x;
        self.sy -= y;
    }

    /// `float8_regr_combine`: another partial state in.
    fn combine(&mut self, o: Sums) {
        if o.n == 0.0 {
            return;
        }
        if self.n == 0.0 {
            *self = o;
            return;
        }
        let n = self.n + o.n;
        let tx = self.sx / self.n - o.sx / o.n;
        let ty = self.sy / self.n - o.sy / o.n;
        self.sxx += o.sxx + self.n * o.n * tx * tx / n;
        self.syy += o.syy + self.n * o.n * ty * ty / n;
        self.sxy += o.sxy + self.n * o.n * tx * ty / n;
        self.sx += o.sx;
        self.sy += o.sy;
        self.n = n;
    }

    /// The final function of `kind` (None: NULL).
    fn answer(&self, kind: Kind) -> Option<f64> {
        let s = self;
        if kind == Kind::CovarSamp {
            return (s.n >= 2.0).then(|| s.sxy / (s.n - 1.0));
        }
        if s.n < 1.0 {
            return None;
        }
        match kind {
            Kind::Count => Some(s.n),
            Kind::Sxx => Some(s.sxx),
            Kind::Syy => Some(s.syy),
            Kind::Sxy => Some(s.sxy),
            Kind::AvgX => Some(s.sx / s.n),
            Kind::AvgY => Some(s.sy / s.n),
            Kind::CovarPop => Some(s.sxy / s.n),
            Kind::CovarSamp => None,
            Kind::Corr => (s.sxx > 0.0 && s.syy > 0.0).then(|| s.sxy / (s.sxx * s.syy).sqrt()),
            Kind::R2 => {
                if s.sxx <= 0.0 {
                    None
                } else if s.syy <= 0.0 {
                    Some(1.0)
                } else {
                    Some(s.sxy * s.sxy / (s.sxx * s.syy))
                }
            }
            Kind::Slope => (s.sxx > 0.0).then(|| s.sxy / s.sxx),
            Kind::Intercept => (s.sxx > 0.0).then(|| (s.sy - s.sx * s.sxy / s.sxx) / s.n),
        }
    }
}

#[derive(Debug)]
struct RegressionAcc {
    kind: Kind,
    s: Sums,
}

impl RegressionAcc {
    fn pairs(values: &[ArrayRef], mut f: impl FnMut(f64, f64)) -> DfResult<()> {
        let y = cast(&values[0], &DataType::Float64)?;
        let x = cast(&values[1], &DataType::Float64)?;
        let (y, x) = (
            y.as_primitive::<Float64Type>(),
            x.as_primitive::<Float64Type>(),
        );
        for i in 0..y.len() {
            if !y.is_null(i) && !x.is_null(i) {
                f(y.value(i), x.value(i));
            }
        }
        Ok(())
    }
}

impl Accumulator for RegressionAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let s = &mut self.s;
        Self::pairs(values, |y, x| s.add(y, x))
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let s = &mut self.s;
        Self::pairs(values, |y, x| s.remove(y, x))
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let cols: Vec<_> = states
            .iter()
            .map(|a| a.as_primitive::<Float64Type>())
            .collect();
        for i in 0..cols[0].len() {
            if cols[0].is_null(i) {
                continue;
            }
            self.s.combine(Sums {
                n: cols[0].value(i),
                sx: cols[1].value(i),
                sxx: cols[2].value(i),
                sy: cols[3].value(i),
                syy: cols[4].value(i),
                sxy: cols[5].value(i),
            });
        }
        Ok(())
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let s = self.s;
        Ok([s.n, s.sx, s.sxx, s.sy, s.syy, s.sxy]
            .iter()
            .map(|v| ScalarValue::Float64(Some(*v)))
            .collect())
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        Ok(match self.kind {
            Kind::Count => ScalarValue::Int64(Some(self.s.n as i64)),
            k => ScalarValue::Float64(self.s.answer(k)),
        })
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PostgreSQL 15: `SELECT corr(y, x), covar_pop(y, x), covar_samp(y, x),
    /// regr_slope(y, x), regr_intercept(y, x), regr_r2(y, x) FROM (VALUES (1, 2),
    /// (2, 4.5), (3, 5.5)) v(x, y)`.
    #[test]
    fn answers_as_postgres() {
        let mut s = Sums::default();
        for (x, y) in [(1.0, 2.0), (2.0, 4.5), (3.0, 5.5)] {
            s.add(y, x);
        }
        assert_eq!(s.answer(Kind::Corr), Some(0.9707253433941511));
        assert_eq!(s.answer(Kind::CovarPop), Some(1.1666666666666667));
        assert_eq!(s.answer(Kind::CovarSamp), Some(1.75));
        assert_eq!(s.answer(Kind::Slope), Some(1.75));
        assert_eq!(s.answer(Kind::Intercept), Some(0.5));
        assert_eq!(s.answer(Kind::R2), Some(0.9423076923076923));
        // a pair taken back out leaves the sums of the others
        let mut t = s;
        t.remove(5.5, 3.0);
        let mut u = Sums::default();
        u.add(2.0, 1.0);
        u.add(4.5, 2.0);
        assert_eq!(t.answer(Kind::Slope), u.answer(Kind::Slope));
    }
}
