//! `CREATE [UNIQUE] INDEX [IF NOT EXISTS] [name] ON table (columns)` and `DROP INDEX [IF
//! EXISTS] name, ...`.
//!
//! A key may be an expression (`lower(email)`) and an index of a table may be partial
//! (`WHERE NOT deleted`): planned over the table's columns by `catalog::table_exprs` (only
//! immutable functions), kept by the table store like a column index's entries (a row the
//! predicate does not hold has none), so a UNIQUE one refuses duplicates among the rows
//! it holds. Point queries, ON CONFLICT targets and foreign keys use column indexes only.
//!
//! The index is built by the table store (`state/table_index.rs`) under the table's writer
//! lock, so no change slips between the build and the first change it keeps; the catalog
//! then lists it in one commit. Point queries (`col = v`, `col IN (...)` on the leading
//! indexed columns) read it instead of the table (`serving.rs`). An index of a materialized
//! view is kept in the view's contents by the dataflow (`ZSet::set_indexes`), built when
//! it is created and whenever the view starts; a query that reads that one view looks it
//! up (a query over several views reads them all at one epoch, by scanning).

use crate::catalog::{IndexDesc, RelationKind};
use crate::engine::{Engine, Output, lock_writer};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::CreateIndex;
use crate::state::table_index::IndexSpec;
use tokio::sync::mpsc::UnboundedSender;

impl Engine {
    pub(crate) async fn create_index(
        &self,
        session: &Session,
        ci: &CreateIndex,
        notices: Option<&UnboundedSender<String>>,
    ) -> Result<Output> {
        let done = || Ok(Output::Command("CREATE INDEX".into()));
        let Some(entry) = self.catalog.get(&ci.table) else {
            return Err(WeirError::undefined_table(&ci.table));
        };
        let view = entry.desc.kind == RelationKind::MaterializedView;
        match entry.desc.kind {
            RelationKind::Table | RelationKind::AppendOnlyTable => {}
            RelationKind::MaterializedView if ci.unique => {
                return Err(WeirError::not_supported(format!(
                    "UNIQUE indexes on materialized view \"{}\" are not supported",
                    ci.table
                ))
                .with_hint("A view's rows are what its query gives; nothing can be refused."));
            }
            RelationKind::MaterializedView
                if !ci.expressions.is_empty() || ci.predicate.is_some() =>
            {
                return Err(WeirError::not_supported(format!(
                    "expression and partial indexes on materialized view \"{}\" are not supported",
                    ci.table
                ))
                .with_hint(
                    "Compute the expression, or filter, in the view's query and index its column.",
                ));
            }
            RelationKind::MaterializedView => {}
            other => {
                return Err(WeirError::new(
                    sqlstate::WRONG_OBJECT_TYPE,
                    format!("cannot create index on {} \"{}\"", other.noun(), ci.table),
                ));
            }
        }
        let mut positions = Vec::with_capacity(ci.columns.len());
        for (k, c) in ci.columns.iter().enumerate() {
            if matches!(ci.expressions.get(k), Some(Some(_))) {
                continue;
            }
            let Some(p) = entry.desc.columns.iter().position(|d| &d.name == c) else {
                return Err(WeirError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!("column \"{c}\" does not exist"),
                ));
            };
            positions.push(p);
        }
        let name = match &ci.name {
            Some(n) => {
                if self
                    .catalog
                    .name_in_use(&crate::sql::parser::sibling_key(&ci.table, n))
                {
                    if ci.if_not_exists {
                        if let Some(p) = notices {
                            let _ = p.send(format!("relation \"{n}\" already exists, skipping"));
                        }
                        return done();
                    }
                    return Err(WeirError::new(
                        sqlstate::DUPLICATE_TABLE,
                        format!("relation \"{n}\" already exists"),
                    ));
                }
                n.clone()
            }
            // Postgres' choice: table_columns_idx (an expression key named by its function,
            // or `expr`), then with 1, 2, ... until free
            None => {
                let keys: Vec<String> = ci
                    .columns
                    .iter()
                    .enumerate()
                    .map(|(k, c)| match ci.expressions.get(k) {
                        Some(Some(e)) => expression_key_name(e),
                        _ => c.clone(),
                    })
                    .collect();
                crate::sql::parser::free_name(
                    &format!(
                        "{}_{}_idx",
                        crate::sql::parser::bare_relation_name(&ci.table),
                        keys.join("_")
                    ),
                    |n| {
                        self.catalog
                            .name_in_use(&crate::sql::parser::sibling_key(&ci.table, n))
                    },
                )
            }
        };
        if view {
            // kept in the view's contents by the dataflow, built there now
            let oid = self.catalog.reserve_oid();
            let mut specs = Vec::new();
            self.catalog.alter_relation(&ci.table, |d| {
                d.indexes.push(IndexDesc {
                    oid,
                    name: name.clone(),
                    columns: ci.columns.clone(),
                    expressions: Vec::new(),
                    predicate: None,
                    unique: false,
                    constraint: false,
                    nulls_not_distinct: false,
                });
                specs = d.index_specs()?;
                Ok(())
            })?;
            self.dataflow.set_view_indexes(entry.desc.oid, specs)?;
            tracing::info!(index = %name, view = %ci.table, "created index");
            return done();
        }
        let table = entry
            .table
            .clone()
            .ok_or_else(|| WeirError::internal("a table without storage"))?;
        let _writer = lock_writer(session, &table).await?;
        let oid = self.catalog.reserve_oid();
        let desc = IndexDesc {
            oid,
            name: name.clone(),
            columns: ci.columns.clone(),
            expressions: ci.expressions.clone(),
            predicate: ci.predicate.clone(),
            unique: ci.unique,
            constraint: ci.constraint,
            nulls_not_distinct: ci.nulls_not_distinct,
        };
        let spec = match desc.derived() {
            // keys and predicate planned as the catalog plans them when it opens the table
            true => entry.desc.index_spec(&desc)?,
            false => IndexSpec {
                oid,
                name: name.clone(),
                columns: positions,
                unique: ci.unique,
                nulls_not_distinct: ci.nulls_not_distinct,
                derived: None,
            },
        };
        let t = table.clone();
        tokio::task::spawn_blocking(move || t.create_index(spec))
            .await
            .map_err(|e| WeirError::internal(e.to_string()))??;
        let listed = self.catalog.alter_relation(&ci.table, |d| {
            if d.oid != entry.desc.oid {
                return Err(WeirError::new(
                    "55006",
                    format!("table \"{}\" changed while its index was built", ci.table),
                ));
            }
            d.indexes.push(desc);
            Ok(())
        });
        if let Err(e) = listed {
            let t = table.clone();
            let _ = tokio::task::spawn_blocking(move || t.drop_index(oid)).await;
            return Err(e);
        }
        tracing::info!(index = %name, table = %ci.table, "created index");
        done()
    }

    pub(crate) async fn drop_indexes(
        &self,
        session: &Session,
        names: &[String],
        if_exists: bool,
        notices: Option<&UnboundedSender<String>>,
    ) -> Result<Output> {
        let mut targets = Vec::new();
        for n in names {
            match self.catalog.index_by_name(n) {
                None if if_exists => {
                    if let Some(p) = notices {
                        let _ = p.send(format!("index \"{n}\" does not exist, skipping"));
                    }
                }
                None => {
                    return Err(WeirError::new(
                        sqlstate::UNDEFINED_OBJECT,
                        format!("index \"{n}\" does not exist"),
                    ));
                }
                Some((entry, ix)) if ix.primary => {
                    return Err(WeirError::new(
                        sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                        format!(
                            "cannot drop index {n} because constraint {n} on table {} requires it",
                            entry.desc.name
                        ),
                    )
                    .with_hint(format!(
                        "You can drop constraint {n} on table {} instead.",
                        entry.desc.name
                    )));
                }
                Some((entry, ix)) => targets.push((entry, ix)),
            }
        }
        for (entry, ix) in targets {
            let Some(table) = entry.table.clone() else {
                // a materialized view's index: its contents stop keeping it
                let mut specs = Vec::new();
                self.catalog.alter_relation(&entry.desc.name, |d| {
                    d.indexes.retain(|i| i.oid != ix.oid);
                    specs = d.index_specs()?;
                    Ok(())
                })?;
                self.dataflow.set_view_indexes(entry.desc.oid, specs)?;
                continue;
            };
            let _writer = lock_writer(session, &table).await?;
            self.catalog.alter_relation(&entry.desc.name, |d| {
                d.indexes.retain(|i| i.oid != ix.oid);
                Ok(())
            })?;
            let oid = ix.oid;
            tokio::task::spawn_blocking(move || table.drop_index(oid))
                .await
                .map_err(|e| WeirError::internal(e.to_string()))??;
        }
        Ok(Output::Command("DROP INDEX".into()))
    }
}

/// How Postgres names an expression key in a default index name: the function's name for a
/// call (`lower(email)`: `lower`), `expr` otherwise.
fn expression_key_name(text: &str) -> String {
    match crate::sql::parser::parse_expr_text(text) {
        Ok(datafusion::sql::sqlparser::ast::Expr::Function(f)) => f
            .name
            .0
            .last()
            .map(|p| p.to_string().trim_matches('"').to_lowercase())
            .unwrap_or_else(|| "expr".into()),
        _ => "expr".into(),
    }
}
