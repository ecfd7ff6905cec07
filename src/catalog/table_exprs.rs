//! Expressions stored with a table, planned over its rows: CHECK constraints and generated
//! columns (`engine/checks.rs`, `engine/generated.rs`), and the keys and predicates of
//! expression and partial indexes (`CREATE INDEX ON t (lower(email)) WHERE NOT deleted`),
//! which the table store computes through [`IndexExprs`] (`state/table_index.rs`).
//!
//! An index's expressions are planned where the catalog opens its tables, before any
//! session exists, so by a context of their own ([`expression_context`]: Postgres'
//! functions and semantics, no catalog-reading functions); Postgres allows only immutable
//! functions there, and so does this (42P17).

use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{ArrayRef, AsArray, BooleanArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::DFSchema;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{Expr, Volatility};
use datafusion::physical_expr::PhysicalExpr;

use crate::error::{Result, WeirError, sqlstate};
use crate::state::table_index::DerivedKeys;

/// An expression stored with a table (a CHECK, a generated column's), planned over a row of
/// the table as a query's expression is: the syntax rewrites (`catalog::rewrite`, on the
/// expression as a query's select item), then the semantics rule over the planned
/// expression (the logical expression, and the schema to make it physical over). A subquery
/// is refused (`what` names the place, as Postgres' message does).
pub(crate) fn plan_table_expr(
    ctx: &SessionContext,
    table: &str,
    schema: &Schema,
    text: &str,
    what: &str,
) -> Result<(Expr, DFSchema)> {
    let df_schema = DFSchema::try_from_qualified_schema(table, schema)?;
    let mut subquery = false;
    let parsed = crate::sql::parser::parse_expr_text(text)?;
    let _ = datafusion::sql::sqlparser::ast::visit_expressions(&parsed, |e| {
        use datafusion::sql::sqlparser::ast::Expr as E;
        subquery |= matches!(e, E::Subquery(_) | E::Exists { .. } | E::InSubquery { .. });
        std::ops::ControlFlow::<()>::Continue(())
    });
    if subquery {
        return Err(WeirError::not_supported(format!(
            "cannot use subquery in {what}"
        )));
    }
    let mut q = crate::sql::parser::parse_query(&format!(
        "SELECT {parsed} FROM {}",
        crate::sql::pg_text::quote_ident(table)
    ))?;
    crate::catalog::rewrite::rewrite_query(&mut q)?;
    let rewritten = match q.body.as_ref() {
        datafusion::sql::sqlparser::ast::SetExpr::Select(s) => match s.projection.first() {
            // (the rewrite names the item as Postgres would: `?column?`)
            Some(
                datafusion::sql::sqlparser::ast::SelectItem::UnnamedExpr(e)
                | datafusion::sql::sqlparser::ast::SelectItem::ExprWithAlias { expr: e, .. },
            ) => e.to_string(),
            _ => text.to_owned(),
        },
        _ => text.to_owned(),
    };
    let expr = ctx.parse_sql_expr(&rewritten, &df_schema)?;
    let expr = crate::catalog::pg_semantics::analyze_expr(expr, &df_schema)?;
    let expr = coerced_and_simplified(expr, &df_schema)?;
    Ok((expr, df_schema))
}

/// An expression with its types coerced and simplified, as DataFusion's analyzer and
/// optimizer leave a planned query's (some functions, e.g. `coalesce`, only run once
/// simplified): for expressions made physical without a plan around them.
pub(crate) fn coerced_and_simplified(
    expr: datafusion::logical_expr::Expr,
    schema: &datafusion::common::DFSchema,
) -> crate::error::Result<datafusion::logical_expr::Expr> {
    use datafusion::logical_expr::simplify::SimplifyContext;
    use datafusion::optimizer::simplify_expressions::ExprSimplifier;
    let s = ExprSimplifier::new(
        SimplifyContext::builder()
            .with_schema(std::sync::Arc::new(schema.clone()))
            .build(),
    );
    let e = s.coerce(expr, schema)?;
    Ok(s.simplify(e)?)
}

/// The context index expressions are planned in: Postgres' functions and semantics over
/// DataFusion's, without the functions that read the catalog or a session.
fn expression_context() -> &'static SessionContext {
    static CTX: OnceLock<SessionContext> = OnceLock::new();
    CTX.get_or_init(|| {
        // (Postgres' built-in type names: `x::character varying`, `timestamp(3)`)
        let state = datafusion::execution::SessionStateBuilder::new()
            .with_default_features()
            .with_type_planner(Arc::new(crate::catalog::functions::WeirTypePlanner {
                catalog: None,
            }))
            .build();
        let ctx = SessionContext::new_with_state(state);
        crate::catalog::pg_semantics::register(&ctx);
        crate::catalog::value_limits::register(&ctx);
        crate::sql::json::register(&ctx);
        crate::sql::json_build::register(&ctx);
        crate::sql::pg_functions::register(&ctx);
        ctx
    })
}

/// A domain's CHECK (`VALUE > 0`) planned over one column named `value` of the base type
/// (`catalog/domains.rs`), in the context index expressions are planned in; planned once
/// per (type, text) and kept: a cast to the domain checks every batch it casts.
pub(crate) fn domain_check_expr(schema: &Schema, text: &str) -> Result<Arc<dyn PhysicalExpr>> {
    type Cache =
        parking_lot::Mutex<std::collections::HashMap<(String, String), Arc<dyn PhysicalExpr>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let key = (
        format!("{:?}", schema.field(0).data_type()),
        text.to_owned(),
    );
    if let Some(e) = cache.lock().get(&key) {
        return Ok(e.clone());
    }
    let ctx = expression_context();
    let (expr, df_schema) = plan_table_expr(ctx, "domain", schema, text, "check constraint")?;
    let phys = ctx.create_physical_expr(expr, &df_schema)?;
    require_boolean(&phys, schema, "CHECK")?;
    let mut c = cache.lock();
    if c.len() > 1024 {
        c.clear();
    }
    c.insert(key, phys.clone());
    Ok(phys)
}

/// A domain's DEFAULT planned as the value of a column of its base type would be (no
/// columns to read): 42P17-like refusals of what cannot be planned, as at CREATE DOMAIN.
pub(crate) fn domain_default_check(base: &crate::sql::types::SqlType, text: &str) -> Result<()> {
    if matches!(base, crate::sql::types::SqlType::Enum(_)) {
        // (an enum is known to the catalog only: its labels are checked where it is used)
        return Ok(());
    }
    let schema = Schema::new(vec![base.field("value", true)]);
    // (the type without its modifiers: the value is fitted to the column's type where it
    // is written)
    let ty = crate::catalog::type_without_modifiers(base);
    let cast = format!("CAST(({text}) AS {ty})");
    plan_table_expr(
        expression_context(),
        "domain",
        &schema,
        &cast,
        "DEFAULT expression",
    )
    .map(|_| ())
}

/// One key of an index as the catalog keeps it: a column, or an expression's text.
pub enum KeyText<'a> {
    Column(&'a str),
    Expression(&'a str),
}

/// An expression or partial index's keys and predicate, planned over the table's columns
/// (what the table store computes its entries with).
#[derive(Debug)]
pub struct IndexExprs {
    /// Per key: the expression, and how an error's detail names it.
    keys: Vec<(Arc<dyn PhysicalExpr>, String)>,
    predicate: Option<Arc<dyn PhysicalExpr>>,
    /// The keys and predicate as written (what tells two indexes apart).
    definition: String,
}

impl IndexExprs {
    /// Plan an index's keys and predicate over table `table` of `schema`, each as a
    /// query's expression is (the same rewrites and semantics); refused as Postgres refuses
    /// them: a subquery 0A000, an aggregate or window function 42803, a function that is
    /// not immutable 42P17, a predicate that is not boolean 42804.
    pub fn plan(
        table: &str,
        schema: &Schema,
        keys: &[KeyText<'_>],
        predicate: Option<&str>,
    ) -> Result<IndexExprs> {
        let ctx = expression_context();
        let one = |text: &str, what: &str| -> Result<Arc<dyn PhysicalExpr>> {
            let (expr, df_schema) = plan_table_expr(ctx, table, schema, text, what)?;
            refuse_non_immutable(&expr, what)?;
            Ok(ctx.create_physical_expr(expr, &df_schema)?)
        };
        let mut planned = Vec::with_capacity(keys.len());
        let mut written = Vec::with_capacity(keys.len());
        for k in keys {
            let (text, shown) = match k {
                KeyText::Column(c) => (crate::sql::pg_text::quote_ident(c), c.to_string()),
                KeyText::Expression(e) => (e.to_string(), shown_key(e)),
            };
            written.push(text.clone());
            planned.push((one(&text, "index expression")?, shown));
        }
        let mut definition = written.join(", ");
        let predicate = match predicate {
            Some(p) => {
                let e = one(p, "index predicate")?;
                require_boolean(&e, schema, "WHERE")?;
                definition = format!("{definition} WHERE {p}");
                Some(e)
            }
            None => None,
        };
        Ok(IndexExprs {
            keys: planned,
            predicate,
            definition,
        })
    }
}

/// Postgres' 42P17 for a function that is not immutable in an index (`now()`, `random()`):
/// its entries would not be found again. Aggregates and window functions: 42803.
fn refuse_non_immutable(expr: &Expr, what: &str) -> Result<()> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    let mut err = None;
    expr.apply(|e| {
        match e {
            Expr::ScalarFunction(f) if f.func.signature().volatility != Volatility::Immutable => {
                err = Some(WeirError::new(
                    "42P17",
                    format!("functions in {what} must be marked IMMUTABLE"),
                ));
            }
            Expr::AggregateFunction(_) | Expr::WindowFunction(_) => {
                err = Some(WeirError::new(
                    sqlstate::GROUPING_ERROR,
                    format!("aggregate functions are not allowed in {what}s"),
                ));
            }
            _ => return Ok(TreeNodeRecursion::Continue),
        }
        Ok(TreeNodeRecursion::Stop)
    })?;
    err.map_or(Ok(()), Err)
}

impl DerivedKeys for IndexExprs {
    fn derive(&self, batch: &RecordBatch) -> Result<(Vec<ArrayRef>, Option<BooleanArray>)> {
        let n = batch.num_rows();
        let keys = self
            .keys
            .iter()
            .map(|(e, _)| Ok(e.evaluate(batch)?.into_array(n)?))
            .collect::<Result<Vec<_>>>()?;
        let holds = match &self.predicate {
            Some(p) => Some(p.evaluate(batch)?.into_array(n)?.as_boolean().clone()),
            None => None,
        };
        Ok((keys, holds))
    }

    fn key_names(&self) -> Vec<String> {
        self.keys.iter().map(|(_, t)| t.clone()).collect()
    }

    fn describe(&self) -> String {
        self.definition.clone()
    }
}

/// An expression key as Postgres shows it in an index's definition and a key's detail: a
/// function call as it is (`lower(email)`), another expression in parentheses
/// (`(n * 2)`).
pub fn shown_key(text: &str) -> String {
    match crate::sql::parser::parse_expr_text(text) {
        Ok(datafusion::sql::sqlparser::ast::Expr::Function(_)) => text.to_owned(),
        _ => format!("({text})"),
    }
}

/// Postgres' 42804 for a condition (a CHECK's, a partial index's `WHERE`) that is not
/// boolean: `argument of WHERE must be type boolean, not type integer`.
pub(crate) fn require_boolean(
    e: &Arc<dyn PhysicalExpr>,
    schema: &Schema,
    what: &str,
) -> Result<()> {
    let t = e.data_type(schema)?;
    if t == DataType::Boolean {
        return Ok(());
    }
    let shown = crate::sql::types::SqlType::from_arrow(&t)
        .map(|t| t.display_name())
        .unwrap_or_else(|| t.to_string());
    Err(WeirError::new(
        sqlstate::DATATYPE_MISMATCH,
        format!("argument of {what} must be type boolean, not type {shown}"),
    ))
}
