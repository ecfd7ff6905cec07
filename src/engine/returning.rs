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
        let sql = format!("SELECT {} FROM {}", items.join(", "), r.relation);
        let q = crate::sql::parser::parse_query(&sql)?;
        self.plan_ast(session, &ast::Statement::Query(q)).await
    }

    /// The RETURNING rows over the rows a statement wrote.
    pub(crate) async fn returning_rows(
        &self,
        session: &Session,
        r: &Returning,
        written: Vec<RecordBatch>,
    ) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let plan = self.returning_plan(session, r).await?;
        let table = r.table.as_str();
        let mut found = false;
        let plan = plan
            .transform_up(|p| {
                let LogicalPlan::TableScan(scan) = &p else {
                    return Ok(Transformed::no(p));
                };
                if found || scan.table_name.table() != table {
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
