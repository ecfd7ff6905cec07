//! `CREATE [OR REPLACE] FUNCTION name(params) RETURNS type LANGUAGE sql [IMMUTABLE | STABLE]
//! AS 'SELECT expr'` (or `RETURN expr`), `DROP FUNCTION [IF EXISTS] name`, and their
//! inlining: before a statement (or a materialized view) is planned, each call `name(args)`
//! whose arguments fit the parameters — positional ones first, then named ones (`b => 5`),
//! the rest from the parameters' `DEFAULT`s (constant expressions; only trailing parameters
//! have one, 42P13 otherwise) — becomes `CAST((body) AS type)` with the parameters (by name
//! or `$n`) replaced by the arguments cast to their types, repeatedly for functions calling
//! functions (at most 32 deep). A call that does not fit is left as written (42883 when
//! planned). Only one-expression bodies: a body with FROM, several statements or another
//! language is refused (0A000).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{self, VisitMut, VisitorMut};

use crate::catalog::sql_functions::SqlFunction;
use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::{normalize_ident, parse_expr_text, relation_name};

fn body_expr(f: &ast::CreateFunction) -> Result<ast::Expr> {
    let unsupported = || {
        WeirError::not_supported(
            "a SQL function's body must be one expression: AS 'SELECT expr' or RETURN expr",
        )
    };
    let text_body = |e: &ast::Expr| -> Result<ast::Expr> {
        let text = match e {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::SingleQuotedString(s)
                | ast::Value::DollarQuotedString(ast::DollarQuotedString { value: s, .. }) => {
                    s.clone()
                }
                _ => return Err(unsupported()),
            },
            _ => return Err(unsupported()),
        };
        let q = crate::sql::parser::parse_query(text.trim().trim_end_matches(';'))
            .map_err(|_| unsupported())?;
        let ast::SetExpr::Select(sel) = q.body.as_ref() else {
            return Err(unsupported());
        };
        match (
            sel.from.is_empty(),
            sel.selection.is_none(),
            sel.projection.as_slice(),
        ) {
            (true, true, [ast::SelectItem::UnnamedExpr(e)])
            | (true, true, [ast::SelectItem::ExprWithAlias { expr: e, .. }]) => Ok(e.clone()),
            _ => Err(unsupported()),
        }
    };
    match &f.function_body {
        Some(ast::CreateFunctionBody::AsBeforeOptions { body, .. })
        | Some(ast::CreateFunctionBody::AsAfterOptions(body)) => text_body(body),
        Some(ast::CreateFunctionBody::Return(e))
        | Some(ast::CreateFunctionBody::AsReturnExpr(e)) => Ok(e.clone()),
        _ => Err(unsupported()),
    }
}

/// The body with its parameters replaced by the call's arguments.
fn inline(f: &SqlFunction, args: &[ast::Expr]) -> Result<ast::Expr> {
    let mut body = parse_expr_text(&f.body)?;
    let typed: Vec<ast::Expr> = args
        .iter()
        .zip(&f.params)
        .map(|(a, (_, ty))| parse_expr_text(&format!("CAST(({a}) AS {ty})")))
        .collect::<Result<_>>()?;
    struct Subst<'a> {
        f: &'a SqlFunction,
        args: &'a [ast::Expr],
    }
    impl VisitorMut for Subst<'_> {
        type Break = ();
        fn post_visit_expr(&mut self, e: &mut ast::Expr) -> ControlFlow<()> {
            let at = match e {
                ast::Expr::Identifier(id) => {
                    let n = normalize_ident(id);
                    self.f
                        .params
                        .iter()
                        .position(|(p, _)| p.as_deref() == Some(n.as_str()))
                }
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::Placeholder(p) => p
                        .strip_prefix('$')
                        .and_then(|d| d.parse::<usize>().ok())
                        .and_then(|d| d.checked_sub(1)),
                    _ => None,
                },
                _ => None,
            };
            if let Some(i) = at
                && let Some(a) = self.args.get(i)
            {
                *e = ast::Expr::Nested(Box::new(a.clone()));
            }
            ControlFlow::Continue(())
        }
    }
    let _ = body.visit(&mut Subst { f, args: &typed });
    parse_expr_text(&format!("CAST(({body}) AS {})", f.returns))
}

impl Engine {
    pub(crate) fn create_sql_function(
        &self,
        session: &Session,
        f: &ast::CreateFunction,
    ) -> Result<Output> {
        let lang = f
            .language
            .as_ref()
            .map(|l| l.value.to_lowercase())
            .unwrap_or_default();
        if lang != "sql" {
            return Err(WeirError::not_supported(format!(
                "functions in LANGUAGE {} are not supported: only LANGUAGE sql",
                if lang.is_empty() { "(none)" } else { &lang }
            )));
        }
        let returns = match &f.return_type {
            Some(ast::FunctionReturnType::DataType(t)) => t.to_string(),
            Some(ast::FunctionReturnType::SetOf(_)) => {
                return Err(WeirError::not_supported(
                    "RETURNS SETOF functions are not supported",
                ));
            }
            _ => return Err(WeirError::syntax("a function needs RETURNS type")),
        };
        let body = body_expr(f)?;
        let params: Vec<(Option<String>, String)> = f
            .args
            .iter()
            .flatten()
            .map(|a| {
                (
                    a.name.as_ref().map(normalize_ident),
                    a.data_type.to_string(),
                )
            })
            .collect();
        let defaults: Vec<Option<String>> = f
            .args
            .iter()
            .flatten()
            .map(|a| a.default_expr.as_ref().map(|e| e.to_string()))
            .collect();
        if let Some(first) = defaults.iter().position(Option::is_some)
            && defaults[first..].iter().any(Option::is_none)
        {
            return Err(WeirError::new(
                sqlstate::INVALID_FUNCTION_DEFINITION,
                "input parameters after one with a default value must also have defaults",
            ));
        }
        // a default is a constant expression: it reads no column or parameter
        for d in defaults.iter().flatten() {
            let mut e = parse_expr_text(d)?;
            let mut named = None;
            let _ = ast::visit_expressions_mut(&mut e, |x| {
                if let ast::Expr::Identifier(id) = x {
                    named = Some(normalize_ident(id));
                    return ControlFlow::Break(());
                }
                if let ast::Expr::CompoundIdentifier(ids) = x {
                    named = ids.last().map(normalize_ident);
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            });
            if let Some(n) = named {
                return Err(WeirError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!("column \"{n}\" does not exist"),
                ));
            }
        }
        let defaults = if defaults.iter().any(Option::is_some) {
            defaults
        } else {
            Vec::new()
        };
        let name = relation_name(&f.name)?;
        let source = match &f.function_body {
            Some(ast::CreateFunctionBody::AsBeforeOptions { body, .. })
            | Some(ast::CreateFunctionBody::AsAfterOptions(body)) => match body {
                ast::Expr::Value(v) => match &v.value {
                    ast::Value::SingleQuotedString(s)
                    | ast::Value::DollarQuotedString(ast::DollarQuotedString {
                        value: s, ..
                    }) => Some(s.clone()),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        };
        let volatility = f.behavior.as_ref().map(|b| {
            match b {
                ast::FunctionBehavior::Immutable => "i",
                ast::FunctionBehavior::Stable => "s",
                ast::FunctionBehavior::Volatile => "v",
            }
            .to_owned()
        });
        let def = SqlFunction {
            oid: 0,
            name,
            params,
            returns,
            body: body.to_string(),
            source,
            volatility,
            defaults,
            owner: session.role(),
        };
        // it must inline into something that parses (check_function_bodies = off, as
        // pg_dump sets it, skips the check as Postgres does)
        if session.get("check_function_bodies").as_deref() == Some("off") {
            self.catalog.create_sql_function(def, f.or_replace)?;
            return Ok(Output::Command("CREATE FUNCTION".into()));
        }
        let probe: Vec<ast::Expr> = def
            .params
            .iter()
            .map(|_| ast::Expr::value(ast::Value::Null))
            .collect();
        inline(&def, &probe)?;
        self.catalog.create_sql_function(def, f.or_replace)?;
        Ok(Output::Command("CREATE FUNCTION".into()))
    }

    pub(crate) fn drop_sql_function(&self, d: &ast::DropFunction) -> Result<Output> {
        for fd in &d.func_desc {
            let name = relation_name(&fd.name)?;
            // a view (plain or materialized) that calls it would not plan again
            let calls = |q: &str| {
                let q = q.to_lowercase();
                q.match_indices(&name).any(|(at, _)| {
                    let before = q[..at].chars().next_back();
                    let after = q[at + name.len()..].trim_start().chars().next();
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_') && after == Some('(')
                })
            };
            if let Some(v) = self
                .catalog
                .entries()
                .into_iter()
                .find(|e| e.desc.query.as_deref().is_some_and(calls))
            {
                return Err(WeirError::new(
                    sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                    format!("cannot drop function {name} because other objects depend on it"),
                )
                .with_detail(format!(
                    "{} \"{}\" calls function {name}",
                    v.desc.kind.noun(),
                    v.desc.name
                )));
            }
            if !self.catalog.drop_sql_function(&name)? && !d.if_exists {
                return Err(WeirError::new(
                    sqlstate::UNDEFINED_FUNCTION,
                    format!("could not find a function named \"{name}\""),
                ));
            }
        }
        Ok(Output::Command("DROP FUNCTION".into()))
    }

    /// Inline every call of a SQL function.
    pub(crate) fn inline_sql_functions<T: VisitMut>(&self, node: &mut T) -> Result<()> {
        if !self.catalog.has_sql_functions() {
            return Ok(());
        }
        struct Inline<'a> {
            engine: &'a Engine,
            changed: bool,
            error: Option<WeirError>,
        }
        impl VisitorMut for Inline<'_> {
            type Break = ();
            /// A call that is a select item is named after its function, as in Postgres
            /// (`SELECT addx(1, 2)` gives column `addx`), not after what it inlines to.
            fn pre_visit_select(&mut self, select: &mut ast::Select) -> ControlFlow<()> {
                for item in select.projection.iter_mut() {
                    if let ast::SelectItem::UnnamedExpr(ast::Expr::Function(call)) = item
                        && let Ok(name) = relation_name(&call.name)
                        && self.engine.catalog.sql_function(&name).is_some()
                    {
                        let expr = std::mem::replace(
                            item,
                            ast::SelectItem::UnnamedExpr(ast::Expr::value(ast::Value::Null)),
                        );
                        if let ast::SelectItem::UnnamedExpr(expr) = expr {
                            *item = ast::SelectItem::ExprWithAlias {
                                expr,
                                alias: ast::Ident::with_quote('"', name),
                            };
                        }
                    }
                }
                ControlFlow::Continue(())
            }
            fn post_visit_expr(&mut self, e: &mut ast::Expr) -> ControlFlow<()> {
                let ast::Expr::Function(call) = e else {
                    return ControlFlow::Continue(());
                };
                let Ok(name) = relation_name(&call.name) else {
                    return ControlFlow::Continue(());
                };
                let Some(f) = self.engine.catalog.sql_function(&name) else {
                    return ControlFlow::Continue(());
                };
                // positional and named (`name => value`) arguments (none for `f` written
                // without parentheses), the missing ones from the parameters' defaults
                let given: Vec<(Option<String>, String)> = match &call.args {
                    ast::FunctionArguments::List(list) => {
                        let given: Vec<_> = list
                            .args
                            .iter()
                            .filter_map(|a| match a {
                                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(x)) => {
                                    Some((None, x.to_string()))
                                }
                                ast::FunctionArg::Named {
                                    name,
                                    arg: ast::FunctionArgExpr::Expr(x),
                                    ..
                                }
                                | ast::FunctionArg::ExprNamed {
                                    name: ast::Expr::Identifier(name),
                                    arg: ast::FunctionArgExpr::Expr(x),
                                    ..
                                } => Some((Some(normalize_ident(name)), x.to_string())),
                                _ => None,
                            })
                            .collect();
                        if given.len() != list.args.len() {
                            return ControlFlow::Continue(());
                        }
                        given
                    }
                    _ => Vec::new(),
                };
                let Some(args) = f.call_arguments(&given) else {
                    return ControlFlow::Continue(());
                };
                let inlined = args
                    .iter()
                    .map(|a| parse_expr_text(a))
                    .collect::<Result<Vec<_>>>()
                    .and_then(|args| inline(&f, &args));
                match inlined {
                    Ok(x) => {
                        *e = x;
                        self.changed = true;
                    }
                    Err(err) => {
                        self.error = Some(err);
                        return ControlFlow::Break(());
                    }
                }
                ControlFlow::Continue(())
            }
        }
        for _ in 0..32 {
            let mut v = Inline {
                engine: self,
                changed: false,
                error: None,
            };
            let _ = node.visit(&mut v);
            if let Some(e) = v.error {
                return Err(e);
            }
            if !v.changed {
                return Ok(());
            }
        }
        Err(WeirError::new(
            "54001",
            "SQL functions call each other more than 32 deep",
        ))
    }
}
