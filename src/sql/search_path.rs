//! A session's `search_path` applied to the unqualified relation names a statement writes,
//! when parsing it. A relation of a user schema is keyed `app.t` (`catalog/schemas.rs`);
//! with `SET search_path TO app, public` an unqualified `t` is `app.t` if that exists, else
//! `t` of public if that exists, else (a name for a relation to create) the first schema of
//! the path: `app.t`. With public off the path (`SET search_path TO app`), a relation of
//! public is not found by its bare name, as in Postgres: the name resolves to
//! [`off_path_key`], a key no relation has (42P01 `relation "t" does not exist`).
//!
//! The server parses a statement inside [`with_path`] (set only when the path holds a user
//! schema, so the default path costs nothing); [`crate::sql::parser::relation_name`] asks
//! [`resolve`] for the names of Weir's own statements, and [`qualify`] rewrites the
//! relation names of the SQL trees DataFusion plans (queries, DML, the queries of views)
//! to their qualified form, `app.t`: a view stores its query so, and reads the same
//! relations whatever path a later session has. A name a WITH query defines is not a
//! relation's and is left alone.
//!
//! Names inside string literals are qualified too where a function reads a relation's name
//! from them (`nextval('s')`, `currval`, `setval`, `to_regclass`, `pg_get_serial_sequence`,
//! the size functions, `'t'::regclass`) when the string is a literal of the statement, and
//! the relation a table function's first argument names (`TUMBLE(t, ts, ...)`).

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

use datafusion::sql::sqlparser::ast;

/// The key of an existing relation (or type) an unqualified name reaches along the path.
pub type Find = Box<dyn Fn(&str) -> Option<String>>;

/// Finds an unqualified name along the path: the catalog key of the relation it names,
/// and the schema a relation of that name is created in.
pub struct PathResolver {
    pub find: Find,
    /// The first schema of the path that exists (None: public).
    pub create_in: Option<String>,
    /// No schema of the path exists: an unqualified name creates nothing (3F000).
    pub nowhere: bool,
}

/// What [`off_path_key`] puts before a name.
const OFF_PATH: &str = "public.";

/// The key an unqualified name of a relation of `public` resolves to when `public` is not on
/// the search path: `public.t`, which no relation has (public's are keyed bare), so the
/// name finds nothing and the statement fails as in Postgres.
pub fn off_path_key(name: &str) -> String {
    format!("{OFF_PATH}{name}")
}

/// A relation's key as a message names it: an [`off_path_key`] as it was written.
pub fn written(key: &str) -> &str {
    key.strip_prefix(OFF_PATH).unwrap_or(key)
}

/// A relation's name in a string (`nextval('s')`, `'t'::regclass`) as a message shows it:
/// an [`off_path_key`] there (quoted as one name) as it was written.
pub fn written_text(text: &str) -> &str {
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .and_then(|t| t.strip_prefix(OFF_PATH))
        .unwrap_or(text)
}

thread_local! {
    static RESOLVER: RefCell<Option<Rc<PathResolver>>> = const { RefCell::new(None) };
}

/// Run `f` (a parse) with `resolver` applying the session's path; the thread's resolver
/// before is back afterwards, also when `f` panics (the thread parses for other sessions
/// next).
pub fn with_path<T>(resolver: PathResolver, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Rc<PathResolver>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0.take();
            RESOLVER.with(|r| *r.borrow_mut() = before);
        }
    }
    let _restore = Restore(RESOLVER.with(|r| r.replace(Some(Rc::new(resolver)))));
    f()
}

fn current() -> Option<Rc<PathResolver>> {
    RESOLVER.with(|r| r.borrow().clone())
}

/// The catalog key of the relation an unqualified name reaches along the path being
/// applied; None when no path is or it reaches none (the name stays as written: a
/// relation that does not exist is named so in the error).
pub fn resolve(name: &str) -> Option<String> {
    let r = current()?;
    (r.find)(name)
}

/// The catalog key of a relation (or type) an unqualified name creates under the path
/// being applied: in its first schema. None: public. 3F000 when no schema of the path
/// exists, as Postgres says.
pub fn created(name: &str) -> crate::error::Result<Option<String>> {
    let Some(r) = current() else { return Ok(None) };
    if r.nowhere {
        return Err(crate::error::WeirError::new(
            crate::error::sqlstate::INVALID_SCHEMA_NAME,
            "no schema has been selected to create in",
        ));
    }
    Ok(r.create_in
        .as_deref()
        .map(|s| crate::sql::parser::relation_key(Some(s), name)))
}

/// Qualify the unqualified relation names of a SQL tree that reach a user schema's
/// relation along the path being applied (`t` → `app.t`).
pub fn qualify<V: ast::VisitMut>(node: &mut V) {
    use crate::sql::parser::{normalize_ident, relation_object_name};
    let Some(r) = current() else { return };
    // the names WITH queries define: not relations
    let mut ctes: HashSet<String> = HashSet::new();
    collect_ctes(node, &mut ctes);
    // the key of the user schema's relation (or type) a name reaches along the path; None
    // for public's, a WITH query's or nothing
    let reach = |n: &str| -> Option<String> {
        if ctes.contains(n) {
            return None;
        }
        (r.find)(n).filter(|k| k.contains('.'))
    };
    let _ = ast::visit_relations_mut(node, |name| {
        if let [part] = name.0.as_slice()
            && let Some(key) = part.as_ident().and_then(|i| reach(&normalize_ident(i)))
        {
            *name = relation_object_name(&key);
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
    // a table function's relation argument: `TUMBLE(ev, ts, ...)`, `HOP(ev, ...)`
    struct TableArgs<'a>(&'a dyn Fn(&str) -> Option<String>);
    impl ast::VisitorMut for TableArgs<'_> {
        type Break = ();
        fn pre_visit_table_factor(
            &mut self,
            t: &mut ast::TableFactor,
        ) -> std::ops::ControlFlow<()> {
            if let ast::TableFactor::Table {
                args: Some(args), ..
            } = t
                && let Some(ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e))) =
                    args.args.first_mut()
                && let ast::Expr::Identifier(ident) = e
                && let Some(key) = (self.0)(&normalize_ident(ident))
            {
                let mut parts: Vec<ast::Ident> = relation_object_name(&key)
                    .0
                    .iter()
                    .filter_map(|p| p.as_ident().cloned())
                    .collect();
                *e = match parts.len() {
                    1 => ast::Expr::Identifier(parts.remove(0)),
                    _ => ast::Expr::CompoundIdentifier(parts),
                };
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = node.visit(&mut TableArgs(&reach));
    // a relation named in a string (`nextval('s')`, `'t'::regclass`, ... reach the path's
    // relation: `'app.s'`), and a cast to a user schema's type (`'x'::mood` is `app.mood`)
    let qualified_text = |v: &mut ast::Expr| {
        if let ast::Expr::Value(v) = v
            && let ast::Value::SingleQuotedString(text) = &mut v.value
            && let [n] = crate::catalog::pg_catalog::name_parts(text).as_slice()
            && let Some(key) = reach(n)
        {
            *text = match key.strip_prefix(OFF_PATH) {
                // (one quoted name: found nowhere)
                Some(_) => crate::sql::pg_text::quote_ident(&key),
                None => crate::catalog::schemas::quote_relation(&key),
            };
        }
    };
    let _ = ast::visit_expressions_mut(node, |e| {
        match e {
            ast::Expr::Function(f) => {
                let name = f.name.to_string().to_ascii_lowercase();
                let name = name.trim_start_matches("pg_catalog.");
                if matches!(
                    name,
                    "nextval"
                        | "currval"
                        | "setval"
                        | "to_regclass"
                        | "pg_get_serial_sequence"
                        | "pg_relation_size"
                        | "pg_total_relation_size"
                        | "pg_table_size"
                        | "pg_indexes_size"
                ) && let ast::FunctionArguments::List(list) = &mut f.args
                    && let Some(ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(first))) =
                        list.args.first_mut()
                {
                    qualified_text(first);
                }
            }
            ast::Expr::Cast {
                expr, data_type, ..
            } => match data_type {
                ast::DataType::Regclass => qualified_text(expr),
                ast::DataType::Custom(name, args) if args.is_empty() => {
                    if let [part] = name.0.as_slice()
                        && let Some(key) = part.as_ident().and_then(|i| reach(&normalize_ident(i)))
                    {
                        *name = relation_object_name(&key);
                    }
                }
                _ => {}
            },
            _ => {}
        }
        std::ops::ControlFlow::<()>::Continue(())
    });
}

/// The names every WITH query in `node` defines.
fn collect_ctes<V: ast::VisitMut>(node: &mut V, out: &mut HashSet<String>) {
    struct Ctes<'a>(&'a mut HashSet<String>);
    impl ast::VisitorMut for Ctes<'_> {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut ast::Query) -> std::ops::ControlFlow<()> {
            if let Some(with) = &q.with {
                for c in &with.cte_tables {
                    self.0
                        .insert(crate::sql::parser::normalize_ident(&c.alias.name));
                }
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let _ = node.visit(&mut Ctes(out));
}
