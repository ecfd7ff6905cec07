//! `PREPARE name [(types)] AS statement`, `EXECUTE name [(arguments)]` and `DEALLOCATE
//! [PREPARE] name | ALL`: statements prepared in SQL, kept in the session
//! (`Session::prepared`) until deallocated, `DISCARD ALL` or the end of the connection; not
//! transactional (a ROLLBACK keeps them), as in Postgres.
//!
//! A prepared body keeps its `$n` placeholders; a declared type makes `$n` a
//! `CAST($n AS type)` in the body. PREPARE plans the body once to report what Postgres
//! reports there (unknown tables and columns, type errors). EXECUTE puts each argument
//! expression where its `$n` stands and runs the body as any statement: the arguments are
//! planned with it, so an untyped literal takes the type its place asks for, as an
//! argument of Postgres' EXECUTE does. Arguments name no columns (42703), hold no
//! subqueries (0A000) and no `$n` of their own (42P02), as in Postgres.
//!
//! Protocol-level statements (Parse) share the names with these in Postgres; here
//! `DEALLOCATE name` removes either (the server's handler looks at the connection's
//! statements first), `DEALLOCATE ALL` only the SQL-level ones.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{self, VisitMut, Visitor, VisitorMut};

use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::params::placeholder_index;
use crate::server::session::Session;
use crate::sql::parser::{ExecuteStmt, Parsed, PrepareStmt, Statement};

/// A statement prepared in SQL: its body (declared types already cast in) and how many
/// arguments EXECUTE must give.
#[derive(Debug, Clone)]
pub struct SqlPrepared {
    pub body: Parsed,
    pub params: usize,
}

impl Engine {
    pub(crate) async fn prepare(&self, session: &mut Session, p: &PrepareStmt) -> Result<Output> {
        if session.prepared.contains_key(&p.name) {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_PREPARED_STATEMENT,
                format!("prepared statement \"{}\" already exists", p.name),
            ));
        }
        let mut body = p.body.clone();
        let params = p.types.len().max(highest_placeholder(&body.stmt));
        if !p.types.is_empty() {
            replace_placeholders(&mut body.stmt, |i| {
                p.types.get(i).map(|t| ast::Expr::Cast {
                    kind: ast::CastKind::Cast,
                    expr: Box::new(placeholder(i)),
                    data_type: t.clone(),
                    array: false,
                    format: None,
                })
            });
        }
        // planned now, as Postgres plans it at PREPARE: a missing table fails here
        self.describe(session, &body).await?;
        session
            .prepared
            .insert(p.name.clone(), SqlPrepared { body, params });
        Ok(Output::Command("PREPARE".into()))
    }

    /// The statement EXECUTE runs: the prepared body with the arguments in its
    /// placeholders.
    pub(crate) fn executable(&self, session: &Session, e: &ExecuteStmt) -> Result<Parsed> {
        let prepared = session.prepared.get(&e.name).ok_or_else(|| {
            WeirError::new(
                sqlstate::INVALID_SQL_STATEMENT_NAME,
                format!("prepared statement \"{}\" does not exist", e.name),
            )
        })?;
        if e.args.len() != prepared.params {
            return Err(WeirError::syntax(format!(
                "wrong number of parameters for prepared statement \"{}\"",
                e.name
            ))
            .with_detail(format!(
                "Expected {} parameters but got {}.",
                prepared.params,
                e.args.len()
            )));
        }
        // an argument is evaluated on its own: it has no columns to refer to, and (as in
        // Postgres) no subqueries
        for arg in &e.args {
            match first_reference(arg) {
                Some(Reference::Column(column)) => {
                    return Err(WeirError::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!("column \"{column}\" does not exist"),
                    ));
                }
                Some(Reference::Placeholder(p)) => {
                    return Err(WeirError::new(
                        sqlstate::NO_SUCH_PLACEHOLDER,
                        format!("there is no parameter {p}"),
                    ));
                }
                Some(Reference::Subquery) => {
                    return Err(WeirError::not_supported(
                        "cannot use subquery in EXECUTE parameter",
                    ));
                }
                None => {}
            }
        }
        let mut body = prepared.body.clone();
        replace_placeholders(&mut body.stmt, |i| {
            e.args
                .get(i)
                .map(|a| ast::Expr::Nested(Box::new(a.clone())))
        });
        Ok(body)
    }

    pub(crate) fn deallocate(&self, session: &mut Session, name: Option<&str>) -> Result<Output> {
        match name {
            None => {
                session.prepared.clear();
                Ok(Output::Command("DEALLOCATE ALL".into()))
            }
            Some(name) => match session.prepared.remove(name) {
                Some(_) => Ok(Output::Command("DEALLOCATE".into())),
                None => Err(WeirError::new(
                    sqlstate::INVALID_SQL_STATEMENT_NAME,
                    format!("prepared statement \"{name}\" does not exist"),
                )),
            },
        }
    }
}

fn placeholder(i: usize) -> ast::Expr {
    ast::Expr::value(ast::Value::Placeholder(format!("${}", i + 1)))
}

/// The highest `$n` a body uses (0 for none).
fn highest_placeholder(stmt: &Statement) -> usize {
    struct Highest(usize);
    impl Visitor for Highest {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &ast::Expr) -> ControlFlow<()> {
            if let Some(i) = placeholder_index(e) {
                self.0 = self.0.max(i + 1);
            }
            ControlFlow::Continue(())
        }
    }
    let mut h = Highest(0);
    let _ = match stmt {
        Statement::Query(q) | Statement::Dml(q) => ast::Visit::visit(q.as_ref(), &mut h),
        Statement::Merge(m) => ast::Visit::visit(m.as_ref(), &mut h),
        _ => ControlFlow::Continue(()),
    };
    h.0
}

/// Each `$n` for which `with(n - 1)` gives an expression replaced by it (not visited
/// again: a replacement's own placeholders stay).
fn replace_placeholders(stmt: &mut Statement, with: impl Fn(usize) -> Option<ast::Expr>) {
    struct Replace<F>(F);
    impl<F: Fn(usize) -> Option<ast::Expr>> VisitorMut for Replace<F> {
        type Break = ();
        fn post_visit_expr(&mut self, e: &mut ast::Expr) -> ControlFlow<()> {
            if let Some(new) = placeholder_index(e).and_then(&self.0) {
                *e = new;
            }
            ControlFlow::Continue(())
        }
    }
    let mut r = Replace(with);
    let _ = match stmt {
        Statement::Query(q) | Statement::Dml(q) => q.visit(&mut r),
        Statement::Merge(m) => m.visit(&mut r),
        _ => ControlFlow::Continue(()),
    };
}

enum Reference {
    Column(String),
    /// Postgres binds no parameters into a utility statement's arguments.
    Placeholder(String),
    Subquery,
}

/// The first column, `$n` or subquery an argument holds, if any.
fn first_reference(e: &ast::Expr) -> Option<Reference> {
    struct Columns(Option<Reference>);
    impl Visitor for Columns {
        type Break = ();
        fn pre_visit_query(&mut self, _: &ast::Query) -> ControlFlow<()> {
            self.0 = Some(Reference::Subquery);
            ControlFlow::Break(())
        }
        fn pre_visit_expr(&mut self, e: &ast::Expr) -> ControlFlow<()> {
            let name = match e {
                ast::Expr::Identifier(id) => crate::sql::parser::normalize_ident(id),
                ast::Expr::CompoundIdentifier(ids) => ids
                    .iter()
                    .map(crate::sql::parser::normalize_ident)
                    .collect::<Vec<_>>()
                    .join("."),
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::Placeholder(p) => {
                        self.0 = Some(Reference::Placeholder(p.clone()));
                        return ControlFlow::Break(());
                    }
                    _ => return ControlFlow::Continue(()),
                },
                _ => return ControlFlow::Continue(()),
            };
            self.0 = Some(Reference::Column(name));
            ControlFlow::Break(())
        }
    }
    let mut c = Columns(None);
    let _ = ast::Visit::visit(e, &mut c);
    c.0
}
