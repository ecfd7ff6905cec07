//! Plain views (`CREATE [OR REPLACE] VIEW name [(columns)] AS query`, `DROP VIEW`): a named
//! query in the catalog (kind `View`, relkind `v`), expanded where it is read. Before a
//! statement is planned, each reference to a view becomes the derived table
//! `(query) AS name(columns)`, repeatedly for views over views (at most
//! [`MAX_VIEW_DEPTH`] deep, so a cycle cannot loop); a CTE of the same name shadows a view.
//! Materialized views may read plain views: they are expanded the same way when the
//! materialized view is planned (at CREATE and at every restart), and the materialized
//! view depends on them (DROP VIEW is refused while it exists, 2BP01).

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{self, VisitMut, VisitorMut};

use crate::catalog::{RelationDesc, RelationKind};
use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::{PlainView, relation_name};

/// How deep views over views may go.
pub const MAX_VIEW_DEPTH: usize = 32;

/// Names a statement defines as CTEs (they shadow views of the same name).
pub(crate) fn cte_names<T: ast::Visit>(node: &T) -> HashSet<String> {
    struct Ctes(HashSet<String>);
    impl ast::Visitor for Ctes {
        type Break = ();
        fn pre_visit_query(&mut self, q: &ast::Query) -> ControlFlow<()> {
            if let Some(w) = &q.with {
                for c in &w.cte_tables {
                    self.0
                        .insert(crate::sql::parser::normalize_ident(&c.alias.name));
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut v = Ctes(HashSet::new());
    let _ = node.visit(&mut v);
    v.0
}

/// `FROM t AS x(a)` naming fewer columns than `t` has: the others keep their names, as in
/// Postgres (DataFusion refuses a partial list: "Source table contains 2 columns but only 1
/// names given as column alias"); naming more is 42P10, in Postgres' words.
struct PadAliases<'a> {
    engine: &'a Engine,
    ctes: HashSet<String>,
}

impl VisitorMut for PadAliases<'_> {
    type Break = WeirError;
    fn post_visit_table_factor(&mut self, tf: &mut ast::TableFactor) -> ControlFlow<WeirError> {
        if let ast::TableFactor::Table {
            name,
            alias: Some(alias),
            args: None,
            ..
        } = tf
            && !alias.columns.is_empty()
            && let Ok(n) = relation_name(name)
            && !self.ctes.contains(&n)
            && let Some(entry) = self.engine.catalog.get(&n)
            && alias.columns.len() != entry.desc.columns.len()
        {
            let (named, has) = (alias.columns.len(), entry.desc.columns.len());
            if named > has {
                return ControlFlow::Break(WeirError::new(
                    "42P10",
                    format!(
                        "table \"{}\" has {has} columns available but {named} columns specified",
                        crate::sql::parser::normalize_ident(&alias.name)
                    ),
                ));
            }
            let rest = entry.desc.columns[alias.columns.len()..].iter();
            alias.columns.extend(rest.map(|c| ast::TableAliasColumnDef {
                name: ast::Ident::with_quote('"', c.name.clone()),
                data_type: None,
            }));
        }
        ControlFlow::Continue(())
    }
}

struct Expand<'a> {
    engine: &'a Engine,
    ctes: HashSet<String>,
    expanded: Vec<u32>,
    error: Option<WeirError>,
}

impl VisitorMut for Expand<'_> {
    type Break = ();
    fn post_visit_table_factor(&mut self, tf: &mut ast::TableFactor) -> ControlFlow<()> {
        let ast::TableFactor::Table {
            name,
            alias,
            args: None,
            ..
        } = tf
        else {
            return ControlFlow::Continue(());
        };
        let Ok(n) = relation_name(name) else {
            return ControlFlow::Continue(());
        };
        if self.ctes.contains(&n) {
            return ControlFlow::Continue(());
        }
        let Some(entry) = self.engine.catalog.get(&n) else {
            return ControlFlow::Continue(());
        };
        if entry.desc.kind != RelationKind::View {
            return ControlFlow::Continue(());
        }
        let Some(text) = &entry.desc.query else {
            return ControlFlow::Continue(());
        };
        let query = match crate::sql::parser::parse_query(text) {
            Ok(q) => q,
            Err(e) => {
                self.error = Some(e);
                return ControlFlow::Break(());
            }
        };
        self.expanded.push(entry.desc.oid);
        let alias = alias.clone().unwrap_or_else(|| ast::TableAlias {
            explicit: true,
            name: ast::Ident::with_quote('"', n.clone()),
            columns: vec![],
            at: None,
        });
        // the view's column names, unless the reference renames them
        let alias = if alias.columns.is_empty() {
            ast::TableAlias {
                columns: entry
                    .desc
                    .columns
                    .iter()
                    .map(|c| ast::TableAliasColumnDef {
                        name: ast::Ident::with_quote('"', c.name.clone()),
                        data_type: None,
                    })
                    .collect(),
                ..alias
            }
        } else {
            alias
        };
        *tf = ast::TableFactor::Derived {
            lateral: false,
            subquery: query,
            alias: Some(alias),
            sample: None,
        };
        ControlFlow::Continue(())
    }
}

impl Engine {
    /// Replace every reference to a plain view by its query; returns the views expanded.
    pub(crate) fn expand_plain_views<T: VisitMut + ast::Visit>(
        &self,
        node: &mut T,
    ) -> Result<Vec<u32>> {
        let mut pad = PadAliases {
            engine: self,
            ctes: cte_names(node),
        };
        if let ControlFlow::Break(e) = node.visit(&mut pad) {
            return Err(e);
        }
        if !self.catalog.has_kind(RelationKind::View) {
            return Ok(vec![]);
        }
        let mut all = Vec::new();
        for _ in 0..=MAX_VIEW_DEPTH {
            let mut x = Expand {
                engine: self,
                ctes: cte_names(node),
                expanded: vec![],
                error: None,
            };
            let _ = node.visit(&mut x);
            if let Some(e) = x.error {
                return Err(e);
            }
            if x.expanded.is_empty() {
                return Ok(all);
            }
            all.extend(x.expanded);
        }
        Err(WeirError::new(
            "42P17",
            format!("views nest more than {MAX_VIEW_DEPTH} deep (or read each other)"),
        ))
    }

    pub(crate) async fn create_plain_view(
        &self,
        session: &Session,
        v: &PlainView,
        text: &str,
    ) -> Result<Output> {
        let existing = self.catalog.get(&v.name);
        if let Some(e) = &existing
            && (!v.or_replace || e.desc.kind != RelationKind::View)
        {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_TABLE,
                format!("relation \"{}\" already exists", v.name),
            ));
        }
        // plan it: the query must be valid, and its columns are the view's
        let stmt = ast::Statement::Query(v.query.clone());
        let plan = self.plan_ast(session, &stmt).await?;
        if v.columns.len() > plan.schema().fields().len() {
            return Err(WeirError::syntax(
                "CREATE VIEW specifies more column names than columns",
            ));
        }
        let columns =
            crate::engine::views::view_columns(plan.schema(), &v.columns, "a view cannot show")?;
        // what it reads, for DROP ... RESTRICT
        let mut q = (*v.query).clone();
        let mut dependencies = self.expand_plain_views(&mut q)?;
        dependencies.extend(
            crate::engine::referenced_relations(&ast::Statement::Query(Box::new(q)))
                .iter()
                .filter_map(|n| self.catalog.get(n).map(|e| e.desc.oid)),
        );
        dependencies.sort_unstable();
        dependencies.dedup();
        let query = crate::sql::parser::query_text(&v.query);
        if let Some(e) = existing {
            // Postgres' rule: the new query may add columns at the end, not change them
            if columns.len() < e.desc.columns.len() {
                return Err(WeirError::new(
                    sqlstate::INVALID_TABLE_DEFINITION,
                    "cannot drop columns from view",
                ));
            }
            for (old, new) in e.desc.columns.iter().zip(&columns) {
                if old.name != new.name {
                    return Err(WeirError::new(
                        sqlstate::INVALID_TABLE_DEFINITION,
                        format!(
                            "cannot change name of view column \"{}\" to \"{}\"",
                            old.name, new.name
                        ),
                    ));
                }
                if old.ty != new.ty {
                    return Err(WeirError::new(
                        sqlstate::INVALID_TABLE_DEFINITION,
                        format!(
                            "cannot change data type of view column \"{}\" from {} to {}",
                            old.name,
                            old.ty.display_name(),
                            new.ty.display_name()
                        ),
                    ));
                }
            }
            if dependencies.contains(&e.desc.oid) {
                return Err(WeirError::new(
                    "42P17",
                    format!(
                        "infinite recursion detected in rules for relation \"{}\"",
                        v.name
                    ),
                ));
            }
            self.catalog.alter_relation(&v.name, |d| {
                d.columns = columns;
                d.query = Some(query);
                d.definition = text.to_owned();
                d.dependencies = dependencies;
                Ok(())
            })?;
            return Ok(Output::Command("CREATE VIEW".into()));
        }
        self.catalog.create(&v.name, false, |oid| {
            Ok(RelationDesc {
                oid,
                name: v.name.clone(),
                kind: RelationKind::View,
                columns,
                primary_key: vec![],
                watermark: None,
                definition: text.to_owned(),
                query: Some(query),
                dependencies,
                options: vec![],
                emit_on_window_close: false,
                append_only: false,
                owner: session.role(),
                acl: None,
                defaults: vec![],
                indexes: vec![],
                checks: vec![],
                foreign_keys: vec![],
                comments: Default::default(),
                not_valid: vec![],
                generated: vec![],
                time_zone: None,
                domains: vec![],
                restores_from: vec![],
            })
        })?;
        Ok(Output::Command("CREATE VIEW".into()))
    }
}
