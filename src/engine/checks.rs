//! Tables' CHECK constraints (`CREATE TABLE t (n int CHECK (n > 0), CHECK (a < b))`):
//! each is an expression over the table's columns, stored as text in the table's
//! `RelationDesc::checks` and checked on every row an INSERT, UPDATE, upsert or COPY writes
//! (`Engine::apply_change`), before anything is written: a row for which it is false (not
//! NULL: NULL passes, as in Postgres) fails the statement with 23514 and Postgres' message
//! and detail. Rows a connector table receives are not checked (such tables refuse CHECK).
//! An expression means what it would in a query: it goes through the same syntax rewrites
//! (`catalog::rewrite`) and Postgres-semantics rule (`catalog::pg_semantics`) before it is
//! planned, so intervals compare normalized, integer arithmetic overflows with 22003, and
//! `SIMILAR TO` and `BETWEEN SYMMETRIC` are Postgres'.

use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Schema;
use datafusion::execution::context::SessionContext;
use datafusion::physical_expr::PhysicalExpr;

use crate::catalog::RelationDesc;
use crate::error::{Result, WeirError};

const CHECK_VIOLATION: &str = "23514";

/// The constraints planned over the table's columns; an expression that does not plan, is
/// not boolean or reads a subquery is refused as Postgres refuses it.
pub(crate) fn compile(
    ctx: &SessionContext,
    table: &str,
    schema: &Schema,
    checks: &[(String, String)],
) -> Result<Vec<(String, Arc<dyn PhysicalExpr>)>> {
    checks
        .iter()
        .map(|(name, text)| {
            let (expr, df_schema) = crate::catalog::table_exprs::plan_table_expr(
                ctx,
                table,
                schema,
                text,
                "check constraint",
            )?;
            let phys = ctx.create_physical_expr(expr, &df_schema)?;
            crate::catalog::table_exprs::require_boolean(&phys, schema, "CHECK")?;
            Ok((name.clone(), phys))
        })
        .collect()
}

/// Every row of `batches` (rows of the table, in its column order) against the table's
/// constraints: its domain columns' domains first (Postgres checks a value against its
/// domain as it computes the row), then NOT NULL, then the CHECKs.
pub(crate) fn enforce(
    ctx: &SessionContext,
    catalog: &crate::catalog::Catalog,
    desc: &RelationDesc,
    batches: &[&RecordBatch],
) -> Result<()> {
    if !desc.domains.is_empty() {
        for (i, d) in catalog.column_domains(desc).iter().enumerate() {
            let Some(d) = d else { continue };
            for batch in batches {
                if let Some(values) = batch.columns().get(i) {
                    crate::catalog::domains::check_values(d, values)?;
                }
            }
        }
    }
    if desc.checks.is_empty() {
        return Ok(());
    }
    let schema = desc.schema();
    // NOT NULL is reported before any CHECK, as in Postgres (the store checks it again)
    for batch in batches {
        crate::state::table::check_not_null(&desc.name, &schema, batch.columns())?;
    }
    for (name, check) in compile(ctx, &desc.name, &schema, &desc.checks)? {
        for batch in batches {
            let n = batch.num_rows();
            if n == 0 {
                continue;
            }
            let result = check.evaluate(batch)?.into_array(n)?;
            let Some(ok) = result.as_boolean_opt() else {
                continue;
            };
            if let Some(row) = (0..n).find(|&i| ok.is_valid(i) && !ok.value(i)) {
                return Err(WeirError::new(
                    CHECK_VIOLATION,
                    format!(
                        "new row for relation \"{}\" violates check constraint \"{name}\"",
                        crate::sql::parser::bare_relation_name(&desc.name)
                    ),
                )
                .with_detail(format!("Failing row contains ({}).", row_text(batch, row))));
            }
        }
    }
    Ok(())
}

/// A row as Postgres' record output writes it in a constraint's detail: each value's text,
/// `null` for NULL.
fn row_text(batch: &RecordBatch, row: usize) -> String {
    crate::sql::pg_text::row_values_text(batch.columns(), row)
}
