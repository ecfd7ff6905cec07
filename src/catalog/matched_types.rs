//! Postgres refuses to resolve the values of a UNION (INTERSECT, EXCEPT) column, a CASE,
//! COALESCE, GREATEST/LEAST or the elements of an ARRAY[] to one type when they are of different kinds (`UNION types integer and
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
//! then its THENs). Likewise a comparison of text with another kind has no operator (42883
//! `operator does not exist: integer = text`).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
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
        Ok(plan.transform_up_with_subqueries(node)?.data)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Text,
    Number,
    Boolean,
    DateTime,
    Time,
    Interval,
    Bytes,
}

pub(crate) fn kind(t: &DataType) -> Option<Kind> {
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

/// Whether a value of type `from` converts to `to` where it is written to a column, as
/// Postgres' assignment casts convert: within a kind, from and to text, date ↔ timestamp,
/// timestamp → time, time ↔ interval (a number does not become a Boolean, a date or bytes).
pub(crate) fn assignable(from: &DataType, to: &DataType) -> bool {
    let (Some(f), Some(t)) = (kind(from), kind(to)) else {
        return true;
    };
    f == t
        || f == Kind::Text
        || t == Kind::Text
        || matches!(
            (f, t),
            (Kind::Interval, Kind::Time) | (Kind::Time, Kind::Interval)
        )
        || (f == Kind::DateTime && t == Kind::Time && matches!(from, DataType::Timestamp(..)))
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

/// One value's type for the check: its kind, its Postgres name and its Arrow type; None
/// where it takes the others' type.
type Typed = Option<(Kind, String, DataType)>;

fn typed_field(field: &datafusion::arrow::datatypes::Field) -> Typed {
    let k = kind(field.data_type())?;
    let name = field_sql_type(field)
        .or_else(|| SqlType::from_arrow(field.data_type()))
        .map_or_else(|| field.data_type().to_string(), |t| t.display_name());
    Some((k, name, field.data_type().clone()))
}

fn typed_expr(e: &Expr, schema: &DFSchema) -> Typed {
    if untyped(e) {
        return None;
    }
    let (_, field) = e.to_field(schema).ok()?;
    typed_field(&field)
}

/// 42804 where two of `values` (in Postgres' order) are of different kinds; else the
/// type the first typed one has (what an untyped literal among them is read as).
fn matched(
    what: &str,
    values: impl IntoIterator<Item = Typed>,
) -> Result<Option<(Kind, DataType)>> {
    let mut first: Option<(Kind, String, DataType)> = None;
    for (k, name, t) in values.into_iter().flatten() {
        match &first {
            None => first = Some((k, name, t)),
            Some((fk, fname, _)) if *fk != k => {
                return Err(DataFusionError::External(Box::new(WeirError::new(
                    sqlstate::DATATYPE_MISMATCH,
                    format!("{what} types {fname} and {name} cannot be matched"),
                ))));
            }
            Some(_) => {}
        }
    }
    Ok(first.map(|(k, _, t)| (k, t)))
}

/// A quoted literal (not NULL), which Postgres reads as the type its neighbours resolve
/// to: `coalesce(d, '2021-01-01')` is a date, `CASE ... THEN 1 ELSE '0' END` an integer.
fn text_literal(e: &Expr) -> bool {
    match e {
        Expr::Alias(a) => text_literal(&a.expr),
        Expr::Literal(v, _) => matches!(
            v,
            ScalarValue::Utf8(Some(_))
                | ScalarValue::LargeUtf8(Some(_))
                | ScalarValue::Utf8View(Some(_))
        ),
        _ => false,
    }
}

/// `e` read as `to` where it is a quoted literal and `to` is no text.
fn read_as(e: &mut Expr, to: &Option<(Kind, DataType)>) -> bool {
    match to {
        Some((k, t)) if *k != Kind::Text && text_literal(e) => {
            *e = datafusion::logical_expr::cast(std::mem::take(e), t.clone());
            true
        }
        _ => false,
    }
}

/// A quoted literal read as `to` now (Postgres reads it when it parses: `i IN (1, 'x')` is
/// 22P02 `invalid input syntax for type integer: "x"` whatever the rows), replaced by the
/// value; false for anything else.
fn read_literal_now(e: &mut Expr, to: &DataType, pg_name: &str) -> Result<bool> {
    let Expr::Literal(v, _) = &*e else {
        return Ok(false);
    };
    let text = match v {
        ScalarValue::Utf8(Some(t))
        | ScalarValue::LargeUtf8(Some(t))
        | ScalarValue::Utf8View(Some(t)) => t.clone(),
        _ => return Ok(false),
    };
    let strict = datafusion::arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    match v.cast_to_with_options(to, &strict) {
        Ok(read) if !read.is_null() => {
            *e = Expr::Literal(read, None);
            Ok(true)
        }
        _ => Err(DataFusionError::External(Box::new(
            crate::error::invalid_input(pg_name, &text),
        ))),
    }
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

fn node(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    check_set_operation(&plan)?;
    let plan = match plan {
        LogicalPlan::Union(u) => union_literals(u)?,
        other => other,
    };
    let schema = crate::catalog::pg_semantics::expression_schema(&plan);
    let t = plan.map_expressions(|e| e.transform_up(|e| expr(e, &schema)))?;
    if t.transformed {
        t.map_data(|p| p.recompute_schema())
    } else {
        Ok(t)
    }
}

/// A UNION's quoted literals (`SELECT id FROM t UNION SELECT '7'`) read as the type of the
/// column's first typed input, as Postgres reads them (`'x'` beside an integer is 22P02).
fn union_literals(u: datafusion::logical_expr::Union) -> Result<LogicalPlan> {
    let width = u.schema.fields().len();
    let targets: Vec<Option<(Kind, DataType)>> = (0..width)
        .map(|i| matched("UNION", u.inputs.iter().map(|input| input_column(input, i))))
        .collect::<Result<_>>()?;
    let reads = |p: &datafusion::logical_expr::Projection| {
        p.expr
            .iter()
            .zip(&targets)
            .any(|(e, to)| matches!(to, Some((k, _)) if *k != Kind::Text) && text_literal(e))
    };
    if !u
        .inputs
        .iter()
        .any(|i| matches!(i.as_ref(), LogicalPlan::Projection(p) if reads(p)))
    {
        return Ok(LogicalPlan::Union(u));
    }
    let inputs = u
        .inputs
        .into_iter()
        .map(|input| match input.as_ref() {
            LogicalPlan::Projection(p) if reads(p) => {
                let names = p.schema.clone();
                let exprs = p
                    .expr
                    .iter()
                    .zip(&targets)
                    .enumerate()
                    .map(|(i, (e, to))| {
                        let mut e = e.clone();
                        if read_as(&mut e, to) {
                            let (q, f) = names.qualified_field(i);
                            e = e.alias_qualified(q.cloned(), f.name());
                        }
                        e
                    })
                    .collect();
                Ok(std::sync::Arc::new(LogicalPlan::Projection(
                    datafusion::logical_expr::Projection::try_new(exprs, p.input.clone())?,
                )))
            }
            _ => Ok(input),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(LogicalPlan::Union(
        datafusion::logical_expr::Union::try_new_with_loose_types(inputs)?,
    ))
}

fn check_set_operation(node: &LogicalPlan) -> Result<()> {
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
    Ok(())
}

/// The values Postgres resolves to one type in `e`, in its order (a CASE's ELSE, then its
/// THENs; the arguments of COALESCE, GREATEST, LEAST, NULLIF), with the construct's name as
/// its errors give it. `float_over_numeric.rs` resolves the same values.
pub(crate) fn resolved_values(e: &mut Expr) -> Option<(&'static str, Vec<&mut Expr>)> {
    match e {
        Expr::Case(c) => Some((
            "CASE",
            c.else_expr
                .as_deref_mut()
                .into_iter()
                .chain(c.when_then_expr.iter_mut().map(|(_, t)| t.as_mut()))
                .collect(),
        )),
        Expr::ScalarFunction(f) => {
            let what = match f.func.name() {
                "coalesce" => "COALESCE",
                "greatest" => "GREATEST",
                "least" => "LEAST",
                "nullif" => "NULLIF",
                "make_array" => "ARRAY",
                _ => return None,
            };
            Some((what, f.args.iter_mut().collect()))
        }
        _ => None,
    }
}

/// 42883 where a comparison has a text value on one side and a number, date, time,
/// interval, Boolean or bytes value on the other, both of them typed: Postgres has no such
/// operator (`integer = text`), where DataFusion's coercion would read the text as the
/// other type per row (and fail on the first row that is no number). A quoted literal, NULL
/// and a parameter take the other side's type and are left alone (`i = '1'`).
fn comparable(
    left: &Expr,
    op: datafusion::logical_expr::Operator,
    right: &Expr,
    schema: &DFSchema,
) -> Result<()> {
    use datafusion::logical_expr::Operator;
    let op = match op {
        Operator::Eq | Operator::IsDistinctFrom | Operator::IsNotDistinctFrom => "=",
        Operator::NotEq => "<>",
        Operator::Lt => "<",
        Operator::LtEq => "<=",
        Operator::Gt => ">",
        Operator::GtEq => ">=",
        _ => return Ok(()),
    };
    let typed = |x: &Expr| match x {
        Expr::Placeholder(_) => None,
        x => typed_expr(x, schema),
    };
    let (Some((lk, lname, _)), Some((rk, rname, _))) = (typed(left), typed(right)) else {
        return Ok(());
    };
    if (lk == Kind::Text) == (rk == Kind::Text) {
        return Ok(());
    }
    Err(DataFusionError::External(Box::new(
        WeirError::new(
            sqlstate::UNDEFINED_FUNCTION,
            format!("operator does not exist: {lname} {op} {rname}"),
        )
        .with_hint(
            "No operator matches the given name and argument types. You might need to add explicit type casts.",
        ),
    )))
}

fn expr(mut e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    use datafusion::logical_expr::BinaryExpr;
    let kind_of = |x: &Expr| typed_expr(x, schema);
    match &mut e {
        // a searched CASE's conditions are Booleans (`CASE WHEN i THEN ...`: 42804)
        Expr::Case(c) if c.expr.is_none() => {
            for (when, _) in &c.when_then_expr {
                if let Some((k, name, _)) = kind_of(when)
                    && k != Kind::Boolean
                {
                    return Err(DataFusionError::External(Box::new(WeirError::new(
                        sqlstate::DATATYPE_MISMATCH,
                        format!("argument of CASE/WHEN must be type boolean, not type {name}"),
                    ))));
                }
            }
        }
        // `b = 'yes'`: a quoted literal compared with a Boolean is read as one
        // (`supports_propagation`: the comparisons, and the regex matches)
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if op.supports_propagation() => {
            comparable(left, *op, right, schema)?;
            let boolean = |x: &Expr| match kind_of(x) {
                Some((Kind::Boolean, name, t)) => Some((name, t)),
                _ => None,
            };
            let (to_left, to_right) = (boolean(right), boolean(left));
            let changed = match (to_left, to_right) {
                (Some((name, t)), _) => read_literal_now(left.as_mut(), &t, &name)?,
                (_, Some((name, t))) => read_literal_now(right.as_mut(), &t, &name)?,
                _ => false,
            };
            if changed {
                return Ok(Transformed::yes(e));
            }
        }
        // `i IN (1, 'x')`: the quoted literals are read as the value's type (22P02 for 'x')
        Expr::InList(l) => {
            for item in &l.list {
                comparable(
                    &l.expr,
                    datafusion::logical_expr::Operator::Eq,
                    item,
                    schema,
                )?;
            }
            if let Some((k, name, t)) = kind_of(&l.expr)
                && k != Kind::Text
            {
                let mut changed = false;
                for item in l.list.iter_mut() {
                    changed |= read_literal_now(item, &t, &name)?;
                }
                if changed {
                    return Ok(Transformed::yes(e));
                }
            }
        }
        _ => {}
    }
    let changed = match resolved_values(&mut e) {
        // (NULLIF of two kinds is Postgres' "operator does not exist", not refused here)
        Some((what, values)) if what != "NULLIF" => {
            let to = matched(what, values.iter().map(|v| typed_expr(v, schema)))?;
            let mut changed = false;
            for v in values {
                changed |= read_as(v, &to);
            }
            changed
        }
        _ => false,
    };
    Ok(Transformed::new_transformed(e, changed))
}
