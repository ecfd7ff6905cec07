//! `INSERT/UPDATE/DELETE ... RETURNING items`: the statement runs without its RETURNING
//! list, and the list is then evaluated as `SELECT items FROM table [AS alias]` over the rows
//! the statement wrote (inserted rows, rows after an update, deleted rows) instead of the
//! table: the same plan Describe shows, so names and types agree.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::MemTable;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::datasource::provider_as_source;
use datafusion::logical_expr::{LogicalPlan, TableScanBuilder};
use datafusion::sql::sqlparser::ast;

use crate::engine::Engine;
use crate::error::{Result, WeirError};
use crate::server::session::Session;

/// A RETURNING list and the relation (with its alias) it reads.
pub struct Returning {
    items: Vec<ast::SelectItem>,
    relation: String,
    table: String,
    /// The list reads the system column `xmax` (`RETURNING (xmax = 0) AS inserted`, the
    /// upsert idiom): 0 for a row the statement inserted, non-zero for one an upsert wrote
    /// over a stored row (Postgres: the updating transaction's id).
    reads_xmax: bool,
}

/// Whether select items read a column named `xmax`.
fn reads_xmax(items: &[ast::SelectItem]) -> bool {
    let mut found = false;
    for item in items {
        let _ = ast::visit_expressions(item, |e| {
            found |= match e {
                ast::Expr::Identifier(i) => crate::sql::parser::normalize_ident(i) == "xmax",
                ast::Expr::CompoundIdentifier(ids) => ids
                    .last()
                    .is_some_and(|i| crate::sql::parser::normalize_ident(i) == "xmax"),
                _ => false,
            };
            std::ops::ControlFlow::<()>::Continue(())
        });
    }
    found
}

/// Take the RETURNING list off a DML statement.
pub fn take_returning(stmt: &mut ast::Statement) -> Option<Returning> {
    let (items, relation) = match stmt {
        ast::Statement::Insert(ins) => {
            let items = ins.returning.take()?;
            let alias = ins
                .table_alias
                .as_ref()
                .map(|a| format!(" AS {}", a.alias))
                .unwrap_or_default();
            (items, format!("{}{alias}", ins.table))
        }
        ast::Statement::Update(u) => (u.returning.take()?, u.table.relation.to_string()),
        ast::Statement::Delete(d) => {
            let items = d.returning.take()?;
            let from = match &d.from {
                ast::FromTable::WithFromKeyword(t) | ast::FromTable::WithoutKeyword(t) => t,
            };
            (items, from.first()?.relation.to_string())
        }
        _ => return None,
    };
    let table = match stmt {
        ast::Statement::Insert(ins) => match &ins.table {
            ast::TableObject::TableName(n) => crate::sql::parser::relation_name(n).ok(),
            _ => None,
        },
        ast::Statement::Update(u) => match &u.table.relation {
            ast::TableFactor::Table { name, .. } => crate::sql::parser::relation_name(name).ok(),
            _ => None,
        },
        ast::Statement::Delete(d) => match &d.from {
            ast::FromTable::WithFromKeyword(t) | ast::FromTable::WithoutKeyword(t) => {
                match t.first().map(|t| &t.relation) {
                    Some(ast::TableFactor::Table { name, .. }) => {
                        crate::sql::parser::relation_name(name).ok()
                    }
                    _ => None,
                }
            }
        },
        _ => None,
    }?;
    Some(Returning {
        reads_xmax: reads_xmax(&items),
        items,
        relation,
        table,
    })
}

/// Whether a DML statement has a RETURNING list.
pub fn has_returning(stmt: &ast::Statement) -> bool {
    match stmt {
        ast::Statement::Insert(i) => i.returning.is_some(),
        ast::Statement::Update(u) => u.returning.is_some(),
        ast::Statement::Delete(d) => d.returning.is_some(),
        _ => false,
    }
}

impl Engine {
    /// `SELECT items FROM relation`, planned as a query.
    pub(crate) async fn returning_plan(
        &self,
        session: &Session,
        r: &Returning,
    ) -> Result<LogicalPlan> {
        let items: Vec<String> = r.items.iter().map(|i| i.to_string()).collect();
        // (`xmax` read from a derived table that adds it to the table's columns; the rows
        // written replace that derived table's own select: `returning_rows`)
        let relation = match r.reads_xmax {
            false => r.relation.clone(),
            true => {
                let alias = r
                    .relation
                    .rsplit_once(" AS ")
                    .map_or(r.relation.as_str(), |(_, a)| a);
                format!(
                    "(SELECT *, CAST(0 AS BIGINT) AS xmax FROM {}) AS {alias}",
                    crate::sql::pg_text::quote_ident(&r.table)
                )
            }
        };
        let sql = format!("SELECT {} FROM {relation}", items.join(", "));
        let q = crate::sql::parser::parse_query(&sql)?;
        self.plan_ast(session, &ast::Statement::Query(q)).await
    }

    /// The RETURNING rows over the rows a statement wrote.
    pub(crate) async fn returning_rows(
        &self,
        session: &Session,
        r: &Returning,
        written: Vec<RecordBatch>,
        updated_rows: &[bool],
    ) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let plan = self.returning_plan(session, r).await?;
        let table = r.table.as_str();
        let mut found = false;
        let plan = plan
            .transform_up(|p| {
                // `xmax`: the derived table's select over the table becomes the written
                // rows with their xmax (0 inserted, 1 written over a stored row)
                if r.reads_xmax
                    && let LogicalPlan::Projection(proj) = &p
                    && let LogicalPlan::TableScan(scan) = proj.input.as_ref()
                    && crate::sql::parser::reference_key(&scan.table_name) == table
                    && !found
                {
                    found = true;
                    let schema: SchemaRef = Arc::new(proj.schema.as_arrow().clone());
                    let mut at = 0usize;
                    let mut batches = Vec::with_capacity(written.len());
                    for b in &written {
                        let n = b.num_rows();
                        let xmax: Vec<i64> = (at..at + n)
                            .map(|i| i64::from(updated_rows.get(i).copied().unwrap_or(false)))
                            .collect();
                        at += n;
                        let mut cols = b.columns().to_vec();
                        cols.push(Arc::new(datafusion::arrow::array::Int64Array::from(xmax)));
                        batches.push(RecordBatch::try_new(schema.clone(), cols)?);
                    }
                    let mem = MemTable::try_new(schema, vec![batches])?;
                    let new = TableScanBuilder::new(
                        scan.table_name.clone(),
                        provider_as_source(Arc::new(mem)),
                    )
                    .build()?;
                    return Ok(Transformed::yes(LogicalPlan::TableScan(new)));
                }
                let LogicalPlan::TableScan(scan) = &p else {
                    return Ok(Transformed::no(p));
                };
                if found
                    || r.reads_xmax
                    || crate::sql::parser::reference_key(&scan.table_name) != table
                {
                    return Ok(Transformed::no(p));
                }
                found = true;
                let schema = scan.source.schema();
                let batches = written
                    .iter()
                    .map(|b| RecordBatch::try_new(schema.clone(), b.columns().to_vec()))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let mem = MemTable::try_new(schema, vec![batches])?;
                let new = TableScanBuilder::new(
                    scan.table_name.clone(),
                    provider_as_source(Arc::new(mem)),
                )
                .with_projection(scan.projection.clone())
                .with_filters(scan.filters.clone())
                .with_fetch(scan.fetch)
                .build()?;
                Ok(Transformed::yes(LogicalPlan::TableScan(new)))
            })?
            .data;
        if !found {
            return Err(WeirError::internal("RETURNING did not read its table"));
        }
        let schema = self.result_schema(&plan);
        let batches = crate::engine::collect_plan(session, plan).await?;
        Ok((schema, batches))
    }
}
