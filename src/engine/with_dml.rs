//! `WITH` and statements that change data, as Postgres runs them:
//!
//! - `WITH q AS (query) INSERT INTO t ...`: the WITH is the INSERT's source's;
//! - `WITH d AS (DELETE | UPDATE | INSERT ... RETURNING ...) <statement>` (a data-modifying
//!   WITH query): each such query runs once, in order, before the statement, and its
//!   RETURNING rows become its WITH query's rows (a `SELECT` of them as constants), which
//!   the queries after it and the statement read;
//! - `WITH ... UPDATE | DELETE ...`: the WITH queries the statement names are run first and
//!   read as their rows.
//!
//! The whole statement is one change: a failure in any part undoes the parts before it
//! (the session's undo log, as MERGE does). Differences from Postgres: the statement sees
//! the data-modifying queries' changes (Postgres' statement reads the snapshot from before
//! them); a data-modifying WITH query that nothing reads still runs (as in Postgres).

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::arrow::array::Array;
use datafusion::arrow::datatypes::{FieldRef, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::sql::sqlparser::ast;

use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::normalize_ident;
use crate::sql::pg_text::quote_ident;

/// Whether `stmt` is a WITH that [`Engine::run_with_dml`] runs: its statement or one of its
/// queries changes data.
pub fn applies(stmt: &ast::Statement) -> bool {
    let ast::Statement::Query(q) = stmt else {
        return false;
    };
    let Some(with) = &q.with else {
        return false;
    };
    dml_of(&q.body).is_some()
        || with
            .cte_tables
            .iter()
            .any(|c| dml_of(&c.query.body).is_some())
}

/// A data-modifying WITH's statement (without its WITH) and its WITH.
fn split_with(stmt: &ast::Statement) -> Result<(Box<ast::Query>, ast::With)> {
    let ast::Statement::Query(q) = stmt else {
        return Err(WeirError::internal(
            "a data-modifying WITH that is not a query",
        ));
    };
    let mut q = q.clone();
    let with = q
        .with
        .take()
        .ok_or_else(|| WeirError::internal("a data-modifying WITH without its WITH"))?;
    Ok((q, with))
}

/// Parameter types found by planning another part: the first part that types `$n` types it.
fn merge_params(into: &mut Vec<Option<FieldRef>>, more: Vec<Option<FieldRef>>) {
    if into.len() < more.len() {
        into.resize(more.len(), None);
    }
    for (at, t) in more.into_iter().enumerate() {
        if into[at].is_none() {
            into[at] = t;
        }
    }
}

/// Whether `stmt` reads a relation of this (unqualified) name.
fn reads(stmt: &ast::Statement, name: &str) -> bool {
    unqualified_relations(stmt).contains(name)
}

/// The relations `stmt` names without a schema (the names a WITH query can have).
fn unqualified_relations(stmt: &ast::Statement) -> HashSet<String> {
    let mut out = HashSet::new();
    let _ = ast::visit_relations(stmt, |r| {
        if let [part] = r.0.as_slice()
            && let Some(i) = part.as_ident()
        {
            out.insert(normalize_ident(i));
        }
        ControlFlow::<()>::Continue(())
    });
    out
}

/// The data-modifying statement a query body is, if it is one.
fn dml_of(body: &ast::SetExpr) -> Option<&ast::Statement> {
    match body {
        ast::SetExpr::Insert(s) | ast::SetExpr::Update(s) | ast::SetExpr::Delete(s) => Some(s),
        _ => None,
    }
}

impl Engine {
    pub(crate) async fn run_with_dml(
        &self,
        session: &mut Session,
        stmt: &ast::Statement,
        params: Option<ParamValues>,
    ) -> Result<Output> {
        // applied as one statement: undone together if one part fails
        let mark = session.undo.len();
        let was_implicit = session.implicit_transaction;
        session.implicit_transaction = true;
        let result = self.with_dml_parts(session, stmt, params).await;
        session.implicit_transaction = was_implicit;
        let keep = session.in_transaction || was_implicit;
        match result {
            Err(e) => {
                self.rollback_until(session, mark).await?;
                Err(e)
            }
            Ok(out) => {
                if !keep {
                    session.undo.truncate(mark);
                }
                Ok(out)
            }
        }
    }

    async fn with_dml_parts(
        &self,
        session: &mut Session,
        stmt: &ast::Statement,
        params: Option<ParamValues>,
    ) -> Result<Output> {
        let (mut q, mut with) = split_with(stmt)?;
        if with.recursive {
            return Err(WeirError::not_supported(
                "WITH RECURSIVE with a data-modifying statement is not supported",
            ));
        }
        // each data-modifying query, in order: run, its rows its query's (one without
        // RETURNING runs for its change alone, and nothing may read it)
        let mut silent = Vec::new();
        for i in 0..with.cte_tables.len() {
            let Some(dml) = dml_of(&with.cte_tables[i].query.body).cloned() else {
                continue;
            };
            let name = normalize_ident(&with.cte_tables[i].alias.name);
            let earlier = &with.cte_tables[..i];
            let dml = self.reading_ctes(session, &dml, earlier).await?;
            if !super::returning::has_returning(&dml) {
                let mut rest = with.clone();
                rest.cte_tables.remove(i);
                let rest = ast::Query {
                    with: Some(rest),
                    ..(*q).clone()
                };
                if reads(&ast::Statement::Query(Box::new(rest)), &name) {
                    return Err(WeirError::not_supported(format!(
                        "WITH query \"{name}\" does not have a RETURNING clause"
                    )));
                }
                Box::pin(self.execute_dml_fitted(session, &dml, params.clone())).await?;
                silent.push(i);
                continue;
            }
            let out = Box::pin(self.execute_dml_fitted(session, &dml, params.clone())).await?;
            let (schema, batches) = match out {
                Output::Batches {
                    schema, batches, ..
                } => (schema, batches),
                _ => {
                    return Err(WeirError::internal(format!(
                        "WITH query \"{name}\" returned no rows"
                    )));
                }
            };
            *with.cte_tables[i].query = constant_rows(&schema, &batches)?;
        }
        for i in silent.into_iter().rev() {
            with.cte_tables.remove(i);
        }
        match dml_of(&q.body).cloned() {
            // a query: reads its WITH as it is now
            None => {
                q.with = Some(with);
                let stmt = ast::Statement::Query(q);
                self.run_query(session, &stmt, params).await
            }
            // INSERT: the WITH goes with its source
            Some(ast::Statement::Insert(mut ins)) => {
                if let Some(source) = ins.source.as_mut() {
                    match source.with.as_mut() {
                        Some(own) => {
                            let mut all = with.cte_tables;
                            all.append(&mut own.cte_tables);
                            own.cte_tables = all;
                        }
                        None => source.with = Some(with),
                    }
                } else {
                    let mut dml = ast::Statement::Insert(ins);
                    dml = self.reading_ctes(session, &dml, &with.cte_tables).await?;
                    return Box::pin(self.execute_dml_fitted(session, &dml, params)).await;
                }
                let dml = ast::Statement::Insert(ins);
                Box::pin(self.execute_dml_fitted(session, &dml, params)).await
            }
            // UPDATE / DELETE: the WITH queries it names, as their rows
            Some(dml) => {
                let dml = self.reading_ctes(session, &dml, &with.cte_tables).await?;
                Box::pin(self.execute_dml_fitted(session, &dml, params)).await
            }
        }
    }

    /// What a data-modifying WITH takes and returns, without running it (the extended
    /// protocol's Describe): each data-modifying query's parameters and RETURNING columns
    /// (its WITH query then reads as no rows of those columns), and the statement's.
    pub(crate) async fn describe_with_dml(
        &self,
        session: &Session,
        stmt: &ast::Statement,
    ) -> Result<(Vec<Option<FieldRef>>, Option<SchemaRef>)> {
        let (mut q, mut with) = split_with(stmt)?;
        let mut params: Vec<Option<FieldRef>> = Vec::new();
        let mut silent = Vec::new();
        for i in 0..with.cte_tables.len() {
            let Some(dml) = dml_of(&with.cte_tables[i].query.body).cloned() else {
                continue;
            };
            let mut dml = self
                .reading_ctes(session, &dml, &with.cte_tables[..i])
                .await?;
            if super::merge::joins_other_relations(&dml) {
                let (p, schema) = self.describe_join_dml(session, &dml).await?;
                merge_params(&mut params, p);
                match schema {
                    Some(schema) => *with.cte_tables[i].query = constant_rows(&schema, &[])?,
                    None => silent.push(i),
                }
                continue;
            }
            let returning = super::returning::take_returning(&mut dml);
            let plan = self.plan_ast(session, &dml).await?;
            merge_params(&mut params, super::parameter_types(&plan)?);
            match returning {
                Some(r) => {
                    let shown = self.returning_plan(session, &r).await?;
                    let schema = std::sync::Arc::new(shown.schema().as_arrow().clone());
                    *with.cte_tables[i].query = constant_rows(&schema, &[])?;
                }
                None => silent.push(i),
            }
        }
        for i in silent.into_iter().rev() {
            with.cte_tables.remove(i);
        }
        let (plan, returning) = match dml_of(&q.body).cloned() {
            None => {
                q.with = Some(with);
                (ast::Statement::Query(q), None)
            }
            Some(dml) if super::merge::joins_other_relations(&dml) => {
                let dml = self.reading_ctes(session, &dml, &with.cte_tables).await?;
                let (p, schema) = self.describe_join_dml(session, &dml).await?;
                merge_params(&mut params, p);
                return Ok((params, schema));
            }
            Some(mut dml) => {
                let r = super::returning::take_returning(&mut dml);
                let dml = match dml {
                    ast::Statement::Insert(mut ins) if ins.source.is_some() => {
                        if let Some(source) = ins.source.as_mut() {
                            let mut all = with.cte_tables;
                            if let Some(own) = source.with.as_mut() {
                                all.append(&mut own.cte_tables);
                                own.cte_tables = all;
                            } else {
                                with.cte_tables = all;
                                source.with = Some(with);
                            }
                        }
                        ast::Statement::Insert(ins)
                    }
                    other => self.reading_ctes(session, &other, &with.cte_tables).await?,
                };
                (dml, r)
            }
        };
        let planned = self.plan_ast(session, &plan).await?;
        merge_params(&mut params, super::parameter_types(&planned)?);
        let schema = match (returning, &planned) {
            (Some(r), _) => {
                let shown = self.returning_plan(session, &r).await?;
                Some(std::sync::Arc::new(shown.schema().as_arrow().clone()))
            }
            (None, datafusion::logical_expr::LogicalPlan::Dml(_)) => None,
            (None, p) => Some(std::sync::Arc::new(p.schema().as_arrow().clone())),
        };
        Ok((params, schema))
    }

    /// `stmt` with each relation named as one of `ctes` read as that query's rows (each
    /// computed once, with the queries before it).
    async fn reading_ctes(
        &self,
        session: &Session,
        stmt: &ast::Statement,
        ctes: &[ast::Cte],
    ) -> Result<ast::Statement> {
        let read = unqualified_relations(stmt);
        let used: HashSet<String> = ctes
            .iter()
            .map(|c| normalize_ident(&c.alias.name))
            .filter(|n| read.contains(n))
            .collect();
        if used.is_empty() {
            return Ok(stmt.clone());
        }
        let mut rows: Vec<(String, ast::Query)> = Vec::new();
        for (i, c) in ctes.iter().enumerate() {
            let name = normalize_ident(&c.alias.name);
            if !used.contains(&name) {
                continue;
            }
            let query = ast::Query {
                with: Some(ast::With {
                    with_token: ast::helpers::attached_token::AttachedToken::empty(),
                    recursive: false,
                    cte_tables: ctes[..=i].to_vec(),
                }),
                ..*crate::sql::parser::parse_query(&format!(
                    "SELECT * FROM {}",
                    quote_ident(&name)
                ))?
            };
            let plan = self
                .plan_ast(session, &ast::Statement::Query(Box::new(query)))
                .await?;
            let schema = std::sync::Arc::new(plan.schema().as_arrow().clone());
            let batches = crate::engine::collect_plan(session, plan).await?;
            rows.push((name, constant_rows(&schema, &batches)?));
        }
        let mut stmt = stmt.clone();
        let _ = ast::VisitMut::visit(&mut stmt, &mut AsRows(&rows));
        Ok(stmt)
    }
}

/// Reads each relation named as one of the (name, rows query) pairs as that query.
struct AsRows<'a>(&'a [(String, ast::Query)]);

impl ast::VisitorMut for AsRows<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, tf: &mut ast::TableFactor) -> ControlFlow<()> {
        if let ast::TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } = tf
            && name.0.len() == 1
            && let Some(i) = name.0[0].as_ident()
            && let Some((n, q)) = self.0.iter().find(|(n, _)| *n == normalize_ident(i))
        {
            let alias = alias.clone().unwrap_or(ast::TableAlias {
                explicit: true,
                name: ast::Ident::new(n.clone()),
                columns: vec![],
                at: None,
            });
            *tf = ast::TableFactor::Derived {
                lateral: false,
                subquery: Box::new(q.clone()),
                alias: Some(alias),
                sample: None,
            };
        }
        ControlFlow::Continue(())
    }
}

/// A query of these rows as constants: `SELECT * FROM (VALUES (CAST('1' AS integer),
/// ...), ...) AS v(names)`, each value its text cast to its column's type; no rows is a
/// SELECT of typed NULLs that is false.
fn constant_rows(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<ast::Query> {
    let types: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| crate::sql::types::field_sql_type(f).map(|t| t.display_name()))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            WeirError::not_supported(
                "a RETURNING list of this type cannot be read by the statement",
            )
        })?;
    // each column by the name a client sees, where no other column has it
    let shown: Vec<&str> = schema
        .fields()
        .iter()
        .map(|f| crate::catalog::rewrite::display_column_name(f.name()))
        .collect();
    let names: Vec<String> = schema
        .fields()
        .iter()
        .zip(&shown)
        .map(|(f, n)| match shown.iter().filter(|m| *m == n).count() {
            1 => quote_ident(n),
            _ => quote_ident(f.name()),
        })
        .collect();
    let mut rows: Vec<String> = Vec::new();
    for b in batches {
        let texts: Vec<datafusion::arrow::array::StringArray> = b
            .columns()
            .iter()
            .map(crate::sql::pg_text::text_values)
            .collect::<datafusion::common::Result<_>>()?;
        for r in 0..b.num_rows() {
            let values: Vec<String> = texts
                .iter()
                .zip(&types)
                .map(|(t, ty)| match t.is_valid(r) {
                    true => format!(
                        "CAST({} AS {ty})",
                        crate::sql::pg_text::quote_literal(t.value(r))
                    ),
                    false => format!("CAST(NULL AS {ty})"),
                })
                .collect();
            rows.push(format!("({})", values.join(", ")));
        }
    }
    let sql = if rows.is_empty() {
        let items: Vec<String> = names
            .iter()
            .zip(&types)
            .map(|(n, ty)| format!("CAST(NULL AS {ty}) AS {n}"))
            .collect();
        format!("SELECT {} WHERE false", items.join(", "))
    } else {
        format!(
            "SELECT * FROM (VALUES {}) AS v({})",
            rows.join(", "),
            names.join(", ")
        )
    };
    crate::sql::parser::parse_query(&sql)
        .map(|q| *q)
        .map_err(|e| {
            WeirError::new(
                sqlstate::INTERNAL_ERROR,
                format!("the rows of a WITH query could not be read back: {e}"),
            )
        })
}
