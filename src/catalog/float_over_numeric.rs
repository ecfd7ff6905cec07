//! Postgres' common type of a float and a `numeric`: where the branches of a CASE, the
//! arguments of COALESCE / GREATEST / LEAST / NULLIF, the elements of an ARRAY[], the columns of a UNION (INTERSECT,
//! EXCEPT) or of a VALUES list mix `real` / `double precision` with `numeric`, Postgres
//! resolves them as the float (`double precision` is the numeric category's preferred type,
//! and a `numeric` casts implicitly to `real`). DataFusion prefers the decimal: a float
//! became `Decimal(30, 15)`, so `coalesce(1.5::float8, 2.5)` showed `1.500000000000000` and
//! `(VALUES (2.5::float8), (1.5))` rounded to integers half away from zero where Postgres
//! rounds a double half to even.
//!
//! An analyzer rule that runs before DataFusion's type coercion (`serving.rs` puts it
//! there): the decimal sides are cast to the widest float among the values, so the
//! coercion meets floats and integers only. VALUES is typed by DataFusion's planner before
//! any rule runs (each row cast to the common type): a column DataFusion typed as the
//! decimal its rows' float and decimal values resolve to is typed again as the float, from
//! the values under those casts. Integers beside a float alone are DataFusion's already
//! (the float).

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, DFSchema, Result, ScalarValue};
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan, Projection, Union, Values, cast};
use datafusion::optimizer::AnalyzerRule;

#[derive(Debug)]
pub struct FloatOverNumeric;

impl AnalyzerRule for FloatOverNumeric {
    fn name(&self) -> &str {
        "weir_float_over_numeric"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        Ok(plan.transform_up_with_subqueries(node)?.data)
    }
}

fn decimal(t: &DataType) -> bool {
    matches!(t, DataType::Decimal128(..) | DataType::Decimal256(..))
}

/// The float these types resolve to in Postgres where a decimal is among them: the widest
/// float (None without a float or without a decimal).
fn float_over_numeric<'a>(
    types: impl IntoIterator<Item = &'a DataType> + Clone,
) -> Option<DataType> {
    if !types.clone().into_iter().any(decimal) {
        return None;
    }
    types
        .into_iter()
        .filter(|t| t.is_floating())
        .max_by_key(|t| t.primitive_width())
        .cloned()
}

fn node(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    let plan = match plan {
        LogicalPlan::Union(u) => union(u)?,
        LogicalPlan::Values(v) => values(v)?,
        other => Transformed::no(other),
    };
    let changed = plan.transformed;
    let schema = crate::catalog::pg_semantics::expression_schema(&plan.data);
    let mut out = plan
        .data
        .map_expressions(|e| e.transform_up(|e| expr(e, &schema)))?;
    out.transformed |= changed;
    Ok(out)
}

/// The decimal ones among `values` cast, in place, to the float they resolve to with the
/// rest. Whether any was.
fn floated(values: Vec<&mut Expr>, schema: &DFSchema) -> Result<bool> {
    let types: Vec<DataType> = values
        .iter()
        .map(|a| a.get_type(schema))
        .collect::<Result<_>>()?;
    let Some(float) = float_over_numeric(&types) else {
        return Ok(false);
    };
    for (v, t) in values.into_iter().zip(&types) {
        if decimal(t) {
            *v = cast(std::mem::take(v), float.clone());
        }
    }
    Ok(true)
}

fn expr(mut e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    // the values a CASE gives (its THENs and ELSE), the arguments of COALESCE, NULLIF,
    // GREATEST, LEAST
    let changed = match crate::catalog::matched_types::resolved_values(&mut e) {
        Some((_, values)) => floated(values, schema)?,
        None => false,
    };
    Ok(Transformed::new_transformed(e, changed))
}

/// A UNION's inputs with each decimal column that meets a float in another input cast to
/// that float (in a projection over the input).
fn union(u: Union) -> Result<Transformed<LogicalPlan>> {
    let width = u.schema.fields().len();
    let floats: Vec<Option<DataType>> = (0..width)
        .map(|i| {
            let mut types = Vec::new();
            for input in &u.inputs {
                leaf_types(input, i, &mut types);
            }
            float_over_numeric(types.iter())
        })
        .collect();
    if floats.iter().all(Option::is_none) {
        return Ok(Transformed::no(LogicalPlan::Union(u)));
    }
    let inputs = u
        .inputs
        .into_iter()
        .map(|input| {
            let cast_at: Vec<bool> = input
                .schema()
                .fields()
                .iter()
                .zip(&floats)
                .map(|(f, fl)| fl.is_some() && decimal(f.data_type()))
                .collect();
            if !cast_at.contains(&true) {
                return Ok(input);
            }
            let exprs = input
                .schema()
                .iter()
                .zip(&cast_at)
                .zip(&floats)
                .map(|(((q, f), cast_it), fl)| {
                    let col = Expr::Column(Column::from((q, f)));
                    match (cast_it, fl) {
                        (true, Some(fl)) => {
                            cast(col, fl.clone()).alias_qualified(q.cloned(), f.name())
                        }
                        _ => col,
                    }
                })
                .collect();
            Ok(Arc::new(LogicalPlan::Projection(Projection::try_new(
                exprs, input,
            )?)))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Transformed::yes(LogicalPlan::Union(
        Union::try_new_with_loose_types(inputs)?,
    )))
}

/// The types column `i` of a UNION input has: its own, or where the input is itself a
/// UNION (`a UNION b UNION c` nests them; before the coercion a UNION's schema is its first
/// input's) each of its inputs'.
fn leaf_types(plan: &LogicalPlan, i: usize, out: &mut Vec<DataType>) {
    match plan {
        LogicalPlan::Union(u) => {
            for input in &u.inputs {
                leaf_types(input, i, out);
            }
        }
        LogicalPlan::Distinct(datafusion::logical_expr::Distinct::All(input)) => {
            leaf_types(input, i, out)
        }
        other => out.extend(
            other
                .schema()
                .fields()
                .get(i)
                .map(|f| f.data_type().clone()),
        ),
    }
}

/// A VALUES column DataFusion typed as the decimal its float and decimal rows resolve to,
/// typed as the float instead (each row's value under the cast DataFusion added, cast to
/// the float).
fn values(v: Values) -> Result<Transformed<LogicalPlan>> {
    let empty = DFSchema::empty();
    let width = v.schema.fields().len();
    // a row's value as written: under DataFusion's cast to the column's type
    let written = |e: &Expr, column: &DataType| -> Expr {
        match e {
            Expr::Cast(c) if c.field.data_type() == column => (*c.expr).clone(),
            other => other.clone(),
        }
    };
    let mut floats: Vec<Option<DataType>> = vec![None; width];
    for (j, f) in v.schema.fields().iter().enumerate() {
        let column = f.data_type();
        if !decimal(column) {
            continue;
        }
        let types: Vec<DataType> = v
            .values
            .iter()
            .filter_map(|row| row.get(j))
            .map(|e| written(e, column))
            .filter(|e| !matches!(e, Expr::Literal(s, _) if s.is_null()))
            .map(|e| e.get_type(&empty))
            .collect::<Result<_>>()?;
        let Some(float) = float_over_numeric(&types) else {
            continue;
        };
        // only the type DataFusion's coercion gives these values (a column of numerics the
        // query itself cast is left alone)
        if datafusion::logical_expr::type_coercion::binary::type_union_resolution(&types).as_ref()
            == Some(column)
        {
            floats[j] = Some(float);
        }
    }
    if floats.iter().all(Option::is_none) {
        return Ok(Transformed::no(LogicalPlan::Values(v)));
    }
    let values = v
        .values
        .into_iter()
        .map(|row| {
            row.into_iter()
                .enumerate()
                .map(|(j, e)| match &floats[j] {
                    None => Ok(e),
                    Some(float) => match e {
                        Expr::Literal(s, m) if s.is_null() => {
                            Ok(Expr::Literal(ScalarValue::try_from(float)?, m))
                        }
                        e => Ok(cast(
                            written(&e, v.schema.field(j).data_type()),
                            float.clone(),
                        )),
                    },
                })
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let fields: Vec<Field> = v
        .schema
        .fields()
        .iter()
        .zip(&floats)
        .map(|(f, fl)| match fl {
            Some(fl) => f.as_ref().clone().with_data_type(fl.clone()),
            None => f.as_ref().clone(),
        })
        .collect();
    let schema = DFSchema::from_unqualified_fields(fields.into(), v.schema.metadata().clone())?;
    Ok(Transformed::yes(LogicalPlan::Values(Values {
        schema: Arc::new(schema),
        values,
    })))
}
