//! INSERT / UPDATE / DELETE: DataFusion plans the statement (coercions, defaults, the
//! WHERE clause); we run the plan's input to get the rows and hand them to the table store
//! as a [`Change`]. For UPDATE the projection is widened so each output row carries both the
//! old row and the new one, which the store needs to retract the old and check keys.

use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Column;
use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{DmlStatement, Expr, LogicalPlan, LogicalPlanBuilder, WriteOp};

use crate::error::{Result, WeirError};
use crate::state::table::{Change, TableStore};

async fn collect(ctx: &SessionContext, plan: LogicalPlan) -> Result<Vec<RecordBatch>> {
    let df = ctx.execute_logical_plan(plan).await?;
    Ok(df.collect().await?)
}

/// Columns of the target table in the plan's output (they come first: DataFusion plans the
/// target before any FROM/USING relation).
fn target_columns(plan: &LogicalPlan, table: &TableStore) -> Result<Vec<Expr>> {
    let schema = plan.schema();
    let want = table.schema();
    if schema.fields().len() < want.fields().len() {
        return Err(WeirError::internal("DML input lacks the target's columns"));
    }
    want.fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (q, field) = schema.qualified_field(i);
            if field.name() != f.name() {
                return Err(WeirError::internal(format!(
                    "DML input column {i} is {}, expected {}",
                    field.name(),
                    f.name()
                )));
            }
            Ok(Expr::Column(Column::new(q.cloned(), field.name())))
        })
        .collect()
}

pub async fn plan_change(
    ctx: &SessionContext,
    dml: &DmlStatement,
    table: &Arc<TableStore>,
) -> Result<Change> {
    match &dml.op {
        WriteOp::Insert(InsertOp::Append) => {
            let batches = collect(ctx, (*dml.input).clone()).await?;
            Ok(Change::Insert(batches))
        }
        WriteOp::Insert(other) => Err(WeirError::not_supported(format!(
            "INSERT mode {other} is not supported"
        ))),
        WriteOp::Delete => {
            let input = (*dml.input).clone();
            let cols = target_columns(&input, table)?;
            let plan = LogicalPlanBuilder::from(input).project(cols)?.build()?;
            Ok(Change::Delete(collect(ctx, plan).await?))
        }
        WriteOp::Update => {
            let LogicalPlan::Projection(proj) = dml.input.as_ref() else {
                return Err(WeirError::internal("UPDATE input is not a projection"));
            };
            let source = (*proj.input).clone();
            let n = table.schema().fields().len();
            let mut exprs = target_columns(&source, table)?;
            for (i, e) in proj.expr.iter().enumerate() {
                let inner = match e {
                    Expr::Alias(a) => (*a.expr).clone(),
                    other => other.clone(),
                };
                exprs.push(inner.alias(format!("__weir_new_{i}")));
            }
            let plan = LogicalPlanBuilder::from(source).project(exprs)?.build()?;
            let batches = collect(ctx, plan).await?;
            let schema = table.schema();
            let mut old = Vec::with_capacity(batches.len());
            let mut new = Vec::with_capacity(batches.len());
            for b in batches {
                old.push(RecordBatch::try_new(
                    schema.clone(),
                    b.columns()[..n].to_vec(),
                )?);
                new.push(RecordBatch::try_new_with_options(
                    strip_nullability(&schema),
                    b.columns()[n..].to_vec(),
                    &Default::default(),
                )?);
            }
            Ok(Change::Update { old, new })
        }
        other => Err(WeirError::not_supported(format!(
            "{other} is not supported"
        ))),
    }
}

/// New values may hold NULLs in NOT NULL columns until the store checks them and refuses
/// with 23502, so carry them in a schema that allows nulls.
fn strip_nullability(
    schema: &datafusion::arrow::datatypes::SchemaRef,
) -> datafusion::arrow::datatypes::SchemaRef {
    Arc::new(datafusion::arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}
