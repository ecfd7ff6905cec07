//! Stored generated columns (`b int GENERATED ALWAYS AS (a * 2) STORED`, in CREATE TABLE
//! and ALTER TABLE ... ADD COLUMN): the expression is kept as text in the table's
//! `RelationDesc::generated` and computed, over the row's other columns, on every row an
//! INSERT, UPDATE, upsert, MERGE or COPY writes (`Engine::apply_change`, before the CHECKs,
//! which see the computed value; a DML statement computes them once itself, before
//! RETURNING and ON CONFLICT's EXCLUDED read them, and applies the change through
//! `apply_filled_change`), so the stored row, its changelog for the views and RETURNING all
//! carry it; a row ON CONFLICT DO UPDATE changes computes them again. Whatever value a write brought for the column is replaced; the
//! statements refuse one that is not DEFAULT (428C9, as Postgres: `fill_defaults`, UPDATE's
//! assignments, COPY's column list).
//!
//! The expression means what it would in a query (`catalog::table_exprs::plan_table_expr`: the same
//! rewrites and Postgres-semantics rule as CHECKs), cast to the column's type as an
//! assignment is. Refused as Postgres refuses them, when the table is created: a reference
//! to another generated column (42P17), a function that is not immutable (42P17: `now()`,
//! `random()`), an aggregate (42803) or window function (42P20), a subquery (0A000).
//! Connector tables take none (their rows arrive without a statement).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::Schema;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::{Expr, Volatility, cast};
use datafusion::physical_expr::PhysicalExpr;

use crate::catalog::{ColumnDesc, RelationDesc};
use crate::error::{Result, WeirError, sqlstate};
use crate::state::table::Change;

/// The generated columns of a table with these columns, planned: (column position, the
/// expression typed as the column). Refuses what Postgres refuses in a generation
/// expression.
pub(crate) fn compile(
    ctx: &SessionContext,
    table: &str,
    columns: &[ColumnDesc],
    generated: &[(String, String)],
) -> Result<Vec<(usize, Arc<dyn PhysicalExpr>)>> {
    let schema = Schema::new(
        columns
            .iter()
            .map(|c| c.ty.field(&c.name, true))
            .collect::<Vec<_>>(),
    );
    generated
        .iter()
        .map(|(column, text)| {
            let Some(at) = columns.iter().position(|c| &c.name == column) else {
                return Err(WeirError::internal(format!(
                    "generated column \"{column}\" is not a column of \"{table}\""
                )));
            };
            for (other, _) in generated {
                if crate::catalog::pg_catalog::check_reads(text, other) {
                    return Err(WeirError::new(
                        sqlstate::INVALID_OBJECT_DEFINITION,
                        format!("cannot use generated column \"{other}\" in column generation expression"),
                    )
                    .with_detail("A generated column cannot reference another generated column."));
                }
            }
            let (expr, df_schema) = crate::catalog::table_exprs::plan_table_expr(
                ctx,
                table,
                &schema,
                text,
                "column generation expression",
            )?;
            refuse_unfit(&expr)?;
            let typed = cast(expr, columns[at].ty.arrow_type());
            Ok((at, ctx.create_physical_expr(typed, &df_schema)?))
        })
        .collect()
}

/// What a generation expression may not hold: aggregates, window functions, functions
/// that are not immutable.
fn refuse_unfit(expr: &Expr) -> Result<()> {
    let mut found: Option<WeirError> = None;
    expr.apply(|e| {
        found = match e {
            Expr::AggregateFunction(_) => Some(WeirError::new(
                sqlstate::GROUPING_ERROR,
                "aggregate functions are not allowed in column generation expressions",
            )),
            Expr::WindowFunction(_) => Some(WeirError::new(
                sqlstate::WINDOWING_ERROR,
                "window functions are not allowed in column generation expressions",
            )),
            Expr::ScalarFunction(f) if f.func.signature().volatility != Volatility::Immutable => {
                Some(WeirError::new(
                    sqlstate::INVALID_OBJECT_DEFINITION,
                    "generation expression is not immutable",
                ))
            }
            _ => None,
        };
        Ok(match found {
            Some(_) => TreeNodeRecursion::Stop,
            None => TreeNodeRecursion::Continue,
        })
    })?;
    match found {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `batch` (rows of the table, in its column order) with its generated columns computed.
fn fill_batch(
    planned: &[(usize, Arc<dyn PhysicalExpr>)],
    batch: &RecordBatch,
) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    for (at, expr) in planned {
        // every expression reads the row as written (none reads another generated column)
        columns[*at] = expr.evaluate(batch)?.into_array(n)?;
    }
    Ok(RecordBatch::try_new(batch.schema(), columns)?)
}

/// Rows a statement writes, with the table's generated columns computed (unchanged for a
/// table without any).
pub(crate) fn fill_rows(
    ctx: &SessionContext,
    desc: &RelationDesc,
    batches: Vec<RecordBatch>,
) -> Result<Vec<RecordBatch>> {
    if desc.generated.is_empty() {
        return Ok(batches);
    }
    let planned = compile(ctx, &desc.name, &desc.columns, &desc.generated)?;
    batches.iter().map(|b| fill_batch(&planned, b)).collect()
}

/// A change with the rows it writes (inserted rows, rows after an update, upserted rows)
/// carrying their generated columns' values.
pub(crate) fn fill_change(
    ctx: &SessionContext,
    desc: &RelationDesc,
    change: Change,
) -> Result<Change> {
    if desc.generated.is_empty() {
        return Ok(change);
    }
    let planned = compile(ctx, &desc.name, &desc.columns, &desc.generated)?;
    let fill = |bs: Vec<RecordBatch>| -> Result<Vec<RecordBatch>> {
        bs.iter().map(|b| fill_batch(&planned, b)).collect()
    };
    Ok(match change {
        Change::Insert(b) => Change::Insert(fill(b)?),
        Change::Update { old, new } => Change::Update {
            old,
            new: fill(new)?,
        },
        Change::Upsert {
            upserts,
            deletes,
            order,
        } => Change::Upsert {
            upserts: fill_batch(&planned, &upserts)?,
            deletes,
            order,
        },
        other => other,
    })
}

/// Postgres' refusal of a value other than DEFAULT written to a generated column.
pub(crate) fn not_default_error(column: &str, update: bool) -> WeirError {
    let message = match update {
        true => format!("column \"{column}\" can only be updated to DEFAULT"),
        false => format!("cannot insert a non-DEFAULT value into column \"{column}\""),
    };
    WeirError::new(sqlstate::GENERATED_ALWAYS, message)
        .with_detail(format!("Column \"{column}\" is a generated column."))
}
