//! Whole-row references: a relation's name (or alias) used as a value is its row, a record
//! of its columns named as the columns (`row_to_json(t)`, `to_jsonb(t.*)`, `json_agg(o)`,
//! `SELECT t FROM t` printing `(1,a)`), as in Postgres. Resolved in the syntax tree before
//! planning (DataFusion has no such reference) into `weir_record('c1', t.c1, ...)`, for
//! the catalog's relations (tables, sources, views, materialized views) named in the FROM
//! clause of the same SELECT. A name that is also a column of one of them stays the column,
//! as in Postgres; `count(t.*)` is left to DataFusion. A subquery in FROM or a CTE has a
//! row too when its select list names its columns (`(SELECT id, name AS n FROM t) s`), and
//! a VALUES list (`(VALUES (1, 'a')) t(id, name)`); one with `*` or an unnamed expression
//! does not yet (its columns are known only once
//! planned): such a name stays unknown (42703). A relation's row type read from JSON
//! (`jsonb_populate_recordset(NULL::t, j)`) is its columns too.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{self, Expr, Ident, VisitMut, VisitorMut};

use crate::engine::Engine;
use crate::sql::parser::{normalize_ident, relation_name};

impl Engine {
    pub(crate) fn whole_row_references<T: VisitMut + ast::Visit>(&self, node: &mut T) {
        let ctes = super::plain_views::cte_names(node);
        let mut v = Rows {
            engine: self,
            ctes: &ctes,
            cte_columns: HashMap::new(),
        };
        let _ = node.visit(&mut v);
    }
}

struct Rows<'a> {
    engine: &'a Engine,
    ctes: &'a HashSet<String>,
    /// The columns of the CTEs seen so far whose select lists name them.
    cte_columns: HashMap<String, Vec<String>>,
}

/// The names of a query's columns when its select list says them (each item aliased, or a
/// column): a derived table's or a CTE's row fields. None with a `*` or an unnamed
/// expression.
fn named_columns(q: &ast::Query) -> Option<Vec<String>> {
    let ast::SetExpr::Select(s) = q.body.as_ref() else {
        return None;
    };
    s.projection
        .iter()
        .map(|item| match item {
            ast::SelectItem::ExprWithAlias { alias, .. } => Some(normalize_ident(alias)),
            ast::SelectItem::UnnamedExpr(Expr::Identifier(id)) => Some(normalize_ident(id)),
            ast::SelectItem::UnnamedExpr(Expr::CompoundIdentifier(ids)) => {
                ids.last().map(normalize_ident)
            }
            _ => None,
        })
        .collect()
}

impl Rows<'_> {
    /// The relations of a FROM clause whose columns the catalog knows: the name they are
    /// seen by, and their columns' names.
    fn relations(&self, from: &[ast::TableWithJoins]) -> Vec<Relation> {
        let mut out = Vec::new();
        let factors = from
            .iter()
            .flat_map(|t| std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)));
        for f in factors {
            // a subquery whose select list names its columns: `(SELECT a, b AS c ...) s`
            if let ast::TableFactor::Derived {
                subquery,
                alias: Some(alias),
                ..
            } = f
                && let Some(mut fields) = named_columns(subquery)
            {
                for (c, renamed) in fields.iter_mut().zip(&alias.columns) {
                    *c = normalize_ident(&renamed.name);
                }
                out.push(Relation {
                    seen: normalize_ident(&alias.name),
                    columns: fields.clone(),
                    fields,
                    scalar: false,
                });
                continue;
            }
            // a VALUES list: `(VALUES (1, 'a')) t(id, name)`, its columns `column1`... where
            // the alias does not name them
            if let ast::TableFactor::Derived {
                subquery,
                alias: Some(alias),
                ..
            } = f
                && let ast::SetExpr::Values(v) = subquery.body.as_ref()
                && let Some(first) = v.rows.first()
            {
                let fields: Vec<String> = (0..first.len())
                    .map(|i| {
                        alias
                            .columns
                            .get(i)
                            .map(|c| normalize_ident(&c.name))
                            .unwrap_or_else(|| format!("column{}", i + 1))
                    })
                    .collect();
                out.push(Relation {
                    seen: normalize_ident(&alias.name),
                    columns: fields.clone(),
                    fields,
                    scalar: false,
                });
                continue;
            }
            // `jsonb_array_elements(j) AS e`: the function returns one value per row, and its
            // alias used as a value is that value (its column is `value`, or the one name the
            // alias gives)
            if let ast::TableFactor::Table {
                name,
                alias: Some(alias),
                args: Some(_),
                with_ordinality: false,
                ..
            } = f
                && alias.columns.len() <= 1
                && name.0.last().and_then(|p| p.as_ident()).is_some_and(|i| {
                    matches!(
                        i.value.to_ascii_lowercase().as_str(),
                        "jsonb_array_elements"
                            | "json_array_elements"
                            | "jsonb_array_elements_text"
                            | "json_array_elements_text"
                    )
                })
            {
                let column = alias
                    .columns
                    .first()
                    .map_or_else(|| "value".to_owned(), |c| normalize_ident(&c.name));
                out.push(Relation {
                    seen: normalize_ident(&alias.name),
                    fields: vec![column.clone()],
                    columns: vec![column],
                    scalar: true,
                });
                continue;
            }
            let ast::TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } = f
            else {
                continue;
            };
            let Ok(rel) = relation_name(name) else {
                continue;
            };
            if name.0.len() == 1 && self.ctes.contains(&rel) {
                // a CTE whose select list names its columns
                if let Some(fields) = self.cte_columns.get(&rel) {
                    let seen = alias.as_ref().map_or(rel, |a| normalize_ident(&a.name));
                    out.push(Relation {
                        seen,
                        columns: fields.clone(),
                        fields: fields.clone(),
                        scalar: false,
                    });
                }
                continue;
            }
            let Some(entry) = self.engine.catalog.get(&rel) else {
                continue;
            };
            let fields: Vec<String> = entry.desc.columns.iter().map(|c| c.name.clone()).collect();
            let mut columns = fields.clone();
            let seen = match alias {
                Some(a) => {
                    // `t AS x(a, b)`: read as x.a, x.b; the row's fields keep the table's
                    // names, as in Postgres
                    for (c, renamed) in columns.iter_mut().zip(&a.columns) {
                        *c = normalize_ident(&renamed.name);
                    }
                    normalize_ident(&a.name)
                }
                None => rel,
            };
            out.push(Relation {
                seen,
                fields,
                columns,
                scalar: false,
            });
        }
        out
    }
}

/// A relation of a FROM clause: the name it is seen by, its row's field names and the
/// names its columns are read by there.
struct Relation {
    seen: String,
    fields: Vec<String>,
    columns: Vec<String>,
    /// A function returning one value per row: its row is that value, not a record.
    scalar: bool,
}

/// `weir_record('f1', "t"."c1", ...)`: the row of a relation (a scalar function's: its
/// value, `"e"."value"`).
fn row_of(r: &Relation) -> Expr {
    if r.scalar
        && let Some(c) = r.columns.first()
    {
        return Expr::CompoundIdentifier(vec![
            Ident::with_quote('"', r.seen.clone()),
            Ident::with_quote('"', c.clone()),
        ]);
    }
    let args = r
        .fields
        .iter()
        .zip(&r.columns)
        .flat_map(|(f, c)| {
            [
                Expr::value(ast::Value::SingleQuotedString(f.clone())),
                Expr::CompoundIdentifier(vec![
                    Ident::with_quote('"', r.seen.clone()),
                    Ident::with_quote('"', c.clone()),
                ]),
            ]
        })
        .map(|e| ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)))
        .collect();
    Expr::Function(ast::Function {
        name: ast::ObjectName::from(vec![Ident::new(crate::sql::json_build::RECORD)]),
        uses_odbc_syntax: false,
        parameters: ast::FunctionArguments::None,
        args: ast::FunctionArguments::List(ast::FunctionArgumentList {
            duplicate_treatment: None,
            args,
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

impl VisitorMut for Rows<'_> {
    type Break = ();

    /// `json[b]_populate_record[set](NULL::t, j)` in FROM: the object's (each element's)
    /// keys read as `t`'s columns — `jsonb_to_record[set](j) AS alias(col type, ...)` with
    /// the relation's columns, which `catalog/rewrite.rs` reads as it reads those.
    /// (PostgREST writes its bulk inserts this way.)
    fn pre_visit_table_factor(&mut self, tf: &mut ast::TableFactor) -> ControlFlow<()> {
        let ast::TableFactor::Table {
            name,
            args: Some(args),
            alias,
            ..
        } = tf
        else {
            return ControlFlow::Continue(());
        };
        let fname = name
            .0
            .last()
            .and_then(|p| p.as_ident())
            .map(normalize_ident)
            .unwrap_or_default();
        let set = match fname.as_str() {
            "json_populate_record" | "jsonb_populate_record" => false,
            "json_populate_recordset" | "jsonb_populate_recordset" => true,
            _ => return ControlFlow::Continue(()),
        };
        let [
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(Expr::Cast {
                expr: base,
                data_type: ast::DataType::Custom(row_type, _),
                ..
            })),
            json,
        ] = args.args.as_slice()
        else {
            return ControlFlow::Continue(());
        };
        if !matches!(base.as_ref(), Expr::Value(v) if matches!(v.value, ast::Value::Null)) {
            return ControlFlow::Continue(());
        }
        let Some(entry) = relation_name(row_type)
            .ok()
            .and_then(|n| self.engine.catalog.get(&n))
        else {
            return ControlFlow::Continue(());
        };
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        let columns: Option<Vec<ast::TableAliasColumnDef>> = entry
            .desc
            .columns
            .iter()
            .map(|c| {
                let ty = datafusion::sql::sqlparser::parser::Parser::new(&dialect)
                    .try_with_sql(&c.ty.display_name())
                    .and_then(|mut p| p.parse_data_type())
                    .ok()?;
                Some(ast::TableAliasColumnDef {
                    name: Ident::with_quote('"', c.name.clone()),
                    data_type: Some(ty),
                })
            })
            .collect();
        let Some(columns) = columns else {
            return ControlFlow::Continue(());
        };
        let new_name = if set {
            "jsonb_to_recordset"
        } else {
            "jsonb_to_record"
        };
        *name = ast::ObjectName::from(vec![Ident::new(new_name)]);
        args.args = vec![json.clone()];
        let alias_name = alias
            .as_ref()
            .map(|a| a.name.clone())
            .unwrap_or_else(|| Ident::new(fname));
        *alias = Some(ast::TableAlias {
            explicit: true,
            name: alias_name,
            columns,
            at: None,
        });
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, q: &mut ast::Query) -> ControlFlow<()> {
        if let Some(with) = &q.with {
            for cte in &with.cte_tables {
                let name = normalize_ident(&cte.alias.name);
                let columns = if cte.alias.columns.is_empty() {
                    named_columns(&cte.query)
                } else {
                    Some(
                        cte.alias
                            .columns
                            .iter()
                            .map(|c| normalize_ident(&c.name))
                            .collect(),
                    )
                };
                match columns {
                    Some(c) => self.cte_columns.insert(name, c),
                    None => self.cte_columns.remove(&name),
                };
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &mut ast::Select) -> ControlFlow<()> {
        let relations = self.relations(&select.from);
        if relations.is_empty() {
            return ControlFlow::Continue(());
        }
        let columns: HashSet<&str> = relations
            .iter()
            .flat_map(|r| r.columns.iter().map(String::as_str))
            .collect();
        let rows: HashMap<String, Expr> = relations
            .iter()
            .filter(|r| !columns.contains(r.seen.as_str()))
            .map(|r| (r.seen.clone(), row_of(r)))
            .collect();
        if rows.is_empty() {
            return ControlFlow::Continue(());
        }
        for item in select.projection.iter_mut() {
            // `SELECT t`, `SELECT t::text`, `SELECT (t)`: named t, as Postgres names them
            if let ast::SelectItem::UnnamedExpr(e) = item {
                let named = row_name(e);
                if let Some(name) = named.filter(|n| rows.contains_key(n)) {
                    let alias = Ident::with_quote('"', name);
                    let expr = std::mem::replace(e, Expr::value(ast::Value::Null));
                    *item = ast::SelectItem::ExprWithAlias { expr, alias };
                }
            }
            if let ast::SelectItem::UnnamedExpr(e)
            | ast::SelectItem::ExprWithAlias { expr: e, .. } = item
            {
                replace_rows(e, &rows);
            }
        }
        if let Some(e) = select.selection.as_mut() {
            replace_rows(e, &rows);
        }
        if let Some(e) = select.having.as_mut() {
            replace_rows(e, &rows);
        }
        if let ast::GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
            for e in exprs.iter_mut() {
                replace_rows(e, &rows);
            }
        }
        ControlFlow::Continue(())
    }
}

/// The relation a select item shows the row of, by Postgres' naming: `t`, `t.*`, `(t)`,
/// `t::text`.
fn row_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(id) => Some(normalize_ident(id)),
        Expr::QualifiedWildcard(name, _) => match name.0.as_slice() {
            [part] => part.as_ident().map(normalize_ident),
            _ => None,
        },
        Expr::Cast { expr, .. } | Expr::Nested(expr) => row_name(expr),
        _ => None,
    }
}

/// Whole-row names in the expressions of one SELECT (not in its subqueries, which have
/// FROM clauses of their own) replaced by their rows.
fn replace_rows<T: ast::VisitMut + ?Sized>(node: &mut T, rows: &HashMap<String, Expr>) {
    crate::catalog::rewrite::this_level_exprs_mut(node, |e| {
        match e {
            Expr::Identifier(id) => {
                if let Some(row) = rows.get(&normalize_ident(id)) {
                    *e = row.clone();
                }
            }
            // `t.col[1]`, `(t).col`: a column of t, not its row (the root was visited first)
            Expr::CompoundFieldAccess { root, .. } => {
                let inner = match root.as_ref() {
                    Expr::Nested(x) => x.as_ref(),
                    other => other,
                };
                if let Some((name, _)) = rows.iter().find(|(_, row)| **row == *inner) {
                    **root = Expr::Identifier(Ident::with_quote('"', name.clone()));
                }
            }
            // `(t.*)` as a value
            Expr::QualifiedWildcard(name, _) => {
                if let [part] = name.0.as_slice()
                    && let Some(row) = part.as_ident().and_then(|i| rows.get(&normalize_ident(i)))
                {
                    *e = row.clone();
                }
            }
            // `f(t.*)`: the row as one argument (`count(t.*)` counts rows as it is)
            Expr::Function(f)
                if !f
                    .name
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .is_some_and(|i| i.value.eq_ignore_ascii_case("count")) =>
            {
                if let ast::FunctionArguments::List(list) = &mut f.args {
                    for arg in list.args.iter_mut() {
                        if let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::QualifiedWildcard(
                            name,
                        )) = arg
                            && let [part] = name.0.as_slice()
                            && let Some(row) =
                                part.as_ident().and_then(|i| rows.get(&normalize_ident(i)))
                        {
                            *arg =
                                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(row.clone()));
                        }
                    }
                }
            }
            _ => {}
        }
    });
}
