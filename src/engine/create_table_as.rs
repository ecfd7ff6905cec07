//! `CREATE TABLE [IF NOT EXISTS] name [(columns)] AS query [WITH [NO] DATA]` and `SELECT
//! ... INTO name FROM ...`: the query is planned for its columns (names, or those listed;
//! types as planned), the table is created by the `CREATE TABLE` statement that declares
//! them (so its catalog entry and definition are any table's), then filled by `INSERT INTO
//! name query` (privileges, constraints and views as for any INSERT). The answer is
//! Postgres' `SELECT n`. If filling fails the table is dropped again. No primary key,
//! NOT NULL or defaults are carried over from the query's sources, as in Postgres.
//!
//! `CREATE TABLE t (LIKE source [INCLUDING ...] [, more columns and constraints])`: the
//! source's columns first (names, types, NOT NULL), then its defaults (INCLUDING DEFAULTS),
//! CHECK constraints (INCLUDING CONSTRAINTS) and primary key (INCLUDING INDEXES) as asked
//! (ALL: all of them). Other indexes, comments and identities are not copied yet.

use datafusion::sql::sqlparser::ast;

use crate::sql::parser::{CheckSpec, ColumnSpec, CreateTable, LikeSpec};

use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::{CreateTableAs, Statement, parse};
use crate::sql::pg_text::quote_ident;
use crate::sql::types::{SqlType, field_sql_type};

type Notices = tokio::sync::mpsc::UnboundedSender<String>;

impl Engine {
    pub(crate) async fn create_table_as(
        &self,
        session: &mut Session,
        c: &CreateTableAs,
        notices: Option<Notices>,
    ) -> Result<Output> {
        if self.catalog.get(&c.name).is_some() {
            if c.if_not_exists {
                if let Some(n) = &notices {
                    let _ = n.send(format!("relation \"{}\" already exists, skipping", c.name));
                }
                return Ok(Output::Command("CREATE TABLE AS".into()));
            }
            return Err(WeirError::new(
                sqlstate::DUPLICATE_TABLE,
                format!("relation \"{}\" already exists", c.name),
            ));
        }
        let plan = self
            .plan_ast(session, &ast::Statement::Query(c.query.clone()))
            .await?;
        let fields = plan.schema().fields();
        if c.columns.len() > fields.len() {
            return Err(WeirError::syntax("too many column names were specified"));
        }
        let mut columns: Vec<(String, SqlType)> = Vec::with_capacity(fields.len());
        for (i, f) in fields.iter().enumerate() {
            let name = c.columns.get(i).cloned().unwrap_or_else(|| {
                crate::catalog::rewrite::display_column_name(f.name()).to_owned()
            });
            crate::catalog::check_column_name(&name)?;
            if columns.iter().any(|(n, _)| *n == name) {
                return Err(WeirError::new(
                    sqlstate::DUPLICATE_COLUMN,
                    format!("column \"{name}\" specified more than once"),
                ));
            }
            let ty = match field_sql_type(f) {
                // the catalogs' own types are stored as what they hold
                Some(SqlType::Name | SqlType::InternalChar | SqlType::Vector(_)) => SqlType::Text,
                Some(SqlType::Oid) => SqlType::Int8,
                Some(t) => t,
                None => {
                    return Err(WeirError::not_supported(format!(
                        "column \"{name}\" has type {}, which a table cannot hold",
                        f.data_type()
                    )));
                }
            };
            columns.push((name, ty));
        }
        let ddl = format!(
            "CREATE {}TABLE {} ({}){}",
            if c.temporary.is_some() { "TEMP " } else { "" },
            quote_ident(&c.name),
            columns
                .iter()
                .map(|(n, t)| format!("{} {}", quote_ident(n), t.display_name()))
                .collect::<Vec<_>>()
                .join(", "),
            c.temporary
                .map(|o| format!(" ON COMMIT {}", o.sql()))
                .unwrap_or_default()
        );
        let create = one(&ddl)?;
        Box::pin(self.execute_with_notices(session, &create, None, notices.clone())).await?;
        if !c.with_data {
            return Ok(Output::Command("CREATE TABLE AS".into()));
        }
        let mut insert = one(&format!("INSERT INTO {} SELECT 1", quote_ident(&c.name)))?;
        if let Statement::Dml(q) = &mut insert.stmt
            && let ast::Statement::Insert(i) = q.as_mut()
        {
            i.source = Some(c.query.clone());
        }
        match Box::pin(self.execute_with_notices(session, &insert, None, notices.clone())).await {
            Ok(Output::Command(tag)) => {
                let rows = tag.rsplit(' ').next().unwrap_or("0").to_owned();
                Ok(Output::Command(format!("SELECT {rows}")))
            }
            Ok(other) => Ok(other),
            Err(e) => {
                // the statement made nothing: the table goes again
                let drop = one(&format!("DROP TABLE {}", quote_ident(&c.name)))?;
                let _ = Box::pin(self.execute_with_notices(session, &drop, None, None)).await;
                Err(e)
            }
        }
    }
}

impl Engine {
    /// The table `CREATE TABLE t (LIKE source ...)` declares, written out.
    pub(crate) fn expand_like(&self, ct: &CreateTable, like: &LikeSpec) -> Result<CreateTable> {
        let entry = self
            .catalog
            .get(&like.source)
            .ok_or_else(|| WeirError::undefined_table(&like.source))?;
        let d = &entry.desc;
        let mut columns: Vec<ColumnSpec> = d
            .columns
            .iter()
            .map(|c| ColumnSpec {
                name: c.name.clone(),
                ty: c.ty.clone(),
                not_null: !c.nullable,
                default: like
                    .includes("defaults")
                    .then(|| {
                        d.defaults
                            .iter()
                            .find(|(n, _)| *n == c.name)
                            .map(|(_, t)| t.clone())
                    })
                    .flatten(),
                identity: None,
                generated: like
                    .includes("generated")
                    .then(|| d.generation_expr(&c.name).map(str::to_owned))
                    .flatten(),
            })
            .collect();
        columns.extend(ct.columns.iter().cloned());
        let mut checks: Vec<CheckSpec> = if like.includes("constraints") {
            d.checks
                .iter()
                .map(|(name, expr)| CheckSpec {
                    name: name.clone(),
                    expr: expr.clone(),
                })
                .collect()
        } else {
            vec![]
        };
        checks.extend(ct.checks.iter().cloned());
        let primary_key = if ct.primary_key.is_empty() && like.includes("indexes") {
            d.primary_key.clone()
        } else {
            ct.primary_key.clone()
        };
        // (the source's domain columns stay the domain's)
        let domains = d.domains.iter().chain(&ct.domains).cloned().collect();
        Ok(CreateTable {
            columns,
            checks,
            primary_key,
            like: None,
            domains,
            ..ct.clone()
        })
    }
}

fn one(sql: &str) -> Result<crate::sql::parser::Parsed> {
    parse(sql)?
        .into_iter()
        .next()
        .ok_or_else(|| WeirError::internal(format!("no statement in {sql}")))
}
