//! Postgres' ordered-set aggregates DataFusion lacks: `percentile_disc(q) WITHIN GROUP
//! (ORDER BY x)` (the first value whose position in the order reaches the fraction `q`)
//! and `mode() WITHIN GROUP (ORDER BY x)` (the most frequent value, the first in the order
//! among equally frequent ones). NULLs are ignored, as in Postgres. The group's values are
//! collected and sorted when the group is evaluated (ad-hoc queries; materialized views
//! refuse them at CREATE as aggregates without an incremental form).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::{SortOptions, concat, sort_to_indices};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{DataFusionError, Result as DfResult, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, TypeSignature, Volatility,
};
use datafusion::physical_expr::expressions::Literal;
use datafusion::prelude::SessionContext;

use crate::error::{WeirError, sqlstate};

#[derive(Debug, PartialEq, Eq, Hash)]
struct OrderedSet {
    name: &'static str,
    /// percentile_disc (else mode)
    percentile: bool,
    signature: Signature,
}

impl AggregateUDFImpl for OrderedSet {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> DfResult<DataType> {
        Ok(args.first().cloned().unwrap_or(DataType::Null))
    }
    fn supports_within_group_clause(&self) -> bool {
        true
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let fraction = if self.percentile {
            let q = args
                .exprs
                .get(1)
                .and_then(|e| e.downcast_ref::<Literal>())
                .map(|l| l.value().clone())
                .and_then(|v| v.cast_to(&DataType::Float64).ok())
                .and_then(|v| match v {
                    ScalarValue::Float64(Some(f)) => Some(f),
                    _ => None,
                })
                .ok_or_else(|| {
                    DataFusionError::External(Box::new(WeirError::not_supported(
                        "percentile_disc takes a constant fraction",
                    )))
                })?;
            if !(0.0..=1.0).contains(&q) {
                return Err(DataFusionError::External(Box::new(WeirError::new(
                    sqlstate::NUMERIC_VALUE_OUT_OF_RANGE,
                    format!("percentile value {q} is not between 0 and 1"),
                ))));
            }
            Some(q)
        } else {
            None
        };
        let options = args
            .order_bys
            .first()
            .map(|o| o.options)
            .unwrap_or_default();
        Ok(Box::new(OrderedSetAcc {
            fraction,
            options,
            data_type: args.return_field.data_type().clone(),
            values: Vec::new(),
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        let t = args.return_field.data_type().clone();
        Ok(vec![Arc::new(Field::new(
            format!("{}_values", args.name),
            DataType::List(Arc::new(Field::new_list_field(t, true))),
            true,
        ))])
    }
}

#[derive(Debug)]
struct OrderedSetAcc {
    fraction: Option<f64>,
    options: SortOptions,
    data_type: DataType,
    values: Vec<ArrayRef>,
}

impl OrderedSetAcc {
    fn all(&self) -> DfResult<Option<ArrayRef>> {
        if self.values.is_empty() {
            return Ok(None);
        }
        let refs: Vec<&dyn Array> = self.values.iter().map(|a| a.as_ref()).collect();
        Ok(Some(concat(&refs)?))
    }
}

impl Accumulator for OrderedSetAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let v = &values[0];
        let v =
            datafusion::arrow::compute::filter(v, &datafusion::arrow::compute::is_not_null(v)?)?;
        if !v.is_empty() {
            self.values.push(v);
        }
        Ok(())
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let Some(all) = self.all()? else {
            return ScalarValue::try_from(&self.data_type);
        };
        let idx = sort_to_indices(&all, Some(self.options), None)?;
        let n = idx.len();
        let at = match self.fraction {
            Some(q) => ((q * n as f64).ceil() as usize)
                .saturating_sub(1)
                .min(n - 1),
            None => {
                // the longest run of equal values, the first one in the order on ties
                let sorted = datafusion::arrow::compute::take(&all, &idx, None)?;
                let (mut best, mut best_len, mut start) = (0, 0, 0);
                for i in 1..=n {
                    let same = i < n
                        && ScalarValue::try_from_array(&sorted, i)?
                            == ScalarValue::try_from_array(&sorted, start)?;
                    if !same {
                        if i - start > best_len {
                            best = start;
                            best_len = i - start;
                        }
                        start = i;
                    }
                }
                return ScalarValue::try_from_array(&sorted, best);
            }
        };
        ScalarValue::try_from_array(&all, idx.value(at) as usize)
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self
                .values
                .iter()
                .map(|a| a.get_array_memory_size())
                .sum::<usize>()
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        let list = match self.all()? {
            Some(a) => ScalarValue::List(Arc::new(datafusion::arrow::array::ListArray::new(
                Arc::new(Field::new_list_field(self.data_type.clone(), true)),
                datafusion::arrow::buffer::OffsetBuffer::from_lengths([a.len()]),
                a,
                None,
            ))),
            None => ScalarValue::List(ScalarValue::new_list_nullable(&[], &self.data_type)),
        };
        Ok(vec![list])
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let l = states[0].as_list::<i32>();
        for i in 0..l.len() {
            if !l.is_null(i) {
                let v = l.value(i);
                if !v.is_empty() {
                    self.values.push(v);
                }
            }
        }
        Ok(())
    }
}

pub fn register(ctx: &SessionContext) {
    ctx.register_udaf(AggregateUDF::new_from_impl(OrderedSet {
        name: "percentile_disc",
        percentile: true,
        signature: Signature::new(TypeSignature::Any(2), Volatility::Immutable),
    }));
    ctx.register_udaf(AggregateUDF::new_from_impl(OrderedSet {
        name: "mode",
        percentile: false,
        signature: Signature::new(TypeSignature::Any(1), Volatility::Immutable),
    }));
    // the names streaming users write for DataFusion's sketches (HyperLogLog, t-digest);
    // a view keeps retractable sketches of its own instead (operators/sketch.rs)
    ctx.register_udaf(
        datafusion::functions_aggregate::approx_distinct::approx_distinct_udaf()
            .as_ref()
            .clone()
            .with_aliases(["approx_count_distinct"]),
    );
    ctx.register_udaf(
        datafusion::functions_aggregate::approx_percentile_cont::approx_percentile_cont_udaf()
            .as_ref()
            .clone()
            .with_aliases(["approx_percentile"]),
    );
}
