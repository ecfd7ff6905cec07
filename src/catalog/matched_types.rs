//! Postgres refuses to resolve the values of a UNION (INTERSECT, EXCEPT) column, a CASE,
//! COALESCE or GREATEST/LEAST to one type when they are of different kinds (`UNION types integer and
//! text cannot be matched`, 42804); DataFusion's type coercion makes them all text, so
//! `SELECT id FROM t UNION SELECT name FROM t` answered with a text column where Postgres
//! answers with an error.
//!
//! An analyzer rule that runs before DataFusion's type coercion (`serving.rs` puts it
//! there) and changes nothing: it looks at the values as written and refuses where
//! Postgres would. A quoted literal and NULL have no type yet (Postgres' `unknown`: they
//! take the others' type), so they are left out, as are VALUES rows (DataFusion typed
//! those when planning). The kinds are Postgres' type categories as Arrow sees them:
//! text (text, varchar, json, jsonb, uuid...), numbers, booleans, dates and timestamps,
//! times, intervals, bytes; the order of the message is Postgres' (a CASE's ELSE first,
//! then its THENs).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlan};
use datafusion::optimizer::AnalyzerRule;

use crate::error::{WeirError, sqlstate};
use crate::sql::types::{SqlType, field_sql_type};

#[derive(Debug)]
pub struct MatchedTypes;

impl AnalyzerRule for MatchedTypes {
    fn name(&self) -> &str {
        "weir_matched_types"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.apply_with_subqueries(|node| {
            check_node(node)?;
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok(plan)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Text,
    Number,
    Boolean,
    DateTime,
    Time,
    Interval,
    Bytes,
}

fn kind(t: &DataType) -> Option<Kind> {
    Some(match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Kind::Text,
        t if t.is_integer() || t.is_floating() => Kind::Number,
        DataType::Decimal128(..) | DataType::Decimal256(..) => Kind::Number,
        DataType::Boolean => Kind::Boolean,
        DataType::Date32 | DataType::Date64 | DataType::Timestamp(..) => Kind::DateTime,
        DataType::Time32(_) | DataType::Time64(_) => Kind::Time,
        DataType::Interval(_) | DataType::Duration(_) => Kind::Interval,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => Kind::Bytes,
        _ => return None,
    })
}

/// A value whose type Postgres has not decided: a quoted literal or NULL.
fn untyped(e: &Expr) -> bool {
    match e {
        Expr::Alias(a) => untyped(&a.expr),
        Expr::Literal(v, _) => matches!(
            v,
            ScalarValue::Null
                | ScalarValue::Utf8(_)
                | ScalarValue::LargeUtf8(_)
                | ScalarValue::Utf8View(_)
        ),
        _ => false,
    }
}

/// One value's type for the check: its kind and its Postgres name; None where it takes
/// the others' type.
type Typed = Option<(Kind, String)>;

fn typed_field(field: &datafusion::arrow::datatypes::Field) -> Typed {
    let k = kind(field.data_type())?;
    let name = field_sql_type(field)
        .or_else(|| SqlType::from_arrow(field.data_type()))
        .map_or_else(|| field.data_type().to_string(), |t| t.display_name());
    Some((k, name))
}

fn typed_expr(e: &Expr, schema: &DFSchema) -> Typed {
    if untyped(e) {
        return None;
    }
    let (_, field) = e.to_field(schema).ok()?;
    typed_field(&field)
}

/// 42804 where two of `values` (in Postgres' order) are of different kinds.
fn matched(what: &str, values: impl IntoIterator<Item = Typed>) -> Result<()> {
    let mut first: Option<(Kind, String)> = None;
    for (k, name) in values.into_iter().flatten() {
        match &first {
            None => first = Some((k, name)),
            Some((fk, fname)) if *fk != k => {
                return Err(DataFusionError::External(Box::new(WeirError::new(
                    sqlstate::DATATYPE_MISMATCH,
                    format!("{what} types {fname} and {name} cannot be matched"),
                ))));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The type of a set operation's input's column `i`: as its projection writes it (a
/// literal there is untyped), else as its schema says.
fn input_column(input: &LogicalPlan, i: usize) -> Typed {
    match input {
        LogicalPlan::Projection(p) => p.expr.get(i).and_then(|e| typed_expr(e, p.input.schema())),
        LogicalPlan::Values(_) => None,
        LogicalPlan::SubqueryAlias(a) => input_column(&a.input, i),
        other => other.schema().fields().get(i).and_then(|f| typed_field(f)),
    }
}

fn check_node(node: &LogicalPlan) -> Result<()> {
    match node {
        LogicalPlan::Union(u) => {
            for i in 0..u.schema.fields().len() {
                matched("UNION", u.inputs.iter().map(|input| input_column(input, i)))?;
            }
        }
        // INTERSECT and EXCEPT as the SQL planner writes them: a semi or anti join on
        // every column (no other join of those kinds exists before the optimizer)
        LogicalPlan::Join(j)
            if matches!(
                j.join_type,
                datafusion::logical_expr::JoinType::LeftSemi
                    | datafusion::logical_expr::JoinType::LeftAnti
            ) && j.on.len() == j.left.schema().fields().len() =>
        {
            let what = if j.join_type == datafusion::logical_expr::JoinType::LeftSemi {
                "INTERSECT"
            } else {
                "EXCEPT"
            };
            for i in 0..j.on.len() {
                matched(what, [input_column(&j.left, i), input_column(&j.right, i)])?;
            }
        }
        _ => {}
    }
    let schema = crate::catalog::pg_semantics::expression_schema(node);
    node.apply_expressions(|e| {
        e.apply(|e| {
            check_expr(e, &schema)?;
            Ok(TreeNodeRecursion::Continue)
        })
    })?;
    Ok(())
}

fn check_expr(e: &Expr, schema: &DFSchema) -> Result<()> {
    match e {
        Expr::Case(c) => matched(
            "CASE",
            c.else_expr
                .iter()
                .map(|x| x.as_ref())
                .chain(c.when_then_expr.iter().map(|(_, t)| t.as_ref()))
                .map(|x| typed_expr(x, schema)),
        ),
        Expr::ScalarFunction(f) => {
            let what = match f.func.name() {
                "coalesce" => "COALESCE",
                "greatest" => "GREATEST",
                "least" => "LEAST",
                _ => return Ok(()),
            };
            matched(what, f.args.iter().map(|a| typed_expr(a, schema)))
        }
        _ => Ok(()),
    }
}
