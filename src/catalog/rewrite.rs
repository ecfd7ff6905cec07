//! Rewrites of parsed statements so that Postgres spellings plan in DataFusion and results
//! carry the column names Postgres would give them.
//!
//! - `OPERATOR(pg_catalog.~)` becomes `~`; `COLLATE ...` is dropped (comparisons are
//!   byte-wise, as with the C collation);
//! - `pg_catalog.f(...)` calls lose their qualifier; `current_user` and friends become calls;
//! - `x::regclass` (and `regtype`, `regnamespace`, `regrole`, `regproc`) become calls of
//!   `weir_regclass(x)`..., which map names to OIDs and OIDs to names; other
//!   `pg_catalog.`-qualified type names lose the qualifier;
//! - `ARRAY(subquery)` becomes `(SELECT array_agg(c) FROM (subquery) AS s(c))`;
//! - unnamed select items get Postgres' names (`count`, `?column?`, `version`...).
//!   DataFusion needs unique names, so a repeated name gets an invisible suffix
//!   ([`DUPLICATE_NAME_MARKER`] and a number) that the wire encoder strips.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, BinaryOperator, CastKind, Expr, FunctionArg, FunctionArgExpr, FunctionArgumentList,
    FunctionArguments, Ident, ObjectName, ObjectNamePart, SelectItem, VisitMut, VisitorMut,
};

/// Separates a repeated result column name from its disambiguating number.
pub const DUPLICATE_NAME_MARKER: char = '\u{1}';

/// The result column name a client should see.
pub fn display_column_name(name: &str) -> &str {
    name.split(DUPLICATE_NAME_MARKER).next().unwrap_or(name)
}

/// What a rewrite found.
#[derive(Debug, Default, Clone, Copy)]
pub struct RewriteInfo {
    /// A SESSION window was used (only materialized views can run it).
    pub session_windows: bool,
}

pub fn rewrite_statement(stmt: &mut ast::Statement) -> crate::error::Result<RewriteInfo> {
    if let ast::Statement::Insert(ins) = stmt
        && let Some(source) = ins.source.as_mut()
    {
        insert_nested_values(source);
    }
    let mut r = PgRewriter::default();
    if let ControlFlow::Break(e) = stmt.visit(&mut r) {
        return Err(e);
    }
    // (after the select items are named: the column stays `current_setting`)
    settings_read_after_set_config(stmt);
    Ok(r.info)
}

/// In a statement that calls `set_config`, `current_setting` reads the setting when it is
/// evaluated, after a `set_config` before it (`SELECT set_config('x', '1', false),
/// current_setting('x')` is `1 | 1`, as in Postgres): it becomes the volatile
/// `weir_current_setting` (elsewhere it is read once, when the statement is planned).
fn settings_read_after_set_config(stmt: &mut ast::Statement) {
    struct Calls {
        name: &'static str,
        found: bool,
        rename_to: Option<&'static str>,
    }
    impl VisitorMut for Calls {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
            if let Expr::Function(f) = e
                && last_name(&f.name).as_deref() == Some(self.name)
            {
                self.found = true;
                if let Some(to) = self.rename_to {
                    f.name = ObjectName::from(vec![Ident::new(to)]);
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut sets = Calls {
        name: "set_config",
        found: false,
        rename_to: None,
    };
    let _ = stmt.visit(&mut sets);
    if sets.found {
        let _ = stmt.visit(&mut Calls {
            name: "current_setting",
            found: false,
            rename_to: Some("weir_current_setting"),
        });
    }
}

/// `GROUP BY DISTINCT a, ROLLUP(b, c), ...` (marked by the parser:
/// `sql::parser::GROUP_BY_DISTINCT`): the grouping sets its items make together (each
/// item's sets crossed with the others', as Postgres expands them), each a set of
/// distinct expressions, the duplicate sets left out, as one `GROUPING SETS (...)`.
fn group_by_distinct(select: &mut ast::Select) {
    let ast::GroupByExpr::Expressions(exprs, _) = &mut select.group_by else {
        return;
    };
    let marked = matches!(exprs.first(), Some(Expr::Function(f))
        if f.name.to_string().eq_ignore_ascii_case(crate::sql::parser::GROUP_BY_DISTINCT));
    if !marked {
        return;
    }
    exprs.remove(0);
    let mut product: Vec<Vec<Expr>> = vec![vec![]];
    for e in exprs.iter() {
        let sets: Vec<Vec<Expr>> = match e {
            // (a, b, c), (a, b), (a), ()
            Expr::Rollup(parts) => (0..=parts.len())
                .rev()
                .map(|n| parts[..n].concat())
                .collect(),
            // (a, b), (a), (b), (): the subsets, the first part the highest bit
            Expr::Cube(parts) => (0..1usize << parts.len())
                .rev()
                .map(|mask| {
                    parts
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| mask & (1 << (parts.len() - 1 - i)) != 0)
                        .flat_map(|(_, p)| p.iter().cloned())
                        .collect()
                })
                .collect(),
            Expr::GroupingSets(sets) => sets.clone(),
            Expr::Tuple(t) if t.is_empty() => vec![vec![]],
            other => vec![vec![other.clone()]],
        };
        product = product
            .iter()
            .flat_map(|p| sets.iter().map(move |s| [p.clone(), s.clone()].concat()))
            .collect();
    }
    let mut seen: Vec<Vec<String>> = Vec::new();
    let mut out: Vec<Vec<Expr>> = Vec::new();
    for set in product {
        let mut distinct: Vec<Expr> = Vec::new();
        for e in set {
            if !distinct.contains(&e) {
                distinct.push(e);
            }
        }
        let mut key: Vec<String> = distinct.iter().map(|e| e.to_string()).collect();
        key.sort();
        if !seen.contains(&key) {
            seen.push(key);
            out.push(distinct);
        }
    }
    *exprs = vec![Expr::GroupingSets(out)];
}

pub fn rewrite_query(q: &mut ast::Query) -> crate::error::Result<RewriteInfo> {
    let mut r = PgRewriter::default();
    if let ControlFlow::Break(e) = q.visit(&mut r) {
        return Err(e);
    }
    Ok(r.info)
}

/// DataFusion plans every VALUES list inside an INSERT's source with the target table's
/// schema (its width and types), so a VALUES of another shape in a derived table or WITH
/// query fails (`INSERT INTO t SELECT 1, 'x', v FROM (VALUES (1), (2)) AS s(v)`:
/// "Inconsistent data length across values list"). Such a nested VALUES becomes the
/// `SELECT ... UNION ALL SELECT ...` of its rows (columns `column1`, ... as VALUES names
/// them); the source's own VALUES keeps the table's types.
fn insert_nested_values(source: &mut ast::Query) {
    struct Nested {
        top: bool,
    }
    impl ast::VisitorMut for Nested {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut ast::Query) -> ControlFlow<()> {
            if std::mem::take(&mut self.top) {
                return ControlFlow::Continue(());
            }
            if let ast::SetExpr::Values(v) = q.body.as_ref()
                && !v.rows.is_empty()
            {
                let selects: Vec<String> = v
                    .rows
                    .iter()
                    .map(|r| {
                        let items: Vec<String> = r
                            .content
                            .iter()
                            .enumerate()
                            .map(|(i, e)| format!("{e} AS column{}", i + 1))
                            .collect();
                        format!("SELECT {}", items.join(", "))
                    })
                    .collect();
                if let Some(u) = parse_query_text(&selects.join(" UNION ALL ")) {
                    q.body = u.body;
                }
            }
            ControlFlow::Continue(())
        }
    }
    let _ = source.visit(&mut Nested { top: true });
}

#[derive(Default)]
struct PgRewriter {
    info: RewriteInfo,
    /// Nesting of the query being visited (1 = the statement's own query).
    depth: usize,
}

impl VisitorMut for PgRewriter {
    type Break = crate::error::WeirError;

    /// (before what it holds is visited: a table function replaced by a derived table has
    /// the derived table's query rewritten too)
    fn pre_visit_table_factor(&mut self, tf: &mut ast::TableFactor) -> ControlFlow<Self::Break> {
        numeric_series_in_from(tf);
        ControlFlow::Continue(())
    }

    fn post_visit_table_factor(&mut self, tf: &mut ast::TableFactor) -> ControlFlow<Self::Break> {
        // `pg_catalog.generate_series(...)` in FROM: table functions are found unqualified
        if let ast::TableFactor::Table {
            name,
            args: Some(_),
            ..
        } = tf
            && name.0.len() == 2
            && name.0[0]
                .as_ident()
                .is_some_and(|i| i.value.eq_ignore_ascii_case("pg_catalog"))
        {
            name.0.remove(0);
        }
        // `pg_catalog.unnest(a)` in FROM is the UNNEST that `unnest(a)` parses as
        if let ast::TableFactor::Table {
            name,
            args: Some(args),
            alias,
            with_ordinality,
            ..
        } = tf
            && last_name(name).as_deref() == Some("unnest")
            && name.0.len() == 1
            && args.settings.is_none()
            && let Some(exprs) = only_plain_args(&args.args).filter(|e| !e.is_empty())
        {
            *tf = ast::TableFactor::UNNEST {
                alias: alias.take(),
                array_exprs: exprs,
                with_offset: false,
                with_offset_alias: None,
                with_ordinality: *with_ordinality,
            };
        }
        datetime_text_in_table_function_args(tf);
        if let ast::TableFactor::Table {
            name,
            args: Some(args),
            ..
        } = tf
            && last_name(name).as_deref() == Some("generate_series")
            && args.args.len() == 3
        {
            series_text_arguments(&mut args.args);
        }
        if let ast::TableFactor::UNNEST { array_exprs, .. } = tf {
            array_exprs.iter_mut().for_each(all_elements);
        }
        unnest_alias_names_column(tf);
        values_alias_padded(tf);
        aliased_using_join(tf);
        renamed_star_over_using(tf);
        session_views(tf);
        match crate::sql::windows::rewrite_table_factor(tf) {
            Ok(session) => {
                self.info.session_windows |= session;
                function_in_from(tf);
                ControlFlow::Continue(())
            }
            Err(e) => ControlFlow::Break(e),
        }
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Self::Break> {
        // `localtimestamp(p)` / `localtime(p)`: the transaction's time to p fractional
        // digits, as the cast written so (rewritten below as every cast is)
        if let Expr::Function(f) = expr
            && let Some(lname) = last_name(&f.name)
            && matches!(lname.as_str(), "localtimestamp" | "localtime")
            && let FunctionArguments::List(l) = &f.args
            && let [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(Expr::Value(v)))] =
                l.args.as_slice()
            && let ast::Value::Number(p, _) = &v.value
            && p.parse::<u8>().is_ok()
        {
            let to = if lname == "localtime" {
                "TIME"
            } else {
                "TIMESTAMP"
            };
            *expr = parse_expr(&format!("CAST(now() AS {to}({p}))"));
        }
        // `x::"int4"`, `CAST(x AS "varchar"(3))`: the built-in type, seen as such below
        if let Expr::Cast { data_type, .. } = expr
            && let Some(t) = crate::sql::types::unquoted_builtin(data_type)
        {
            *data_type = t;
        }
        if let Err(e) = row_in_subquery_width(expr) {
            return ControlFlow::Break(e);
        }
        if let Some(e) = row_in_subquery(expr, false) {
            *expr = e;
        }
        // `pg_catalog.pg_class.relname` → `pg_class.relname` (SQLAlchemy qualifies every
        // column so; the catalog rewrites below look at `table.column` pairs)
        if let Expr::CompoundIdentifier(ids) = expr
            && ids.len() == 3
            && ids[0].value.eq_ignore_ascii_case("pg_catalog")
        {
            ids.remove(0);
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<Self::Break> {
        if let Err(e) = similar_to(expr) {
            return ControlFlow::Break(e);
        }
        if let Err(e) = aggregate_literal_arguments(expr) {
            return ControlFlow::Break(e);
        }
        // `x = ANY (SELECT a, b ...)`, refused before it becomes `ARRAY(SELECT ...)`
        if let Expr::AnyOp { right, .. } | Expr::AllOp { right, .. } = expr
            && let Expr::Subquery(q) = right.as_ref()
            && let ast::SetExpr::Select(s) = q.body.as_ref()
            && s.projection.len() > 1
        {
            return ControlFlow::Break(crate::error::WeirError::new(
                crate::error::sqlstate::SYNTAX_ERROR,
                "subquery has too many columns",
            ));
        }
        rewrite_expr(expr);
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, q: &mut ast::Query) -> ControlFlow<Self::Break> {
        self.depth += 1;
        if let Err(e) = fetch_as_limit(q) {
            return ControlFlow::Break(e);
        }
        if let Err(e) = mark_bag_operands(&mut q.body) {
            return ControlFlow::Break(e);
        }
        outer_using_references(q);
        order_by_reads_input_columns(q, self.depth == 1);
        // before the functions in FROM are read as tables (`function_in_from`)
        lateral_in_body(&mut q.body);
        int4_values_in_from(&mut q.body);
        typed_values_columns(&mut q.body);
        untyped_values_literals(&mut q.body);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, q: &mut ast::Query) -> ControlFlow<Self::Break> {
        self.depth = self.depth.saturating_sub(1);
        distinct_cast_aggregates(q);
        limit_parameters(q);
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &mut ast::Select) -> ControlFlow<Self::Break> {
        if let Some(w) = select.selection.as_mut() {
            row_in_subquery_conjuncts(w);
        }
        group_by_distinct(select);
        // `GROUP BY ()` (alone: one group of every row; beside other keys: nothing)
        if let ast::GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
            exprs.retain(|e| !matches!(e, Expr::Tuple(t) if t.is_empty()));
        }
        // named as written, before the expressions are rewritten (`array_upper(a, 1)` is
        // "array_upper", `|/ x` is "?column?", whatever they become)
        name_select_items(&mut select.projection);
        table_oid_column(select);
        qualify_wildcards(select);
        ControlFlow::Continue(())
    }

    fn post_visit_select(&mut self, select: &mut ast::Select) -> ControlFlow<Self::Break> {
        name_select_items(&mut select.projection);
        set_returning_in_select_list(&mut select.projection);
        unnest_beside_shadowing_alias(select);
        for item in select.projection.iter_mut() {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                int4_literal(e);
                numeric_literal_with_its_scale(e);
            }
        }
        mark_star_over_using(select);
        let outer = single_relation_name(select);
        for item in select.projection.iter_mut() {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                subquery_predicates_as_counts(e, outer.as_ref());
            }
        }
        // only what the client sees: subqueries keep comparing OIDs
        if self.depth <= 1 {
            show_reg_casts(&mut select.projection);
        }
        ControlFlow::Continue(())
    }
}

/// `CASE x WHEN 't' THEN ...` (TypeORM's over `pg_index.indisunique`): each quoted value is
/// of `x`'s type, as Postgres reads an untyped literal; written as `CASE WHEN x = 't' ...`,
/// whose comparison types it (DataFusion's CASE found no common type for a boolean and
/// text). The operand is evaluated once per WHEN (it is a column or a plain expression in
/// practice).
fn simple_case_with_quoted_values(expr: &mut Expr) {
    let Expr::Case {
        operand: operand @ Some(_),
        conditions,
        ..
    } = expr
    else {
        return;
    };
    if !conditions.iter().any(|c| is_string_literal(&c.condition)) {
        return;
    }
    let Some(x) = operand.take() else {
        return;
    };
    for c in conditions.iter_mut() {
        let value = std::mem::replace(&mut c.condition, Expr::value(ast::Value::Null));
        c.condition = Expr::BinaryOp {
            left: x.clone(),
            op: ast::BinaryOperator::Eq,
            right: Box::new(value),
        };
    }
}

/// `SELECT unnest(c.conkey) AS k, NOT c.flag AS flag FROM c` (TypeORM's foreign-key
/// query): DataFusion plans a select list with UNNEST keeping the input's columns beside
/// the items, so an alias that is also the name of a column it reads (`flag`) is "ambiguous".
/// The SELECT becomes an outer one over it as a derived table, where those items are named
/// `__weir_shadow_N` and renamed back (only for a SELECT whose every item has a name and
/// that does not group, dedupe or filter by HAVING).
fn unnest_beside_shadowing_alias(select: &mut ast::Select) {
    use ast::Visit;
    if select.distinct.is_some()
        || select.having.is_some()
        || !matches!(&select.group_by, ast::GroupByExpr::Expressions(g, _) if g.is_empty())
    {
        return;
    }
    let mut has_unnest = false;
    let mut read: HashSet<String> = HashSet::new();
    let _ = select.projection.visit(&mut FnVisitor(|e: &Expr| match e {
        Expr::Function(f) if last_name(&f.name).as_deref() == Some("unnest") => has_unnest = true,
        Expr::Identifier(i) => {
            read.insert(crate::sql::parser::normalize_ident(i));
        }
        Expr::CompoundIdentifier(ids) => {
            if let Some(i) = ids.last() {
                read.insert(crate::sql::parser::normalize_ident(i));
            }
        }
        _ => {}
    }));
    if !has_unnest {
        return;
    }
    let mut names = Vec::with_capacity(select.projection.len());
    let mut shadowing = false;
    for item in &select.projection {
        match item {
            SelectItem::ExprWithAlias { alias, .. } => {
                let n = crate::sql::parser::normalize_ident(alias);
                shadowing |= read.contains(&n);
                names.push((alias.clone(), read.contains(&n)));
            }
            SelectItem::UnnamedExpr(Expr::Identifier(i)) => names.push((i.clone(), false)),
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(ids)) if !ids.is_empty() => {
                names.push((ids[ids.len() - 1].clone(), false));
            }
            _ => return,
        }
    }
    if !shadowing {
        return;
    }
    let Ok(mut outer_query) =
        crate::sql::parser::parse_query("SELECT 1 FROM (SELECT 1) AS __weir_srf")
    else {
        return;
    };
    let ast::SetExpr::Select(outer) = outer_query.body.as_mut() else {
        return;
    };
    let mut inner = std::mem::replace(select, (**outer).clone());
    let mut shown = Vec::with_capacity(names.len());
    for (k, (item, (name, shadows))) in inner.projection.iter_mut().zip(names).enumerate() {
        let inner_name = if shadows {
            let renamed = Ident::new(format!("__weir_shadow_{k}"));
            if let SelectItem::ExprWithAlias { alias, .. } = item {
                *alias = renamed.clone();
            }
            renamed
        } else {
            name.clone()
        };
        shown.push(SelectItem::ExprWithAlias {
            expr: Expr::CompoundIdentifier(vec![Ident::new("__weir_srf"), inner_name]),
            alias: name,
        });
    }
    select.projection = shown;
    if let Some(t) = select.from.first_mut()
        && let ast::TableFactor::Derived { subquery, .. } = &mut t.relation
    {
        *subquery.body = ast::SetExpr::Select(Box::new(inner));
    }
}

/// A visitor calling `f` on every expression (subqueries included).
struct FnVisitor<F: FnMut(&Expr)>(F);

impl<F: FnMut(&Expr)> ast::Visitor for FnVisitor<F> {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
        (self.0)(e);
        ControlFlow::Continue(())
    }
}

/// `LIMIT $1`, `OFFSET $2`, `FETCH FIRST $1 ROWS` (Knex's and Drizzle's `.first()` /
/// `.limit(n)`): the parameter is a `bigint`, as Postgres types it (DataFusion left it
/// untyped, read the text a client sent and refused a text LIMIT).
fn limit_parameters(q: &mut ast::Query) {
    let as_bigint = |e: &mut Expr| {
        if matches!(e, Expr::Value(v) if matches!(v.value, ast::Value::Placeholder(_))) {
            let p = std::mem::replace(e, Expr::value(ast::Value::Null));
            *e = Expr::Cast {
                kind: CastKind::Cast,
                expr: Box::new(p),
                data_type: ast::DataType::BigInt(None),
                array: false,
                format: None,
            };
        }
    };
    if let Some(ast::LimitClause::LimitOffset { limit, offset, .. }) = q.limit_clause.as_mut() {
        if let Some(l) = limit.as_mut() {
            as_bigint(l);
        }
        if let Some(o) = offset.as_mut() {
            as_bigint(&mut o.value);
        }
    }
    if let Some(f) = q.fetch.as_mut()
        && let Some(n) = f.quantity.as_mut()
    {
        as_bigint(n);
    }
}

/// `SELECT t.* FROM public.t` (TypeORM's `columns.*` over `information_schema.columns`):
/// the wildcard qualified as the FROM clause names the table, which DataFusion matches
/// exactly (`t` is not `public.t`; a column `t.a` resolves either way).
fn qualify_wildcards(select: &mut ast::Select) {
    let mut full: Vec<(String, ast::ObjectName)> = Vec::new();
    for t in &select.from {
        for f in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
            if let ast::TableFactor::Table {
                name,
                alias: None,
                args: None,
                ..
            } = f
                && name.0.len() > 1
                && let Some(last) = name.0.last().and_then(|p| p.as_ident())
            {
                full.push((crate::sql::parser::normalize_ident(last), name.clone()));
            }
        }
    }
    if full.is_empty() {
        return;
    }
    for item in select.projection.iter_mut() {
        if let SelectItem::QualifiedWildcard(ast::SelectItemQualifiedWildcardKind::ObjectName(q), _) =
            item
            && let [part] = q.0.as_slice()
            && let Some(id) = part.as_ident()
            && let Some((_, name)) = full
                .iter()
                .find(|(n, _)| *n == crate::sql::parser::normalize_ident(id))
        {
            *q = name.clone();
        }
    }
}

/// The catalog views whose rows depend on who reads them, read through a query that asks
/// the session: `pg_settings` is the session's settings, as Postgres' view is
/// (`current_setting(name)` per row: what SET changed shows; the catalog table has the
/// defaults); `pg_stat_activity` shows the sessions of roles whose privileges the reader
/// has (or all, with `pg_read_all_stats`), and of the others only who they are (their
/// query `<insufficient privilege>`, the rest NULL), as Postgres' `pg_stat_get_activity`;
/// `pg_stat_ssl` lists only those sessions (Postgres' view keeps the rows whose
/// `client_port` it may see).
fn session_views(tf: &mut ast::TableFactor) {
    let ast::TableFactor::Table {
        name,
        alias,
        args: None,
        ..
    } = tf
    else {
        return;
    };
    let qualified_elsewhere = name.0.len() == 2
        && !name.0[0]
            .as_ident()
            .is_some_and(|i| i.value.eq_ignore_ascii_case("pg_catalog"));
    if qualified_elsewhere {
        return;
    }
    // whether the reader may see a session of the role `usesysid`
    const SEEN: &str =
        "(pg_has_role(usesysid, 'USAGE') OR pg_has_role('pg_read_all_stats', 'USAGE'))";
    let (view, query) = match last_name(name).as_deref() {
        Some("pg_settings") => (
            "pg_settings",
            "SELECT name, weir_setting_in_unit(name, current_setting(name)) AS setting, unit, \
             category, short_desc, context, vartype, source, boot_val, reset_val \
             FROM pg_catalog.pg_settings"
                .to_owned(),
        ),
        Some("pg_stat_activity") => {
            let hidden = [
                "client_addr",
                "client_hostname",
                "client_port",
                "backend_start",
                "xact_start",
                "query_start",
                "state_change",
                "wait_event_type",
                "wait_event",
                "state",
            ];
            let masked: Vec<String> = hidden
                .iter()
                .map(|c| format!("CASE WHEN weir_seen THEN {c} END AS {c}"))
                .collect();
            (
                "pg_stat_activity",
                format!(
                    "SELECT datid, datname, pid, leader_pid, usesysid, usename, application_name, \
                     {}, backend_xid, backend_xmin, \
                     CASE WHEN weir_seen THEN query_id END AS query_id, \
                     CASE WHEN weir_seen THEN query ELSE '<insufficient privilege>' END AS query, \
                     CASE WHEN weir_seen THEN backend_type END AS backend_type \
                     FROM (SELECT *, coalesce({SEEN}, false) AS weir_seen \
                     FROM pg_catalog.pg_stat_activity) AS a",
                    masked.join(", ")
                ),
            )
        }
        Some("pg_stat_ssl") => (
            "pg_stat_ssl",
            format!(
                "SELECT s.* FROM pg_catalog.pg_stat_ssl AS s \
                 JOIN pg_catalog.pg_stat_activity AS a ON a.pid = s.pid WHERE {SEEN}"
            ),
        ),
        _ => return,
    };
    let Some(q) = parse_query_text(&query) else {
        return;
    };
    let alias = alias.clone().unwrap_or_else(|| ast::TableAlias {
        explicit: true,
        name: Ident::new(view),
        columns: vec![],
        at: None,
    });
    *tf = ast::TableFactor::Derived {
        lateral: false,
        subquery: q,
        alias: Some(alias),
        sample: None,
    };
}

/// `(a JOIN b USING (k)) AS x`: Postgres' `x` has the join's columns as `SELECT *` shows
/// them (one `k`); DataFusion's alias of a join keeps both. The aliased join becomes
/// `(SELECT * FROM a JOIN b USING (k)) AS x`.
fn aliased_using_join(tf: &mut ast::TableFactor) {
    let ast::TableFactor::NestedJoin {
        table_with_joins,
        alias: Some(alias),
    } = tf
    else {
        return;
    };
    let using = table_with_joins.joins.iter().any(|j| {
        use ast::{JoinConstraint as C, JoinOperator as O};
        match &j.join_operator {
            O::Join(c)
            | O::Inner(c)
            | O::Left(c)
            | O::LeftOuter(c)
            | O::Right(c)
            | O::RightOuter(c)
            | O::FullOuter(c) => matches!(c, C::Using(_) | C::Natural),
            _ => false,
        }
    });
    if !using {
        return;
    }
    // (not marked for Postgres' column order of chained USING joins: the marker column
    // would be seen through the alias before the analyzer removes it)
    let Some(q) = parse_query_text(&format!("SELECT * FROM {table_with_joins}")) else {
        return;
    };
    *tf = ast::TableFactor::Derived {
        lateral: false,
        subquery: q,
        alias: Some(alias.clone()),
        sample: None,
    };
}

/// An unqualified USING column of a join is, as in Postgres, the left side's column
/// (INNER, LEFT), the right side's (RIGHT) or `COALESCE(left, right)` (FULL): DataFusion
/// reads it as the left side's, or in a WHERE calls it ambiguous. Written out here in the
/// select list, WHERE,
/// GROUP BY, HAVING and ORDER BY of the query's own level (an ORDER BY name that is also
/// an output column's alias stays that column), for a join whose two sides are named
/// relations (the first join of its FROM item; a longer chain is left as it is).
fn outer_using_references(q: &mut ast::Query) {
    use ast::JoinOperator as J;
    let ast::SetExpr::Select(select) = q.body.as_mut() else {
        return;
    };
    let mut merged: Vec<(String, Expr)> = Vec::new();
    for t in &select.from {
        let Some(j) = t.joins.first() else { continue };
        #[derive(PartialEq)]
        enum Side {
            Left,
            Right,
            Both,
        }
        let (c, side_of) = match &j.join_operator {
            J::Join(c) | J::Inner(c) | J::Left(c) | J::LeftOuter(c) => (c, Side::Left),
            J::Right(c) | J::RightOuter(c) => (c, Side::Right),
            J::FullOuter(c) => (c, Side::Both),
            _ => continue,
        };
        let ast::JoinConstraint::Using(cols) = c else {
            continue;
        };
        let (Some(l), Some(r)) = (relation_alias(&t.relation), relation_alias(&j.relation)) else {
            continue;
        };
        for col in cols {
            let Some(name) = col.0.last().and_then(|p| p.as_ident()) else {
                continue;
            };
            let side = |rel: &Ident| Expr::CompoundIdentifier(vec![rel.clone(), name.clone()]);
            let e = match side_of {
                Side::Left => side(&l),
                Side::Right => side(&r),
                Side::Both => call("coalesce", vec![side(&l), side(&r)]),
            };
            merged.push((crate::sql::parser::normalize_ident(name), e));
        }
    }
    if merged.is_empty() {
        return;
    }
    let replace = |e: &mut Expr| {
        if let Expr::Identifier(i) = e
            && let Some((_, m)) = merged
                .iter()
                .find(|(n, _)| *n == crate::sql::parser::normalize_ident(i))
        {
            *e = Expr::Nested(Box::new(m.clone()));
        }
    };
    let mut outputs: Vec<String> = Vec::new();
    for item in select.projection.iter_mut() {
        match item {
            SelectItem::UnnamedExpr(e) => {
                // still shown under its own name
                if let Expr::Identifier(i) = e
                    && merged
                        .iter()
                        .any(|(n, _)| *n == crate::sql::parser::normalize_ident(i))
                {
                    let alias = i.clone();
                    let mut x = e.clone();
                    this_level_exprs_mut(&mut x, replace);
                    *item = SelectItem::ExprWithAlias { expr: x, alias };
                } else {
                    this_level_exprs_mut(e, replace);
                }
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                outputs.push(crate::sql::parser::normalize_ident(alias));
                this_level_exprs_mut(expr, replace);
            }
            _ => {}
        }
    }
    if let Some(w) = select.selection.as_mut() {
        this_level_exprs_mut(w, replace);
    }
    if let ast::GroupByExpr::Expressions(exprs, _) = &mut select.group_by {
        for e in exprs {
            this_level_exprs_mut(e, replace);
        }
    }
    if let Some(h) = select.having.as_mut() {
        this_level_exprs_mut(h, replace);
    }
    if let Some(ast::OrderBy {
        kind: ast::OrderByKind::Expressions(items),
        ..
    }) = q.order_by.as_mut()
    {
        for item in items {
            if let Expr::Identifier(i) = &item.expr
                && outputs.contains(&crate::sql::parser::normalize_ident(i))
            {
                continue;
            }
            this_level_exprs_mut(&mut item.expr, replace);
        }
    }
}

/// Postgres' system column `tableoid` (the OID of the relation a row is in: psql's `\dd`
/// joins catalogs on it), read from a relation of this select's FROM: the relation's OID,
/// as `'name'::regclass::oid`. Qualified by the relation's name or alias, or unqualified
/// when the select reads one relation.
fn table_oid_column(select: &mut ast::Select) {
    let mut relations: Vec<(String, String)> = Vec::new();
    for t in &select.from {
        for tf in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
            if let ast::TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } = tf
            {
                let written = name.to_string();
                let shown = match alias {
                    Some(a) => crate::sql::parser::normalize_ident(&a.name),
                    None => last_name(name).unwrap_or_default(),
                };
                relations.push((shown, written));
            }
        }
    }
    if relations.is_empty() {
        return;
    }
    let is_tableoid = |i: &Ident| crate::sql::parser::normalize_ident(i) == "tableoid";
    let oid_of = |written: &str| {
        let regclass = Expr::Cast {
            kind: CastKind::DoubleColon,
            expr: Box::new(Expr::value(ast::Value::SingleQuotedString(
                written.to_owned(),
            ))),
            data_type: ast::DataType::Custom(
                ObjectName::from(vec![Ident::new("regclass")]),
                vec![],
            ),
            array: false,
            format: None,
        };
        Expr::Cast {
            kind: CastKind::DoubleColon,
            expr: Box::new(regclass),
            data_type: ast::DataType::Custom(ObjectName::from(vec![Ident::new("oid")]), vec![]),
            array: false,
            format: None,
        }
    };
    let target = |e: &Expr| -> Option<String> {
        match e {
            Expr::CompoundIdentifier(parts) if parts.len() == 2 && is_tableoid(&parts[1]) => {
                let q = crate::sql::parser::normalize_ident(&parts[0]);
                relations
                    .iter()
                    .find(|(shown, _)| *shown == q)
                    .map(|(_, w)| w.clone())
            }
            Expr::Identifier(i) if is_tableoid(i) && relations.len() == 1 => {
                Some(relations[0].1.clone())
            }
            _ => None,
        }
    };
    // a select item keeps its name
    for item in select.projection.iter_mut() {
        if let SelectItem::UnnamedExpr(e) = item
            && let Some(w) = target(e)
        {
            *item = SelectItem::ExprWithAlias {
                expr: oid_of(&w),
                alias: Ident::new("tableoid"),
            };
        }
    }
    this_level_exprs_mut(select, |e| {
        if let Some(w) = target(e) {
            *e = oid_of(&w);
        }
    });
}

/// A quoted literal given to an aggregate, as Postgres resolves it (it has no type yet):
/// to one of `double precision` arguments it is a `double precision` (`stddev('1')`;
/// `'x'` is 22P02), to `sum` or `avg` (candidates of every number type, none best) 42725
/// `function sum(unknown) is not unique`.
fn aggregate_literal_arguments(expr: &mut Expr) -> crate::error::Result<()> {
    let Expr::Function(f) = expr else {
        return Ok(());
    };
    let FunctionArguments::List(list) = &mut f.args else {
        return Ok(());
    };
    let name = last_name(&f.name).unwrap_or_default();
    let quoted = |e: &Expr| is_string_literal(e);
    let args = list.args.iter_mut().filter_map(|a| match a {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e),
        _ => None,
    });
    // (Postgres' variance and regression aggregates take double precision only)
    let float_only = crate::sql::variance::AGGREGATES
        .iter()
        .any(|(n, ..)| *n == name)
        || crate::sql::regression::is_regression(&name);
    if float_only {
        for e in args.filter(|e| quoted(e)) {
            let literal = std::mem::replace(e, Expr::value(ast::Value::Null));
            *e = Expr::Cast {
                kind: ast::CastKind::DoubleColon,
                expr: Box::new(literal),
                data_type: ast::DataType::DoublePrecision,
                array: false,
                format: None,
            };
        }
    } else if matches!(name.as_str(), "sum" | "avg") && args.into_iter().any(|e| quoted(e)) {
        return Err(crate::error::WeirError::new(
            crate::error::sqlstate::AMBIGUOUS_FUNCTION,
            format!("function {name}(unknown) is not unique"),
        )
        .with_hint(
            "Could not choose a best candidate function. You might need to add explicit type casts.",
        ));
    }
    Ok(())
}

/// An ORDER BY item that is an expression (not a bare name) reads the input's columns,
/// never the select list's output names (Postgres: `SELECT -i AS i FROM t ORDER BY i + 0`
/// sorts by the column `i`; `SELECT i AS a FROM t ORDER BY a + 1` is 42703 `column "a" does
/// not exist`), where DataFusion would take the output name first. A name in such an item
/// that is also an output name is qualified by the select's one relation, so it can only
/// be the column (the error names it unqualified again: `error_position.rs`). In the
/// statement's own select the output is renamed too (a [`DUPLICATE_NAME_MARKER`] name,
/// which clients see as written, bare ORDER BY names following it; DataFusion cannot sort
/// by a column `t.i` beside an output `i`: "ambiguous"). A select reading several
/// relations is left as it is, and so is a subquery's (its outputs are read by name).
fn order_by_reads_input_columns(q: &mut ast::Query, top: bool) {
    let ast::SetExpr::Select(select) = q.body.as_mut() else {
        return;
    };
    if !top {
        return;
    }
    let Some(relation) = single_relation_name(select) else {
        return;
    };
    let outputs: HashSet<String> = select
        .projection
        .iter()
        .filter_map(|item| match item {
            SelectItem::ExprWithAlias { expr, alias } => {
                let name = crate::sql::parser::normalize_ident(alias);
                let same_column = matches!(expr, Expr::Identifier(i)
                    if crate::sql::parser::normalize_ident(i) == name);
                (!same_column).then_some(name)
            }
            _ => None,
        })
        .collect();
    if outputs.is_empty() {
        return;
    }
    let Some(ast::OrderBy {
        kind: ast::OrderByKind::Expressions(items),
        ..
    }) = q.order_by.as_mut()
    else {
        return;
    };
    let bare = |e: &Expr| match e {
        Expr::Identifier(_) | Expr::Value(_) => true,
        Expr::Nested(inner) => matches!(inner.as_ref(), Expr::Identifier(_)),
        _ => false,
    };
    let mut qualified: HashSet<String> = HashSet::new();
    for item in items.iter_mut().filter(|item| !bare(&item.expr)) {
        this_level_exprs_mut(&mut item.expr, |e| {
            if let Expr::Identifier(i) = e
                && let name = crate::sql::parser::normalize_ident(i)
                && outputs.contains(&name)
            {
                *e = Expr::CompoundIdentifier(vec![relation.clone(), i.clone()]);
                qualified.insert(name);
            }
        });
    }
    if qualified.is_empty() {
        return;
    }
    let renamed = |name: &str, k: usize| format!("{name}{DUPLICATE_NAME_MARKER}o{k}");
    for (k, item) in select.projection.iter_mut().enumerate() {
        if let SelectItem::ExprWithAlias { alias, .. } = item
            && let name = crate::sql::parser::normalize_ident(alias)
            && qualified.contains(&name)
        {
            for by in items.iter_mut() {
                let reference = match &mut by.expr {
                    Expr::Nested(inner) => inner.as_mut(),
                    e => e,
                };
                if let Expr::Identifier(i) = reference
                    && crate::sql::parser::normalize_ident(i) == name
                {
                    *i = Ident::with_quote('"', renamed(&name, k));
                }
            }
            *alias = Ident::with_quote('"', renamed(&name, k));
        }
    }
}

/// Functions in FROM, as Postgres reads them: a table function aliased without a column
/// list names its column after the alias (`generate_series(1, 3) AS i` gives column `i`),
/// and a scalar function is a one-row table (`string_to_array(...) s`). Grafana's table
/// picker uses both.
fn function_in_from(tf: &mut ast::TableFactor) {
    let ast::TableFactor::Table {
        name,
        args: Some(args),
        alias,
        ..
    } = tf
    else {
        return;
    };
    let fname = last_name(name).unwrap_or_default();
    // `generate_subscripts(a, 1) AS k` (peewee's index query, over a column of the query
    // outside): a derived table of the subscripts 1..n, which may read outer columns
    if fname == "generate_subscripts" {
        let a = function_alias(alias.take(), &fname);
        let column = a
            .columns
            .first()
            .map_or_else(|| a.name.clone(), |c| c.name.clone());
        let given = plain_args(&FunctionArgumentList {
            duplicate_treatment: None,
            args: args.args.clone(),
            clauses: vec![],
        });
        let [array, dim] = given.as_slice() else {
            *alias = Some(a);
            return;
        };
        let template = format!("SELECT * FROM (SELECT 1 AS {column}) AS {}", a.name);
        if let Ok(parsed) = crate::sql::parser::parse_query(&template)
            && let ast::SetExpr::Select(sel) = *parsed.body
            && let Some(mut t) = sel.from.into_iter().next()
            && let ast::TableFactor::Derived { subquery, .. } = &mut t.relation
            && let ast::SetExpr::Select(inner) = subquery.body.as_mut()
            && let Some(SelectItem::ExprWithAlias { expr: e, .. }) = inner.projection.first_mut()
        {
            *e = subscripts(array, dim);
            *tf = t.relation;
        }
        return;
    }
    let table_function = matches!(fname.as_str(), "generate_series" | "range" | "unnest");
    if table_function {
        if fname == "unnest" {
            return;
        }
        *alias = Some(function_alias(alias.take(), &fname));
        return;
    }
    // `jsonb_to_record(j) AS r(a int, b text)` / `jsonb_to_recordset(j) AS r(...)` (and the
    // json_ ones): a row (a row per array element) of the object's keys, each read as its
    // column's type — `SELECT CAST(j->>'a' AS int) AS a, ...` over the object or over each
    // element. The argument is read on its own (a constant or a parameter; a column of
    // another FROM item, LATERAL, is not resolved here)
    if let (
        "jsonb_to_record" | "json_to_record" | "jsonb_to_recordset" | "json_to_recordset",
        Some(a),
    ) = (fname.as_str(), alias.as_ref())
        && !a.columns.is_empty()
        && a.columns.iter().all(|c| c.data_type.is_some())
        && args.args.len() == 1
    {
        let arg = args.args[0].to_string();
        let items = a
            .columns
            .iter()
            .map(|c| {
                let key = c.name.value.replace('\'', "''");
                let ty = c
                    .data_type
                    .as_ref()
                    .map(|t| t.to_string())
                    .unwrap_or_default();
                // (an array column reads a JSON array's elements)
                let array = matches!(c.data_type, Some(ast::DataType::Array(_)));
                match array {
                    true => format!(
                        "CAST({}(weir_rec -> '{key}') AS {ty}) AS {}",
                        crate::sql::pg_functions::JSONB_ARRAY_TEXT,
                        c.name
                    ),
                    false => format!("CAST(weir_rec ->> '{key}' AS {ty}) AS {}", c.name),
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let source = if fname.ends_with("recordset") {
            format!("SELECT jsonb_array_elements(CAST(({arg}) AS jsonb)) AS weir_rec")
        } else {
            format!("SELECT CAST(({arg}) AS jsonb) AS weir_rec")
        };
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        if let Ok(mut query) = datafusion::sql::sqlparser::parser::Parser::new(&dialect)
            .try_with_sql(&format!("SELECT {items} FROM ({source}) AS weir_records"))
            .and_then(|mut p| p.parse_query())
        {
            // (built after this factor's own rewrite: rewritten here, `->>` and the
            // set-returning call included)
            if rewrite_query(&mut query).is_err() {
                return;
            }
            *tf = ast::TableFactor::Derived {
                lateral: false,
                subquery: query,
                alias: Some(ast::TableAlias {
                    explicit: true,
                    name: a.name.clone(),
                    columns: vec![],
                    at: None,
                }),
                sample: None,
            };
        }
        return;
    }
    // `pg_partition_ancestors(rel)`: a relation and the partitions it is one of, column
    // `relid` (psql's \d reads a table's foreign keys through it); nothing is partitioned
    // here, so the relation itself
    if fname == "pg_partition_ancestors" {
        let call = args
            .args
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        if let Ok(query) = datafusion::sql::sqlparser::parser::Parser::new(&dialect)
            .try_with_sql(&format!("SELECT weir_regclass({call}) AS relid"))
            .and_then(|mut p| p.parse_query())
        {
            *tf = ast::TableFactor::Derived {
                lateral: false,
                subquery: query,
                alias: Some(alias.clone().unwrap_or(ast::TableAlias {
                    explicit: true,
                    name: Ident::new(fname),
                    columns: vec![],
                    at: None,
                })),
                sample: None,
            };
        }
        return;
    }
    if fname.starts_with("weir_")
        || fname.starts_with("pg_")
        || matches!(fname.as_str(), "tumble" | "hop" | "session")
    {
        return;
    }
    let column = alias
        .as_ref()
        .map(|a| a.name.value.clone())
        .unwrap_or_else(|| fname.clone());
    let call_sql = format!(
        "{name}({})",
        args.args
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    let Ok(query) = datafusion::sql::sqlparser::parser::Parser::new(&dialect)
        .try_with_sql(&format!("SELECT {call_sql} AS \"{column}\""))
        .and_then(|mut p| p.parse_query())
    else {
        return;
    };
    let alias = alias.clone().unwrap_or(ast::TableAlias {
        explicit: true,
        name: Ident::new(column),
        columns: vec![],
        at: None,
    });
    *tf = ast::TableFactor::Derived {
        lateral: false,
        subquery: query,
        alias: Some(alias),
        sample: None,
    };
}

/// A call's positional arguments.
fn plain_args(l: &FunctionArgumentList) -> Vec<Expr> {
    l.args
        .iter()
        .filter_map(|a| match a {
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// A call's arguments when every one is positional (None when one is named or `*`).
fn only_plain_args(args: &[FunctionArg]) -> Option<Vec<Expr>> {
    args.iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

/// The alias of a function of one column in FROM, as Postgres names its column: the
/// alias's own column, else the alias, else (unaliased) the function's name.
fn function_alias(alias: Option<ast::TableAlias>, fname: &str) -> ast::TableAlias {
    match alias {
        Some(mut a) => {
            if a.columns.is_empty() {
                a.columns = vec![ast::TableAliasColumnDef::from_name(a.name.value.clone())];
            }
            a
        }
        None => ast::TableAlias {
            explicit: true,
            name: Ident::new(fname),
            columns: vec![ast::TableAliasColumnDef::from_name(fname)],
            at: None,
        },
    }
}

/// `make_interval(years, months, weeks, days, hours, mins, secs)`'s seven arguments in
/// order, each given by position or by name, or `0`; none when a name is not one of them
/// (the call is left to fail as an unknown function).
fn make_interval_args(l: &FunctionArgumentList) -> Option<Vec<Expr>> {
    const NAMES: [&str; 7] = ["years", "months", "weeks", "days", "hours", "mins", "secs"];
    let mut slots: [Option<Expr>; 7] = Default::default();
    for (i, a) in l.args.iter().enumerate() {
        let (slot, e) = match a {
            ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => (i, e),
            ast::FunctionArg::Named {
                name,
                arg: ast::FunctionArgExpr::Expr(e),
                ..
            } => (
                NAMES
                    .iter()
                    .position(|n| n.eq_ignore_ascii_case(&name.value))?,
                e,
            ),
            ast::FunctionArg::ExprNamed {
                name: Expr::Identifier(name),
                arg: ast::FunctionArgExpr::Expr(e),
                ..
            } => (
                NAMES
                    .iter()
                    .position(|n| n.eq_ignore_ascii_case(&name.value))?,
                e,
            ),
            _ => return None,
        };
        if slot >= NAMES.len() || slots[slot].is_some() {
            return None;
        }
        slots[slot] = Some(e.clone());
    }
    Some(
        slots
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Expr::value(ast::Value::Number("0".into(), false))))
            .collect(),
    )
}

/// `'x'::regclass` and friends (rewritten into calls) on a constant.
fn is_reg_cast_of_constant(f: &ast::Function) -> bool {
    last_name(&f.name).is_some_and(|n| n.starts_with("weir_reg"))
        && matches!(&f.args, FunctionArguments::List(l)
            if matches!(l.args.first(), Some(ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(Expr::Value(_))))))
}

/// A reg-cast that is a whole select item is shown as Postgres prints it, a name
/// (`'t'::regclass` → `t`), rather than the OID it compares as.
fn show_reg_casts(items: &mut [SelectItem]) {
    // `to_regclass(x)` and friends (the OID, or NULL) shown as their reg type is
    for item in items.iter_mut() {
        let (SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }) = item else {
            continue;
        };
        let Expr::Function(f) = e else { continue };
        let name = last_name(&f.name).unwrap_or_default();
        let shown = match name.as_str() {
            "to_regclass" => "weir_regclass_out",
            "to_regtype" => "weir_regtype_out",
            "to_regproc" | "to_regprocedure" => "weir_regproc_out",
            "to_regnamespace" => "weir_regnamespace_out",
            "to_regrole" => "weir_regrole_out",
            _ => continue,
        };
        let inner = e.clone();
        *e = call(shown, vec![inner]);
        if let SelectItem::UnnamedExpr(x) = item {
            *item = SelectItem::ExprWithAlias {
                expr: x.clone(),
                alias: Ident::with_quote('"', name),
            };
        }
    }
    for item in items.iter_mut() {
        let (SelectItem::UnnamedExpr(Expr::Function(f))
        | SelectItem::ExprWithAlias {
            expr: Expr::Function(f),
            ..
        }) = item
        else {
            continue;
        };
        shown_as_name(f);
    }
}

/// `generate_subscripts(a, dim)`: `unnest(generate_series(1, array_length(a, dim)))` (an
/// int2vector's count from 0: `pg_semantics.rs` shifts the series it finds over one).
fn subscripts(array: &Expr, dim: &Expr) -> Expr {
    let len = Expr::Cast {
        kind: CastKind::Cast,
        expr: Box::new(call("array_length", vec![array.clone(), dim.clone()])),
        data_type: ast::DataType::BigInt(None),
        array: false,
        format: None,
    };
    let one = Expr::value(ast::Value::Number("1".into(), false));
    call("unnest", vec![call("generate_series", vec![one, len])])
}

/// The call a cast to a reg type becomes (`x::regclass` is `weir_regclass(x)`).
fn reg_call(type_name: &str) -> Option<&'static str> {
    Some(match type_name {
        "regclass" => "weir_regclass",
        "regtype" => "weir_regtype",
        "regnamespace" => "weir_regnamespace",
        "regrole" => "weir_regrole",
        "regproc" | "regprocedure" => "weir_regproc",
        _ => return None,
    })
}

/// A `::regclass`-style call (`weir_regclass(x)` and the other reg types) made the one
/// that shows a name (`weir_regclass_out(x)`: a name looked up and shown as the type prints,
/// an OID named), where the value is text to the client or to a `||`. Whether it was one.
fn shown_as_name(f: &mut ast::Function) -> bool {
    let Some(name) = last_name(&f.name) else {
        return false;
    };
    let reg = matches!(
        name.as_str(),
        "weir_regclass" | "weir_regtype" | "weir_regproc" | "weir_regnamespace" | "weir_regrole"
    );
    if reg {
        f.name = ObjectName(vec![ObjectNamePart::Identifier(Ident::new(format!(
            "{name}_out"
        )))]);
    }
    reg
}

fn last_name(name: &ObjectName) -> Option<String> {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.to_lowercase())
}

fn call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Function(ast::Function {
        name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(name))]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(FunctionArgumentList {
            duplicate_treatment: None,
            args: args
                .into_iter()
                .map(|e| FunctionArg::Unnamed(FunctionArgExpr::Expr(e)))
                .collect(),
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

/// Boolean columns of the system catalogs that clients compare with `'t'` / `'f'`.
fn is_bool_catalog_column(e: &Expr) -> bool {
    let name = match e {
        Expr::Identifier(i) => &i.value,
        Expr::CompoundIdentifier(ids) => match ids.last() {
            Some(i) => &i.value,
            None => return false,
        },
        _ => return false,
    };
    matches!(
        name.to_lowercase().as_str(),
        "indisprimary"
            | "indisunique"
            | "indisvalid"
            | "indisclustered"
            | "indimmediate"
            | "indisready"
            | "indislive"
            | "indisexclusion"
            | "indnullsnotdistinct"
            | "attnotnull"
            | "atthasdef"
            | "attisdropped"
            | "attislocal"
            | "relhasindex"
            | "relisshared"
            | "relhasrules"
            | "relhastriggers"
            | "relhassubclass"
            | "relispartition"
            | "relrowsecurity"
            | "condeferrable"
            | "condeferred"
            | "convalidated"
            | "typisdefined"
            | "typbyval"
            | "rolsuper"
            | "rolcanlogin"
            | "proretset"
            | "proisstrict"
            | "opcdefault"
            | "datallowconn"
            | "datistemplate"
    )
}

/// A string literal, or string literals joined with `||`, as one string.
#[recursive::recursive]
fn fold_string(e: &Expr) -> Option<String> {
    match e {
        Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) => Some(s.clone()),
            _ => None,
        },
        Expr::Nested(inner) => fold_string(inner),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::StringConcat,
            right,
        } => Some(fold_string(left)? + &fold_string(right)?),
        _ => None,
    }
}

/// A LIKE pattern written with escape character `esc`, in backslash-escape form (the only
/// one DataFusion reads).
pub fn backslash_pattern(pattern: &str, esc: char) -> String {
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == esc {
            if let Some(next) = chars.next() {
                out.push('\\');
                out.push(next);
            }
        } else if c == '\\' {
            out.push_str("\\\\");
        } else {
            out.push(c);
        }
    }
    out
}

/// `SELECT * FROM a JOIN b USING (k)`: Postgres lists the USING columns first, then the
/// left's other columns, then the right's. DataFusion's wildcard keeps one of each USING
/// pair where it stands, so a marker item tells the analyzer rule
/// (`pg_semantics::star_over_using`) to put the expanded columns in Postgres' order.
fn mark_star_over_using(select: &mut ast::Select) {
    fn has_using(t: &ast::TableWithJoins) -> bool {
        t.joins.iter().any(|j| {
            use ast::JoinOperator as J;
            let c = match &j.join_operator {
                J::Join(c)
                | J::Inner(c)
                | J::Left(c)
                | J::LeftOuter(c)
                | J::Right(c)
                | J::RightOuter(c)
                | J::FullOuter(c) => Some(c),
                _ => None,
            };
            matches!(
                c,
                Some(ast::JoinConstraint::Using(_) | ast::JoinConstraint::Natural)
            ) || matches!(&j.relation, ast::TableFactor::NestedJoin { table_with_joins, .. } if has_using(table_with_joins))
        }) || matches!(&t.relation, ast::TableFactor::NestedJoin { table_with_joins, .. } if has_using(table_with_joins))
    }
    // `*` first, maybe more items after it (not another star): the marker goes right
    // after the star's columns
    let star_first = matches!(select.projection.first(), Some(SelectItem::Wildcard(_)))
        && !select.projection[1..].iter().any(|i| {
            matches!(
                i,
                SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
            )
        });
    if star_first && select.from.iter().any(has_using) {
        select.projection.insert(
            1,
            SelectItem::ExprWithAlias {
                expr: call(crate::sql::pg_functions::STAR_OVER_USING, vec![]),
                alias: Ident::with_quote('"', crate::sql::pg_functions::STAR_OVER_USING),
            },
        );
    }
}

/// `(SELECT * FROM a JOIN b USING (k)) AS s(x, y, z)` (also a plain view over such a
/// join, expanded so): the subquery's marker item is a column too until the analyzer rule
/// takes it out, so the alias names one more, the marker, last; the rule
/// (`pg_semantics::star_over_using`) then gives the names to the columns in Postgres' order.
fn renamed_star_over_using(tf: &mut ast::TableFactor) {
    let ast::TableFactor::Derived {
        subquery,
        alias: Some(alias),
        ..
    } = tf
    else {
        return;
    };
    let marker = crate::sql::pg_functions::STAR_OVER_USING;
    let marked = matches!(subquery.body.as_ref(), ast::SetExpr::Select(s)
        if s.projection.iter().any(|i| matches!(i,
            SelectItem::ExprWithAlias { alias, .. } if alias.value == marker)));
    if marked && !alias.columns.is_empty() && !alias.columns.iter().any(|c| c.name.value == marker)
    {
        alias.columns.push(ast::TableAliasColumnDef {
            name: Ident::with_quote('"', marker),
            data_type: None,
        });
    }
}

/// `x IN (subquery)` and `EXISTS (subquery)` in a select list (also inside CASE), which
/// DataFusion plans only in WHERE: as scalar `count(*)` subqueries, which it plans
/// anywhere (correlated too), keeping Postgres' three-valued IN: true if some row equals
/// x; else false if there are no rows; else NULL if x is NULL or some row is NULL; else
/// false.
fn subquery_predicates_as_counts(e: &mut Expr, outer: Option<&Ident>) {
    this_level_exprs_mut(e, |e| {
        let replaced = match e {
            Expr::Exists { subquery, negated } => count_query(subquery).map(|q| {
                let op = if *negated { "=" } else { ">" };
                parse_expr(&format!("(({q}) {op} 0)"))
            }),
            Expr::InSubquery {
                expr: x,
                subquery,
                negated,
            } => {
                // over the subquery as a derived table whose one column is `c`, so
                // the outer expression cannot be captured by a name inside it
                let (found, nulls, all) = match correlated_in_counts(x, subquery, outer) {
                    // a subquery that reads the outer row: counted where it stands
                    Some((f, n, a)) => (Some(f), Some(n), Some(a)),
                    None => {
                        let x = x.to_string();
                        let over = |cond: &str| {
                            Some(format!(
                                "SELECT count(*) FROM ({subquery}) AS weir_sub(c) WHERE {cond}"
                            ))
                        };
                        (
                            over(&format!("weir_sub.c = ({x})")),
                            over("weir_sub.c IS NULL"),
                            over("TRUE"),
                        )
                    }
                };
                let x = x.to_string();
                match (found, nulls, all) {
                    (Some(f), Some(n), Some(a)) => {
                        let t = format!(
                            "(CASE WHEN ({f}) > 0 THEN TRUE WHEN ({a}) = 0 THEN FALSE \
                         WHEN ({x}) IS NULL OR ({n}) > 0 THEN NULL ELSE FALSE END)"
                        );
                        Some(parse_expr(&if *negated { format!("(NOT {t})") } else { t }))
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        if let Some(r) = replaced {
            *e = r;
        }
    });
}

/// Visit the expressions of one query level in `node`, innermost first, leaving the
/// subqueries inside it alone (they have FROM clauses and aggregates of their own; a
/// subquery expression itself is visited, as an expression of this level).
pub(crate) fn this_level_exprs_mut<T: VisitMut + ?Sized>(node: &mut T, f: impl FnMut(&mut Expr)) {
    struct Level<F> {
        depth: usize,
        f: F,
    }
    impl<F: FnMut(&mut Expr)> VisitorMut for Level<F> {
        type Break = ();
        fn pre_visit_query(&mut self, _: &mut ast::Query) -> ControlFlow<()> {
            self.depth += 1;
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _: &mut ast::Query) -> ControlFlow<()> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }
        fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
            if self.depth == 0 {
                (self.f)(e);
            }
            ControlFlow::Continue(())
        }
    }
    let _ = node.visit(&mut Level { depth: 0, f });
}

/// The name of the one relation a select reads (its alias, else its table name).
fn single_relation_name(select: &ast::Select) -> Option<Ident> {
    match select.from.as_slice() {
        [t] if t.joins.is_empty() => relation_alias(&t.relation),
        _ => None,
    }
}

fn relation_alias(tf: &ast::TableFactor) -> Option<Ident> {
    match tf {
        ast::TableFactor::Table { alias: Some(a), .. }
        | ast::TableFactor::Derived { alias: Some(a), .. } => Some(a.name.clone()),
        ast::TableFactor::Table {
            name, alias: None, ..
        } => name.0.last().and_then(|p| p.as_ident()).cloned(),
        _ => None,
    }
}

/// `x IN (SELECT e FROM ... WHERE ...)` whose subquery reads a column of an outer relation
/// (a qualifier its FROM does not define): the three counts of the IN rewrite taken in the
/// subquery itself, `x` qualified by the outer select's one relation so that no column of
/// the subquery captures it (a derived table could not see the outer row). None when the
/// subquery is not that simple, not correlated, or `x` cannot be qualified.
fn correlated_in_counts(
    x: &Expr,
    q: &ast::Query,
    outer: Option<&Ident>,
) -> Option<(String, String, String)> {
    let sel = plain_select(q)?;
    let [SelectItem::UnnamedExpr(item) | SelectItem::ExprWithAlias { expr: item, .. }] =
        sel.projection.as_slice()
    else {
        return None;
    };
    if contains_aggregate(item) {
        return None;
    }
    let mut inner: Vec<String> = Vec::new();
    for t in &sel.from {
        inner.extend(relation_alias(&t.relation).map(|i| i.value));
        for j in &t.joins {
            inner.extend(relation_alias(&j.relation).map(|i| i.value));
        }
    }
    let mut correlated = false;
    let _ = ast::visit_expressions(&sel.selection, |e| {
        if let Expr::CompoundIdentifier(ids) = e
            && ids.len() == 2
            && !inner.contains(&ids[0].value)
        {
            correlated = true;
        }
        ControlFlow::<()>::Continue(())
    });
    if !correlated {
        return None;
    }
    // x's own columns, qualified by the outer relation
    let mut x = x.clone();
    let mut unqualified = false;
    let _ = ast::visit_expressions_mut(&mut x, |e| {
        if let Expr::Identifier(i) = e {
            match outer {
                Some(o) => *e = Expr::CompoundIdentifier(vec![o.clone(), i.clone()]),
                None => unqualified = true,
            }
        }
        ControlFlow::<()>::Continue(())
    });
    if unqualified {
        return None;
    }
    let count = |cond: String| {
        let mut s = sel.clone();
        s.projection = vec![SelectItem::UnnamedExpr(parse_expr("count(*)"))];
        let all = match &s.selection {
            Some(w) => format!("({w}) AND ({cond})"),
            None => cond,
        };
        s.selection = Some(parse_expr(&all));
        s.to_string()
    };
    Some((
        count(format!("({item}) = ({x})")),
        count(format!("({item}) IS NULL")),
        count("TRUE".into()),
    ))
}

/// `SELECT count(*) ...` over a subquery's rows: the subquery's own FROM and WHERE when it
/// is a plain SELECT (so a correlation stays where DataFusion decorrelates it), else the
/// subquery as a derived table.
fn count_query(q: &ast::Query) -> Option<String> {
    if let Some(sel) = plain_select(q)
        && !sel.projection.iter().any(|i| match i {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                contains_aggregate(e)
            }
            _ => false,
        })
    {
        let mut sel = sel.clone();
        sel.projection = vec![SelectItem::UnnamedExpr(parse_expr("count(*)"))];
        return Some(sel.to_string());
    }
    Some(format!("SELECT count(*) FROM ({q}) AS weir_sub"))
}

/// A query that is one SELECT over a FROM, without WITH, LIMIT, ORDER BY, DISTINCT,
/// GROUP BY or HAVING: its rows can be counted by its own FROM and WHERE.
fn plain_select(q: &ast::Query) -> Option<&ast::Select> {
    let ast::SetExpr::Select(sel) = q.body.as_ref() else {
        return None;
    };
    (q.with.is_none()
        && !sel.from.is_empty()
        && q.limit_clause.is_none()
        && q.fetch.is_none()
        && q.order_by.is_none()
        && sel.distinct.is_none()
        && sel.having.is_none()
        && matches!(&sel.group_by, ast::GroupByExpr::Expressions(g, _) if g.is_empty()))
    .then_some(sel)
}

/// `SELECT generate_series(1, 3)`: a set-returning function in the select list gives one
/// row per element, as in Postgres (DataFusion's scalar `generate_series` gives a list),
/// also inside an expression (`generate_series(...)::date = current_date`, `x + 1`,
/// `coalesce(...)`).
fn set_returning_in_select_list(items: &mut [SelectItem]) {
    for item in items.iter_mut() {
        let e = match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
            _ => continue,
        };
        // `generate_series(...)` or `generate_series(...)::date`: named after the function
        let whole: &Expr = match &*e {
            Expr::Cast { expr, .. } => expr,
            other => other,
        };
        let name = match whole {
            Expr::Function(f) => last_name(&f.name).filter(|n| srf_list(n).is_some()),
            _ => None,
        };
        if !set_returning_inside(e) {
            continue;
        }
        // the column is named after the function, as in Postgres
        if let (Some(name), SelectItem::UnnamedExpr(x)) = (name, &mut *item) {
            let expr = std::mem::replace(x, Expr::value(ast::Value::Null));
            *item = SelectItem::ExprWithAlias {
                expr,
                alias: Ident::new(name),
            };
        }
    }
}

/// For a set-returning function's name: the function giving its rows as one list (`None`:
/// the function itself), or `None` outside for a function that returns one value.
fn srf_list(name: &str) -> Option<Option<&'static str>> {
    Some(match name {
        "generate_series" => None,
        // one text[] per match (every match with the `g` flag)
        "regexp_matches" => Some(crate::sql::pg_functions::REGEXP_MATCHES),
        "regexp_split_to_table" => Some(crate::sql::pg_functions::REGEXP_SPLIT_TO_TABLE),
        "string_to_table" => Some("string_to_array"),
        "pg_listening_channels" => Some(crate::sql::pg_functions::LISTENING_CHANNELS),
        other => Some(json_set_returning(other)?),
    })
}

/// Every set-returning function call in `e` (through casts, operators and function
/// arguments; not into subqueries) as `unnest` of its list; whether there was one.
fn set_returning_inside(e: &mut Expr) -> bool {
    match e {
        Expr::Function(f) => {
            let name = last_name(&f.name).unwrap_or_default();
            if let Some(list) = srf_list(&name) {
                let mut inner = std::mem::replace(e, Expr::value(ast::Value::Null));
                if let (Some(list), Expr::Function(f)) = (list, &mut inner) {
                    f.name = ast::ObjectName::from(vec![Ident::new(list)]);
                }
                *e = call("unnest", vec![inner]);
                if yields_jsonb(&name) {
                    let rows = std::mem::replace(e, Expr::value(ast::Value::Null));
                    *e = call(crate::sql::pg_functions::JSONB_TYPED, vec![rows]);
                }
                return true;
            }
            // (a list already unnested)
            if last_name(&f.name).is_some_and(|n| n == "unnest") {
                return false;
            }
            let mut any = false;
            if let FunctionArguments::List(l) = &mut f.args {
                for a in l.args.iter_mut() {
                    if let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(x)) = a {
                        any |= set_returning_inside(x);
                    }
                }
            }
            any
        }
        Expr::Cast { expr, .. } | Expr::Nested(expr) | Expr::UnaryOp { expr, .. } => {
            set_returning_inside(expr)
        }
        Expr::BinaryOp { left, right, .. } => {
            let l = set_returning_inside(left);
            set_returning_inside(right) || l
        }
        _ => false,
    }
}

/// A VALUES column whose rows disagree on a type that carries field metadata (`jsonb`,
/// `json`, `numeric`, `varchar(n)`): DataFusion refuses such a column ("Inconsistent
/// metadata across values list"), Postgres resolves it to one type. So:
///
/// - `VALUES ('null'::jsonb), ('[]')`: one `jsonb` (or `json`) cast and otherwise untyped
///   literals: the literals are cast too;
/// - `VALUES (1.5::numeric), (2.25), (NULL)`: a `numeric` cast (any precision) and other
///   rows: every row is cast to unconstrained `numeric` (Postgres' common type of numeric
///   and the integer and numeric literals);
/// - `VALUES ('abc'::varchar(5)), ('x')`: every row is cast to `varchar` without a length
///   (Postgres' common type; no row is cut to a length another row declared).
///
/// Columns whose rows all carry the same cast, or none, are left as written.
fn typed_values_columns(body: &mut ast::SetExpr) {
    let ast::SetExpr::Values(values) = body else {
        return;
    };
    let Some(width) = values.rows.first().map(|r| r.content.len()) else {
        return;
    };
    for j in 0..width {
        let casts: Vec<Option<&ast::DataType>> = values
            .rows
            .iter()
            .map(|row| row.content.get(j).and_then(metadata_cast))
            .collect();
        let Some(first) = casts.iter().flatten().next().copied() else {
            continue;
        };
        if casts.iter().all(|c| *c == Some(first)) {
            continue;
        }
        if casts
            .iter()
            .flatten()
            .any(|t| metadata_kind(t) != metadata_kind(first))
        {
            continue; // e.g. jsonb and numeric: left to the planner, which names the clash
        }
        let target = match first {
            ast::DataType::JSON | ast::DataType::JSONB => {
                // only untyped literals follow a json cast (a text expression does not)
                let untyped_only = values.rows.iter().all(|row| match row.content.get(j) {
                    Some(e) if metadata_cast(e) == Some(first) => true,
                    Some(Expr::Value(v)) => matches!(
                        v.value,
                        ast::Value::SingleQuotedString(_) | ast::Value::Null
                    ),
                    _ => false,
                });
                if !untyped_only {
                    continue;
                }
                first.clone()
            }
            ast::DataType::Varchar(_) | ast::DataType::CharacterVarying(_) => {
                ast::DataType::Varchar(None)
            }
            _ => ast::DataType::Numeric(ast::ExactNumberInfo::None),
        };
        cast_values_column(values, j, &target, |e| metadata_cast(e) != Some(&target));
    }
}

/// A VALUES column with a row of an explicit type (`timestamp '...'`, `'...'::date`) and
/// rows of quoted literals: the literals are of that type, as Postgres resolves an untyped
/// literal to its column's type (DataFusion reads them as text and refuses the column:
/// "Inconsistent data type across values list"). Other columns are left as written.
fn untyped_values_literals(body: &mut ast::SetExpr) {
    let ast::SetExpr::Values(values) = body else {
        return;
    };
    let Some(width) = values.rows.first().map(|r| r.content.len()) else {
        return;
    };
    let explicit = |e: &Expr| -> Option<ast::DataType> {
        match e {
            Expr::Cast { data_type, .. } => Some(data_type.clone()),
            Expr::TypedString(ts) => Some(ts.data_type.clone()),
            Expr::Interval(_) => Some(ast::DataType::Interval {
                fields: None,
                precision: None,
            }),
            _ => None,
        }
    };
    let quoted = |e: &Expr| matches!(e, Expr::Value(v) if matches!(v.value, ast::Value::SingleQuotedString(_)));
    for j in 0..width {
        let Some(target) = values
            .rows
            .iter()
            .find_map(|row| row.content.get(j).and_then(explicit))
        else {
            continue;
        };
        // text targets need nothing; json and the rest with metadata: `typed_values_columns`
        if matches!(
            target,
            ast::DataType::Text | ast::DataType::Varchar(_) | ast::DataType::CharacterVarying(_)
        ) || metadata_kind(&target) != 0
        {
            continue;
        }
        cast_values_column(values, j, &target, quoted);
    }
}

/// Cast the cells of VALUES column `j` that `which` picks to `target`.
fn cast_values_column(
    values: &mut ast::Values,
    j: usize,
    target: &ast::DataType,
    which: impl Fn(&Expr) -> bool,
) {
    for row in values.rows.iter_mut() {
        let Some(e) = row.content.get_mut(j) else {
            continue;
        };
        if !which(e) {
            continue;
        }
        let inner = std::mem::replace(e, Expr::value(ast::Value::Null));
        *e = Expr::Cast {
            kind: ast::CastKind::DoubleColon,
            expr: Box::new(inner),
            data_type: target.clone(),
            array: false,
            format: None,
        };
    }
}

/// The type of an explicit cast at the top of a VALUES cell (under a sign or parentheses)
/// when that type carries field metadata.
fn metadata_cast(e: &Expr) -> Option<&ast::DataType> {
    match e {
        Expr::Cast { data_type, .. } => (metadata_kind(data_type) != 0).then_some(data_type),
        Expr::Nested(inner) => metadata_cast(inner),
        Expr::UnaryOp { expr, .. } => metadata_cast(expr),
        _ => None,
    }
}

/// 1 = json/jsonb, 2 = numeric, 3 = varchar(n), 0 = a type without field metadata.
fn metadata_kind(t: &ast::DataType) -> u8 {
    match t {
        ast::DataType::JSON | ast::DataType::JSONB => 1,
        ast::DataType::Numeric(_) | ast::DataType::Decimal(_) | ast::DataType::Dec(_) => 2,
        ast::DataType::Varchar(Some(_)) | ast::DataType::CharacterVarying(Some(_)) => 3,
        _ => 0,
    }
}

/// [`rewrite_expr`]'s `generate_series(start, stop, step)`: a quoted step that is not a
/// number is an interval (`'1 day'`: only a series of dates or timestamps takes one), a
/// quoted bound beside a date or timestamp takes its type (`'2024-01-01'::date,
/// '2024-01-31'`).
/// A number written with a decimal point or an exponent, or a cast to `numeric`.
fn is_numeric_constant(e: &Expr) -> bool {
    match e {
        Expr::Value(v) => {
            matches!(&v.value, ast::Value::Number(n, _) if n.contains(['.', 'e', 'E']))
        }
        Expr::UnaryOp { expr, .. } | Expr::Nested(expr) => is_numeric_constant(expr),
        Expr::Cast { data_type, .. } => matches!(
            data_type,
            ast::DataType::Numeric(_) | ast::DataType::Decimal(_) | ast::DataType::Dec(_)
        ),
        _ => false,
    }
}

/// `generate_series(start, stop [, step])` of numerics (an argument written as a decimal
/// number or cast to numeric): Postgres' numeric series, as `start + step * i` over the
/// integers i from 0 to floor((stop - start) / step) (DataFusion's series are of integers
/// and times only). A step of 0 is 22012 (Postgres says 22023).
fn numeric_series(args: &[Expr]) -> Option<Expr> {
    if !(2..=3).contains(&args.len()) || !args.iter().any(is_numeric_constant) {
        return None;
    }
    let (start, stop) = (&args[0], &args[1]);
    let step = args
        .get(2)
        .map_or_else(|| "1".to_owned(), |s| s.to_string());
    crate::sql::parser::parse_expr_text(&format!(
        "(({start}) + ({step}) * generate_series(0, CAST(floor((({stop}) - ({start})) / ({step})) AS BIGINT)))"
    ))
    .ok()
}

/// `FROM generate_series(1.0, 2.0, 0.5) [AS g[(x)]]`: the numeric series
/// ([`numeric_series`]) as a derived table of one column, named as a function in FROM
/// names it (the alias's column, the alias, or `generate_series`).
fn numeric_series_in_from(tf: &mut ast::TableFactor) {
    let ast::TableFactor::Table {
        name,
        args: Some(args),
        alias,
        with_ordinality: false,
        ..
    } = tf
    else {
        return;
    };
    if last_name(name).as_deref() != Some("generate_series") || name.0.len() != 1 {
        return;
    }
    let Some(series) = only_plain_args(&args.args).and_then(|e| numeric_series(&e)) else {
        return;
    };
    let Some(subquery) = parse_query_text(&format!("SELECT {series} AS generate_series")) else {
        return;
    };
    *tf = ast::TableFactor::Derived {
        lateral: false,
        subquery,
        alias: Some(function_alias(alias.take(), "generate_series")),
        sample: None,
    };
}

fn series_text_arguments(args: &mut [ast::FunctionArg]) {
    let expr_of = |a: &ast::FunctionArg| match a {
        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => Some(e.clone()),
        _ => None,
    };
    let quoted = |e: &Expr| match e {
        Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(t) => Some(t.clone()),
            _ => None,
        },
        _ => None,
    };
    let temporal = |e: &Expr| -> Option<ast::DataType> {
        let t = match e {
            Expr::Cast { data_type, .. } => data_type.clone(),
            Expr::TypedString(ts) => ts.data_type.clone(),
            _ => return None,
        };
        matches!(
            t,
            ast::DataType::Date
                | ast::DataType::Timestamp(..)
                | ast::DataType::TimestampNtz(_)
                | ast::DataType::Datetime(_)
        )
        .then_some(t)
    };
    let as_type = |text: String, ty: ast::DataType| {
        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(Expr::Cast {
            kind: ast::CastKind::Cast,
            expr: Box::new(Expr::value(ast::Value::SingleQuotedString(text))),
            data_type: ty,
            array: false,
            format: None,
        }))
    };
    if let Some(text) = expr_of(&args[2]).as_ref().and_then(quoted)
        && text.trim().parse::<f64>().is_err()
    {
        args[2] = as_type(
            text,
            ast::DataType::Interval {
                fields: None,
                precision: None,
            },
        );
    }
    let (Some(a), Some(b)) = (expr_of(&args[0]), expr_of(&args[1])) else {
        return;
    };
    let Some(ty) = temporal(&a).or_else(|| temporal(&b)) else {
        return;
    };
    for arg in args.iter_mut().take(2) {
        if let Some(text) = expr_of(arg).as_ref().and_then(quoted) {
            *arg = as_type(text, ty.clone());
        }
    }
}

/// An argument of `unnest` as the array's elements in one dimension
/// (`pg_functions::ARRAY_ELEMENTS`): Postgres unnests a two-dimensional array into its
/// elements, DataFusion into its rows.
/// (Not around our own lists of rows: `regexp_matches` in FROM is `unnest` of a list of
/// `text[]` rows, `weir_regexp_matches(...)`, and the other `weir_` ones.)
fn all_elements(e: &mut Expr) {
    let ours = matches!(e, Expr::Function(f)
        if last_name(&f.name).is_some_and(|n| n.starts_with("weir_")));
    if !ours {
        *e = call(crate::sql::pg_functions::ARRAY_ELEMENTS, vec![e.clone()]);
    }
}

/// `FROM unnest(array) AS x [WITH ORDINALITY]`: a function of one column names it after
/// its alias, as Postgres does (`SELECT x ...`, `t.*` is a column `t`), and the ordinality
/// column `ordinality`; without an alias both the relation and its column are `unnest`.
fn unnest_alias_names_column(tf: &mut ast::TableFactor) {
    if let ast::TableFactor::UNNEST {
        alias: alias @ None,
        array_exprs,
        with_offset: false,
        ..
    } = tf
        && array_exprs.len() == 1
    {
        *alias = Some(ast::TableAlias {
            explicit: true,
            name: Ident::new("unnest"),
            columns: Vec::new(),
            at: None,
        });
    }
    if let ast::TableFactor::UNNEST {
        alias: Some(alias),
        array_exprs,
        with_offset: false,
        with_ordinality,
        ..
    } = tf
        && alias.columns.is_empty()
        && array_exprs.len() == 1
    {
        let column = |name: Ident| ast::TableAliasColumnDef {
            name,
            data_type: None,
        };
        let mut columns = vec![column(alias.name.clone())];
        if *with_ordinality {
            columns.push(column(Ident::new("ordinality")));
        }
        alias.columns = columns;
    }
}

/// A set-returning function in FROM over the columns of the relation before it, as
/// Postgres reads it (an implicit LATERAL): `FROM t, unnest(t.tags) AS tag`,
/// `FROM t CROSS JOIN LATERAL jsonb_array_elements(t.doc) AS e` (also `generate_series`,
/// `jsonb_array_elements_text`, `jsonb_object_keys`). It becomes the function in the select
/// list of a derived table over the relation, under the relation's name: `FROM (SELECT t.*,
/// unnest(t.tags) AS tag FROM t) AS t`, which is one row per element in queries and views
/// alike; `FROM t LEFT JOIN LATERAL f(t.x) AS e ON true` keeps t's rows where f gives none
/// (one row of NULLs, as Postgres). One relation before one function; other shapes are left
/// as written.
fn lateral_in_body(body: &mut ast::SetExpr) {
    match body {
        ast::SetExpr::Select(s) => {
            lateral_set_returning(s);
            standalone_set_returning(s);
        }
        ast::SetExpr::SetOperation { left, right, .. } => {
            lateral_in_body(left);
            lateral_in_body(right);
        }
        _ => {}
    }
}

fn lateral_set_returning(select: &mut ast::Select) {
    use ast::{JoinOperator, TableFactor};
    let on_true = |c: &ast::JoinConstraint| {
        matches!(c, ast::JoinConstraint::On(Expr::Value(v))
            if v.value == ast::Value::Boolean(true))
    };
    // (outer: LEFT JOIN LATERAL ... ON true, a row of NULLs where the function gives none)
    let (relation, function, outer) = match select.from.as_slice() {
        [a, b] if a.joins.is_empty() && b.joins.is_empty() => (&a.relation, &b.relation, false),
        [a] if a.joins.len() == 1
            && matches!(
                a.joins[0].join_operator,
                JoinOperator::CrossJoin(_) | JoinOperator::CrossApply
            ) =>
        {
            (&a.relation, &a.joins[0].relation, false)
        }
        [a] if a.joins.len() == 1
            && matches!(
                &a.joins[0].join_operator,
                JoinOperator::Left(c) | JoinOperator::LeftOuter(c) if on_true(c)
            ) =>
        {
            (&a.relation, &a.joins[0].relation, true)
        }
        _ => return,
    };
    let Some(FromFunction {
        name: fname,
        args,
        alias,
        ordinality,
    }) = function_factor(function)
    else {
        return;
    };
    // only a function of the relation's columns needs this (constants: see
    // standalone_set_returning; `unnest` and `generate_series` of constants work as they are)
    let Some(srf) = srf_items(&fname, &args, alias.as_ref(), false, ordinality, outer) else {
        return;
    };
    if !srf.reads_columns {
        return;
    }
    // a function before it: only aliased (its column is then named by the alias)
    if matches!(
        relation,
        TableFactor::Table {
            args: Some(_),
            alias: None,
            ..
        }
    ) {
        return;
    }
    let Some(rel_name) = relation_alias(relation) else {
        return;
    };
    let (items, names, srf_alias) = (srf.items, srf.names, srf.alias);
    let text = format!("SELECT {rel_name}.*, {} FROM {relation}", items.join(", "));
    let Some(q) = parse_query_text(&text) else {
        return;
    };
    let derived = TableFactor::Derived {
        lateral: false,
        subquery: q,
        alias: Some(ast::TableAlias {
            explicit: true,
            name: rel_name,
            columns: vec![],
            at: None,
        }),
        sample: None,
    };
    select.from = vec![ast::TableWithJoins {
        relation: derived,
        joins: vec![],
    }];
    // `alias.column` names the new column now, `alias.*` the new columns
    if let Some(sa) = srf_alias {
        let mut projection = Vec::with_capacity(select.projection.len());
        for item in std::mem::take(&mut select.projection) {
            match item {
                ast::SelectItem::QualifiedWildcard(
                    ast::SelectItemQualifiedWildcardKind::ObjectName(o),
                    _,
                ) if o.0.len() == 1 && o.0[0].as_ident().is_some_and(|i| i.value == sa.value) => {
                    projection.extend(
                        names
                            .iter()
                            .map(|n| ast::SelectItem::UnnamedExpr(Expr::Identifier(n.clone()))),
                    );
                }
                other => projection.push(other),
            }
        }
        select.projection = projection;
        let _ = ast::visit_expressions_mut(select, |e| {
            if let Expr::CompoundIdentifier(ids) = e
                && ids.len() == 2
                && ids[0].value == sa.value
            {
                *e = Expr::Identifier(ids[1].clone());
            }
            ControlFlow::<()>::Continue(())
        });
    }
}

/// The columns a set-returning function in FROM gives (named by its alias' column list,
/// else `key`/`value` for `jsonb_each`, `value` for `jsonb_array_elements(_text)` (aliased
/// or not), the alias, or the function's name, as Postgres names them) and the alias itself; none for
/// more names than columns.
fn srf_columns(
    fname: &str,
    alias: Option<&ast::TableAlias>,
    pair: bool,
    ordinality: bool,
) -> Option<(Vec<Ident>, Option<Ident>)> {
    let wanted_columns = if pair { 2 } else { 1 };
    // WITH ORDINALITY: one more column, the last name given or `ordinality`
    if ordinality {
        let mut given = alias.cloned();
        let ord = match given.as_mut() {
            Some(a) if a.columns.len() == wanted_columns + 1 => a.columns.pop().map(|c| c.name),
            _ => None,
        };
        let (mut columns, name) = srf_columns(fname, given.as_ref(), pair, false)?;
        columns.push(ord.unwrap_or_else(|| Ident::new("ordinality")));
        return Some((columns, name));
    }
    let element = matches!(
        fname,
        "jsonb_array_elements"
            | "json_array_elements"
            | "jsonb_array_elements_text"
            | "json_array_elements_text"
    );
    Some(match alias {
        Some(a) if a.columns.len() > wanted_columns => return None,
        Some(a) if a.columns.len() == wanted_columns => (
            a.columns.iter().map(|c| c.name.clone()).collect(),
            Some(a.name.clone()),
        ),
        // jsonb_each's columns are `key` and `value` unless named
        Some(a) if pair => (
            vec![Ident::new("key"), Ident::new("value")],
            Some(a.name.clone()),
        ),
        // jsonb_array_elements' column is `value` (an OUT parameter's name) under an alias
        Some(a) if element => (vec![Ident::new("value")], Some(a.name.clone())),
        Some(a) => (vec![a.name.clone()], Some(a.name.clone())),
        None if pair => (vec![Ident::new("key"), Ident::new("value")], None),
        None if element => (vec![Ident::new("value")], None),
        None => (vec![Ident::new(fname)], None),
    })
}

/// JSON set-returning functions of constants in FROM (`SELECT * FROM
/// jsonb_each('{"a": 1}')`, also beside other relations or in a join): each a derived table
/// of its unnested lists, `(SELECT unnest(keys(..)) AS key, unnest(values(..)) AS value) AS
/// jsonb_each`, its columns named as Postgres names them. (A function of the columns of the
/// relation before it is [`lateral_set_returning`]'s.)
fn standalone_set_returning(select: &mut ast::Select) {
    for twj in select.from.iter_mut() {
        if let Some(t) = constant_srf_table(&twj.relation) {
            twj.relation = t;
        }
        for j in twj.joins.iter_mut() {
            if let Some(t) = constant_srf_table(&j.relation) {
                j.relation = t;
            }
        }
    }
}

fn constant_srf_table(tf: &ast::TableFactor) -> Option<ast::TableFactor> {
    let FromFunction {
        name: fname,
        args,
        alias,
        ordinality,
    } = function_factor(tf)?;
    // (`unnest` and `generate_series` of constants are DataFusion's, unless WITH ORDINALITY)
    let srf = srf_items(
        &fname,
        &args,
        alias.as_ref(),
        !ordinality,
        ordinality,
        false,
    )?;
    if srf.reads_columns {
        return None;
    }
    let q = parse_query_text(&format!("SELECT {}", srf.items.join(", ")))?;
    Some(ast::TableFactor::Derived {
        lateral: false,
        subquery: q,
        alias: Some(ast::TableAlias {
            explicit: true,
            name: srf.alias.unwrap_or_else(|| Ident::new(fname)),
            columns: vec![],
            at: None,
        }),
        sample: None,
    })
}

/// A function call in FROM (`FROM f(args) [WITH ORDINALITY] AS a`, `UNNEST(array)`).
struct FromFunction {
    name: String,
    args: Vec<ast::FunctionArg>,
    alias: Option<ast::TableAlias>,
    ordinality: bool,
}

fn function_factor(tf: &ast::TableFactor) -> Option<FromFunction> {
    match tf {
        ast::TableFactor::Table {
            name,
            args: Some(args),
            alias,
            with_ordinality,
            ..
        } => Some(FromFunction {
            name: last_name(name)?,
            args: args.args.clone(),
            alias: alias.clone(),
            ordinality: *with_ordinality,
        }),
        ast::TableFactor::Function {
            name,
            args,
            alias,
            with_ordinality,
            ..
        } => Some(FromFunction {
            name: last_name(name)?,
            args: args.clone(),
            alias: alias.clone(),
            ordinality: *with_ordinality,
        }),
        ast::TableFactor::UNNEST {
            alias,
            array_exprs,
            with_offset: false,
            with_ordinality,
            ..
        } => Some(FromFunction {
            name: "unnest".to_owned(),
            args: array_exprs
                .iter()
                .map(|e| ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e.clone())))
                .collect(),
            alias: alias.clone(),
            ordinality: *with_ordinality,
        }),
        _ => None,
    }
}

/// A set-returning function in FROM as select items: `unnest(list(args)) AS column` (and
/// `jsonb_each`'s values beside its keys).
struct SrfItems {
    items: Vec<String>,
    /// the columns the items give, in order
    names: Vec<Ident>,
    /// the alias the function was given (its columns' relation name)
    alias: Option<Ident>,
    /// whether the arguments name columns (of a relation before the function)
    reads_columns: bool,
}

/// [`SrfItems`] of `fname(args)`: the JSON set-returning functions, `regexp_matches`,
/// `regexp_split_to_table` and `string_to_table`, and with `json_only` false also `unnest`
/// of one array and `generate_series` (DataFusion's own table functions otherwise); none for
/// other functions or more alias columns than the function has. `outer` (the function is
/// LEFT JOIN LATERAL'd): a row of NULLs where it gives no rows.
fn srf_items(
    fname: &str,
    args: &[ast::FunctionArg],
    alias: Option<&ast::TableAlias>,
    json_only: bool,
    ordinality: bool,
    outer: bool,
) -> Option<SrfItems> {
    if fname == "unnest" && args.len() > 1 {
        if outer {
            return None;
        }
        return multi_unnest_items(args, alias, ordinality);
    }
    // jsonb_each[_text]: two columns, a list of keys and one of values side by side
    let pair = match fname {
        "jsonb_each" => Some("weir_jsonb_each_values"),
        "json_each" => Some("weir_json_each_values"),
        "jsonb_each_text" => Some("weir_jsonb_each_text_values"),
        "json_each_text" => Some("weir_json_each_text_values"),
        _ => None,
    };
    let list = match fname {
        "unnest" if args.len() == 1 && !json_only => None,
        "generate_series" if !json_only => Some("generate_series"),
        "regexp_matches" => Some(crate::sql::pg_functions::REGEXP_MATCHES),
        "regexp_split_to_table" => Some(crate::sql::pg_functions::REGEXP_SPLIT_TO_TABLE),
        "string_to_table" => Some("string_to_array"),
        "pg_listening_channels" => Some(crate::sql::pg_functions::LISTENING_CHANNELS),
        "json_each" | "json_each_text" => Some("weir_json_each_keys"),
        _ if pair.is_some() => Some("weir_jsonb_each_keys"),
        other => Some(json_set_returning(other)?),
    };
    let mut reads_columns = false;
    for a in args {
        let _ = ast::visit_expressions(a, |e| {
            reads_columns |= matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_));
            ControlFlow::<()>::Continue(())
        });
    }
    let (columns, alias) = srf_columns(fname, alias, pair.is_some(), ordinality)?;
    let arg_text: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let bare_call = |l: Option<&str>| match l {
        None => arg_text.join(", "),
        Some(l) => format!("{l}({})", arg_text.join(", ")),
    };
    // outer: a list of one NULL where the list is empty or NULL
    let call = |l: Option<&str>| match outer {
        false => bare_call(l),
        true => {
            let list = bare_call(l);
            format!("(CASE WHEN cardinality({list}) > 0 THEN {list} ELSE make_array(NULL) END)")
        }
    };
    // (the rows of a jsonb function are jsonb, canonical already: typed so, so clients
    // read them as jsonb, as Postgres sends them)
    let typed = format!("{}(", crate::sql::pg_functions::JSONB_TYPED);
    let (open, close) = match yields_jsonb(fname) {
        true => (typed.as_str(), ")"),
        false => ("", ""),
    };
    let mut items = match pair {
        Some(_) => vec![format!("unnest({}) AS {}", call(list), columns[0])],
        None => vec![format!(
            "{open}unnest({}){close} AS {}",
            call(list),
            columns[0]
        )],
    };
    if let Some(values) = pair {
        items.push(format!(
            "{open}unnest({}){close} AS {}",
            call(Some(values)),
            columns[1]
        ));
    }
    // WITH ORDINALITY: each row's number, 1 up, beside it (unnested side by side)
    if ordinality {
        items.push(format!(
            "unnest(range(CAST(1 AS bigint), CAST(cardinality({}) AS bigint) + CAST(1 AS bigint))) AS {}",
            bare_call(list),
            columns[columns.len() - 1]
        ));
    }
    Some(SrfItems {
        items,
        names: columns,
        alias,
        reads_columns,
    })
}

/// `unnest(a, b, ...) [WITH ORDINALITY] [AS t(names)]` in FROM: the arrays side by side,
/// the shorter ones padded with NULLs, as Postgres zips them. The alias' column names name
/// the columns in order (Postgres names the rest `unnest`: here the second and later are
/// `unnest_2`, ..., a relation's columns needing distinct names); the ordinality column is
/// the row's number, up to the longest array.
fn multi_unnest_items(
    args: &[ast::FunctionArg],
    alias: Option<&ast::TableAlias>,
    ordinality: bool,
) -> Option<SrfItems> {
    let given: Vec<Ident> = alias
        .map(|a| a.columns.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    let n = args.len();
    if given.len() > n + usize::from(ordinality) {
        return None;
    }
    let mut reads_columns = false;
    for a in args {
        let _ = ast::visit_expressions(a, |e| {
            reads_columns |= matches!(e, Expr::Identifier(_) | Expr::CompoundIdentifier(_));
            ControlFlow::<()>::Continue(())
        });
    }
    let mut names: Vec<Ident> = (0..n)
        .map(|i| {
            given.get(i).cloned().unwrap_or_else(|| match i {
                0 => Ident::new("unnest"),
                _ => Ident::new(format!("unnest_{}", i + 1)),
            })
        })
        .collect();
    let mut items: Vec<String> = args
        .iter()
        .zip(&names)
        .map(|(a, name)| format!("unnest({a}) AS {name}"))
        .collect();
    if ordinality {
        let longest: Vec<String> = args
            .iter()
            .map(|a| format!("coalesce(cardinality({a}), 0)"))
            .collect();
        let name = given
            .get(n)
            .cloned()
            .unwrap_or_else(|| Ident::new("ordinality"));
        items.push(format!(
            "unnest(range(CAST(1 AS bigint), CAST(greatest({}) AS bigint) + CAST(1 AS bigint))) AS {name}",
            longest.join(", ")
        ));
        names.push(name);
    }
    Some(SrfItems {
        items,
        names,
        alias: alias.map(|a| a.name.clone()),
        reads_columns,
    })
}

/// Whether a set-returning function's rows (jsonb_each's values) are `jsonb`.
fn yields_jsonb(name: &str) -> bool {
    matches!(
        name,
        "jsonb_array_elements" | "jsonb_each" | "jsonb_path_query"
    )
}

/// The list-returning function behind a set-returning JSON function (unnested where it is
/// called).
fn json_set_returning(name: &str) -> Option<&'static str> {
    Some(match name {
        "jsonb_array_elements" | "json_array_elements" => "weir_jsonb_array_elements",
        "jsonb_array_elements_text" | "json_array_elements_text" => {
            "weir_jsonb_array_elements_text"
        }
        "jsonb_object_keys" => "weir_jsonb_object_keys",
        "json_object_keys" => "weir_json_object_keys",
        "jsonb_path_query" => crate::sql::jsonpath::PATH_QUERY,
        _ => return None,
    })
}

/// The length an explicit cast to `varchar(n)` / `char(n)` cuts text to, and whether the
/// type is blank-padded (`char(n)`).
fn cut_to_length(t: &ast::DataType) -> Option<(u64, bool)> {
    use ast::CharacterLength::IntegerLength;
    let (length, blank_padded) = match t {
        ast::DataType::Varchar(Some(IntegerLength { length, .. }))
        | ast::DataType::CharacterVarying(Some(IntegerLength { length, .. })) => (*length, false),
        ast::DataType::Char(Some(IntegerLength { length, .. }))
        | ast::DataType::Character(Some(IntegerLength { length, .. })) => (*length, true),
        _ => return None,
    };
    (1..=10_485_760)
        .contains(&length)
        .then_some((length, blank_padded))
}

/// The array type a text constant cast to `t` has when the constant has more dimensions
/// than `t` (`'{{1,2},{3,4}}'::int[]` is an `int[][]`): `t`'s element type with one array
/// level per dimension. None otherwise.
fn array_literal_type(x: &Expr, t: &ast::DataType) -> Option<ast::DataType> {
    let Expr::Value(v) = x else {
        return None;
    };
    let ast::Value::SingleQuotedString(text) = &v.value else {
        return None;
    };
    let dims = crate::sql::pg_text::array_text_dims(&crate::sql::pg_text::parse_array_items(text)?)
        .ok()?;
    let mut declared = 0;
    let mut element = t;
    while let ast::DataType::Array(ast::ArrayElemTypeDef::SquareBracket(inner, _)) = element {
        declared += 1;
        element = inner;
    }
    if declared == 0 || declared >= dims.len() {
        return None;
    }
    let mut nested = element.clone();
    for _ in 0..dims.len() {
        nested = ast::DataType::Array(ast::ArrayElemTypeDef::SquareBracket(Box::new(nested), None));
    }
    Some(nested)
}

/// `1.50::numeric` (or `'1.50'::numeric`) as an operand of arithmetic or a select item: a
/// `numeric` of the literal's own digits and scale, `numeric(3,2)`, where an unconstrained
/// `numeric` would be Arrow's one scale of 10 shown without trailing zeros. Postgres keeps
/// each value's scale, so `1.5::numeric * 2` is `3.0`; a literal is the one place the
/// value's scale is known when planning. Not for `/`: Postgres' quotient scale depends on
/// the operands' values (16 significant digits), which the quotient's type rule in
/// `sql/numeric.rs` matches better for an unconstrained operand.
fn numeric_literal_with_its_scale(e: &mut Expr) {
    if let Expr::UnaryOp {
        op: ast::UnaryOperator::Minus | ast::UnaryOperator::Plus,
        expr: inner,
    } = e
    {
        return numeric_literal_with_its_scale(inner);
    }
    let Expr::Cast {
        expr: inner,
        data_type:
            data_type @ (ast::DataType::Numeric(ast::ExactNumberInfo::None)
            | ast::DataType::Decimal(ast::ExactNumberInfo::None)),
        ..
    } = e
    else {
        return;
    };
    let text = match inner.as_ref() {
        Expr::Value(v) => match &v.value {
            ast::Value::Number(n, _) => n.clone(),
            ast::Value::SingleQuotedString(t) => t.trim().to_owned(),
            _ => return,
        },
        _ => return,
    };
    let plain = crate::sql::numeric::expand_exponent(&text).unwrap_or(text);
    let digits = plain.strip_prefix(['-', '+']).unwrap_or(&plain);
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) || digits.is_empty() {
        return;
    }
    let int = int.trim_start_matches('0');
    let precision = (int.len() + frac.len()).max(1);
    if precision > 38 {
        return;
    }
    *data_type = ast::DataType::Numeric(ast::ExactNumberInfo::PrecisionAndScale(
        precision as u64,
        frac.len() as i64,
    ));
}

/// A numeric literal with an exponent as Postgres reads it: an exact value whose scale is
/// the mantissa's minus the exponent, never negative (`1e6` = 1000000, `1.50e1` = 15.0,
/// `1.5e-3` = 0.0015). `None` when it is not such a literal or the exponent is huge.
/// A `SIMILAR TO` pattern as the regular expression Postgres matches it by
/// (`similar_to_escape`): anchored at both ends, `%` any text, `_` any character, `.`,
/// `^` and `$` themselves, `escape` (default backslash) making the next character
/// literal; `|`, `*`, `+`, `?`, `{m,n}`, parentheses and bracket expressions as in a
/// regular expression. `.` matches newlines, as in Postgres' AREs.
pub fn similar_to_regex(pattern: &str, escape: Option<char>) -> String {
    let mut out = String::from("(?s)^(?:");
    let mut chars = pattern.chars();
    let mut in_bracket = false;
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            match chars.next() {
                Some(n) => out.push_str(&regex::escape(&n.to_string())),
                None => out.push_str(&regex::escape(&c.to_string())),
            }
            continue;
        }
        if in_bracket {
            if c == ']' {
                in_bracket = false;
            }
            out.push(c);
            continue;
        }
        match c {
            '%' => out.push_str(".*"),
            '_' => out.push('.'),
            '[' => {
                in_bracket = true;
                out.push(c);
            }
            '.' | '^' | '$' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out.push_str(")$");
    out
}

/// An integer literal that fits in 32 bits is Postgres' `integer` (DataFusion types every
/// integer literal `bigint`), so `2147483647 + 1` overflows as in Postgres and `SELECT 1`
/// is an `int4` column. Done where a literal is an operand or a select item, not where
/// its form matters (ORDER BY ordinals, LIMIT, function arguments read as constants).
fn int4_literal(e: &mut Expr) {
    if let Expr::Value(v) = e
        && let ast::Value::Number(n, false) = &v.value
        && n.trim_start_matches('-')
            .bytes()
            .all(|b| b.is_ascii_digit())
        && n.parse::<i32>().is_ok()
    {
        let lit = std::mem::replace(e, Expr::value(ast::Value::Null));
        *e = Expr::Cast {
            kind: CastKind::Cast,
            expr: Box::new(lit),
            data_type: ast::DataType::Int(None),
            array: false,
            format: None,
        };
    }
}

/// `FROM (VALUES (1), (2)) t(x)`: integer constants that fit are `integer`, as Postgres
/// types them (DataFusion's are bigint: `(SELECT max(x) FROM (VALUES (2147483647)) t(x)) +
/// 1` was 2147483648, Postgres' 22003); a column with a larger one is bigint still (their
/// common type). Only VALUES in FROM: an INSERT's own VALUES takes the table's types.
fn int4_values_in_from(body: &mut ast::SetExpr) {
    let ast::SetExpr::Select(select) = body else {
        return;
    };
    let factors = select.from.iter_mut().flat_map(|t| {
        std::iter::once(&mut t.relation).chain(t.joins.iter_mut().map(|j| &mut j.relation))
    });
    for f in factors {
        if let ast::TableFactor::Derived { subquery, .. } = f
            && let ast::SetExpr::Values(v) = subquery.body.as_mut()
        {
            for row in v.rows.iter_mut() {
                for e in row.content.iter_mut() {
                    int4_literal(e);
                }
            }
        }
    }
}

/// A literal too large for an exact numeric (over 38 digits, like `1e300`) is read as a
/// double: Postgres' numeric would hold it, DataFusion's decimals cannot.
fn huge_literal(e: &mut Expr) {
    if let Expr::Value(v) = e
        && let ast::Value::Number(n, _) = &v.value
        && n.bytes().filter(u8::is_ascii_digit).count() > 38
    {
        let text = n.clone();
        *e = Expr::Cast {
            kind: CastKind::Cast,
            expr: Box::new(Expr::value(ast::Value::SingleQuotedString(text))),
            data_type: ast::DataType::DoublePrecision,
            array: false,
            format: None,
        };
    }
}

/// Literals that are operands of arithmetic or comparisons typed as Postgres types them:
/// integers as `integer`, and numeric literal casts with their own scale in `+ - * %`.
fn int4_operands(expr: &mut Expr) {
    match expr {
        Expr::BinaryOp {
            left,
            op:
                op @ (BinaryOperator::Plus
                | BinaryOperator::Minus
                | BinaryOperator::Multiply
                | BinaryOperator::Divide
                | BinaryOperator::Modulo
                | BinaryOperator::Eq
                | BinaryOperator::NotEq
                | BinaryOperator::Lt
                | BinaryOperator::LtEq
                | BinaryOperator::Gt
                | BinaryOperator::GtEq),
            right,
        } => {
            int4_literal(left);
            int4_literal(right);
            if matches!(
                op,
                BinaryOperator::Plus
                    | BinaryOperator::Minus
                    | BinaryOperator::Multiply
                    | BinaryOperator::Modulo
            ) {
                numeric_literal_with_its_scale(left);
                numeric_literal_with_its_scale(right);
            }
        }
        // Postgres folds the sign into the constant: `-2147483648` is an `integer`
        // (parentheses too: `-(-2147483648)` is the constant 2147483648, a bigint)
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr: inner,
        } => {
            let mut x = inner.as_ref();
            while let Expr::Nested(n) = x {
                x = n;
            }
            let n = match x {
                Expr::Value(v) => match &v.value {
                    ast::Value::Number(n, false) => Some(n.clone()),
                    _ => None,
                },
                Expr::Cast {
                    expr: lit,
                    data_type: ast::DataType::Int(None),
                    ..
                } => match lit.as_ref() {
                    Expr::Value(v) => match &v.value {
                        ast::Value::Number(n, false) => Some(n.clone()),
                        _ => None,
                    },
                    _ => None,
                },
                _ => None,
            };
            if let Some(n) = n
                && n.trim_start_matches('-')
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            {
                let negated = match n.strip_prefix('-') {
                    Some(p) => p.to_owned(),
                    None => format!("-{n}"),
                };
                let mut lit = Expr::value(ast::Value::Number(negated, false));
                int4_literal(&mut lit);
                *expr = lit;
            }
        }
        // the functions and CASE that unify their arguments' types (and `pg_typeof(1)`,
        // which is integer, and `to_hex(-1)`, Postgres' int4 to_hex)
        Expr::Function(f)
            if matches!(
                last_name(&f.name).as_deref(),
                Some(
                    "nullif"
                        | "coalesce"
                        | "greatest"
                        | "least"
                        | "mod"
                        | "gcd"
                        | "lcm"
                        | "pg_typeof"
                        | "to_hex"
                )
            ) =>
        {
            if let FunctionArguments::List(l) = &mut f.args {
                for a in l.args.iter_mut() {
                    if let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) = a {
                        int4_literal(e);
                    }
                }
            }
        }
        // `ARRAY[1, 2]` is an `integer[]`
        Expr::Array(a) => {
            for e in a.elem.iter_mut() {
                int4_literal(e);
            }
        }
        Expr::Case {
            conditions,
            else_result,
            ..
        } => {
            for c in conditions.iter_mut() {
                int4_literal(&mut c.result);
            }
            if let Some(e) = else_result {
                int4_literal(e);
            }
        }
        _ => {}
    }
}

/// `x [NOT] SIMILAR TO 'pattern' [ESCAPE 'c']` with a constant pattern: `x ~ regex` (or
/// `!~`) with the regular expression Postgres makes of it ([`similar_to_regex`]).
/// DataFusion read the pattern as an unanchored regex, `%` and `_` literal.
fn similar_to(expr: &mut Expr) -> crate::error::Result<()> {
    let Expr::SimilarTo {
        negated,
        expr: x,
        pattern,
        escape_char,
    } = expr
    else {
        return Ok(());
    };
    let Expr::Value(v) = pattern.as_ref() else {
        return Ok(());
    };
    let ast::Value::SingleQuotedString(text) = &v.value else {
        return Ok(());
    };
    let escape = match escape_char.as_ref().map(|e| &e.value) {
        None => Some('\\'),
        Some(ast::Value::SingleQuotedString(e)) => {
            let mut chars = e.chars();
            match (chars.next(), chars.next()) {
                (None, _) => None,
                (Some(c), None) => Some(c),
                _ => {
                    return Err(
                        crate::error::WeirError::new("22025", "invalid escape string")
                            .with_hint("Escape string must be empty or one character."),
                    );
                }
            }
        }
        Some(_) => return Ok(()),
    };
    let regex = similar_to_regex(text, escape);
    let x = std::mem::replace(x.as_mut(), Expr::value(ast::Value::Null));
    *expr = Expr::BinaryOp {
        left: Box::new(x),
        op: if *negated {
            BinaryOperator::PGRegexNotMatch
        } else {
            BinaryOperator::PGRegexMatch
        },
        right: Box::new(Expr::value(ast::Value::SingleQuotedString(regex))),
    };
    Ok(())
}

fn rewrite_expr(expr: &mut Expr) {
    int4_operands(expr);
    distinct_aggregate_in_order(expr);
    percentiles_of_an_array(expr);
    hypothetical_rank(expr);
    concatenated_null(expr);
    overlaps_operator(expr);
    simple_case_with_quoted_values(expr);
    match expr {
        // `pg_partition_ancestors('rel')` in a select list: the relation itself (see
        // `function_in_from`)
        Expr::Function(f)
            if last_name(&f.name).as_deref() == Some("pg_partition_ancestors")
                && matches!(&f.args, ast::FunctionArguments::List(l)
                    if matches!(plain_args(l).as_slice(), [Expr::Value(v)]
                        if matches!(v.value, ast::Value::SingleQuotedString(_)))) =>
        {
            f.name = ast::ObjectName::from(vec![Ident::new("weir_regclass")]);
        }
        // Postgres' prefix operators: `|/ x` square root, `||/ x` cube root, `@ x` absolute
        // value, `~ x` bitwise not
        Expr::UnaryOp {
            op:
                op @ (ast::UnaryOperator::PGSquareRoot
                | ast::UnaryOperator::PGCubeRoot
                | ast::UnaryOperator::PGAbs
                | ast::UnaryOperator::BitwiseNot),
            expr: inner,
        } => {
            let name = match op {
                ast::UnaryOperator::PGSquareRoot => "sqrt",
                ast::UnaryOperator::PGCubeRoot => "cbrt",
                ast::UnaryOperator::PGAbs => "abs",
                _ => crate::sql::pg_functions::BITWISE_NOT,
            };
            let arg = std::mem::replace(inner.as_mut(), Expr::value(ast::Value::Null));
            *expr = call(name, vec![arg]);
        }
        // `x BETWEEN SYMMETRIC a AND b` (marked by the parser): `(x BETWEEN a AND b) OR
        // (x BETWEEN b AND a)`, as Postgres defines it; NOT of that for `NOT BETWEEN`
        Expr::Between { low, .. }
            if matches!(low.as_ref(), Expr::Function(f)
                if f.name.to_string() == crate::sql::parser::SYMMETRIC_MARKER) =>
        {
            let null = || Expr::value(ast::Value::Null);
            let Expr::Between {
                expr: x,
                negated,
                low,
                high,
            } = std::mem::replace(expr, null())
            else {
                return;
            };
            let low = match *low {
                Expr::Function(ast::Function {
                    args: ast::FunctionArguments::List(mut list),
                    ..
                }) if list.args.len() == 1 => match list.args.remove(0) {
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) => e,
                    _ => null(),
                },
                _ => null(),
            };
            let between = |a: &Expr, b: &Expr| {
                Expr::Nested(Box::new(Expr::Between {
                    expr: x.clone(),
                    negated: false,
                    low: Box::new(a.clone()),
                    high: Box::new(b.clone()),
                }))
            };
            let either = Expr::Nested(Box::new(Expr::BinaryOp {
                left: Box::new(between(&low, &high)),
                op: BinaryOperator::Or,
                right: Box::new(between(&high, &low)),
            }));
            *expr = if negated {
                Expr::Nested(Box::new(Expr::UnaryOp {
                    op: ast::UnaryOperator::Not,
                    expr: Box::new(either),
                }))
            } else {
                either
            };
        }
        // `x op ANY(array)` / `ALL`: Postgres' three-valued logic over the elements; over a
        // subquery, the same over `ARRAY(subquery)` (DataFusion's own plan of `x > ANY
        // (SELECT c FROM t)` resolves an outer `t.c` to the subquery's `t.c` when both read
        // `t`: `c > ANY (SELECT c FROM g WHERE a = 1)` compared each row with itself)
        Expr::AnyOp { compare_op, .. } | Expr::AllOp { compare_op, .. } => {
            let op = compare_op.to_string();
            let all = matches!(expr, Expr::AllOp { .. });
            let (Expr::AnyOp { left, right, .. } | Expr::AllOp { left, right, .. }) = expr else {
                return;
            };
            let null = || Expr::value(ast::Value::Null);
            let l = std::mem::replace(left.as_mut(), null());
            let mut r = match std::mem::replace(right.as_mut(), null()) {
                Expr::Subquery(q) => array_of_subquery(*q),
                r => r,
            };
            // `x = ANY('{1,2}')`: the literal is an array
            if let Some(arr) = array_literal(&r) {
                r = arr;
            }
            *expr = call(
                crate::sql::pg_functions::ANY_OP,
                vec![
                    l,
                    r,
                    Expr::value(ast::Value::SingleQuotedString(op)),
                    Expr::value(ast::Value::Boolean(all)),
                ],
            );
        }
        // Postgres 14+: `EXTRACT(field FROM x)` is the function `extract('field', x)`, a
        // numeric (DataFusion plans it as its integer `date_part`)
        Expr::Extract { field, expr: x, .. } => {
            // (`EXTRACT('hour' FROM x)` names it quoted)
            let field = field.to_string();
            let field = field.trim_matches('\'').to_string();
            let field = Expr::value(ast::Value::SingleQuotedString(field));
            let x = std::mem::replace(x.as_mut(), Expr::value(ast::Value::Null));
            *expr = call("extract", vec![field, x]);
        }
        // `substring(x FROM 'pattern')`: a text FROM is a regular expression (Postgres'
        // `substring(text, text)`)
        Expr::Substring {
            expr: x,
            substring_from: Some(from),
            substring_for: None,
            ..
        } if matches!(
            from.as_ref(),
            Expr::Value(v) if matches!(v.value, ast::Value::SingleQuotedString(_))
        ) =>
        {
            let x = std::mem::replace(x.as_mut(), Expr::value(ast::Value::Null));
            let from = std::mem::replace(from.as_mut(), Expr::value(ast::Value::Null));
            *expr = call(crate::sql::pg_functions::SUBSTRING_REGEX, vec![x, from]);
        }
        // `x AT TIME ZONE z` is Postgres' `timezone(z, x)` (DataFusion's cast to a zoned
        // timestamp leaves a timestamptz's instant, and so its text, as it was)
        Expr::AtTimeZone {
            timestamp,
            time_zone,
        } => {
            let x = std::mem::replace(timestamp.as_mut(), Expr::value(ast::Value::Null));
            let z = std::mem::replace(time_zone.as_mut(), Expr::value(ast::Value::Null));
            *expr = call("timezone", vec![z, x]);
        }
        Expr::Value(v) => {
            // `U&'\0041'` is text like any string constant (its escapes already read)
            if let ast::Value::UnicodeStringLiteral(t) = &mut v.value {
                v.value = ast::Value::SingleQuotedString(std::mem::take(t));
            }
            if let ast::Value::Number(n, long) = &mut v.value
                && let Some(plain) = crate::sql::numeric::expand_exponent(n)
            {
                *n = plain;
                // marks an exact numeric, never `integer` (`1e6` is numeric in Postgres)
                *long = true;
            }
            huge_literal(expr);
        }
        // `-interval '1 mon -2 days'` negates every field (DataFusion's planner puts the
        // minus into the literal's text, negating its first): the interval's value negated
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr: inner,
        } if matches!(inner.as_ref(), Expr::Interval(_)) => {
            let iv = std::mem::replace(inner.as_mut(), Expr::value(ast::Value::Null));
            *inner.as_mut() = Expr::Nested(Box::new(iv));
        }
        // Postgres' unary minus binds tighter than `^`: `-3 ^ 2` is `(-3) ^ 2` = 9
        Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr: inner,
        } if matches!(
            inner.as_ref(),
            Expr::BinaryOp {
                op: BinaryOperator::PGExp,
                ..
            }
        ) =>
        {
            let mut e = std::mem::replace(inner.as_mut(), Expr::value(ast::Value::Null));
            let mut slot = &mut e;
            while let Expr::BinaryOp {
                op: BinaryOperator::PGExp,
                left,
                ..
            } = slot
            {
                slot = left.as_mut();
            }
            let operand = std::mem::replace(slot, Expr::value(ast::Value::Null));
            *slot = Expr::UnaryOp {
                op: ast::UnaryOperator::Minus,
                expr: Box::new(operand),
            };
            *expr = e;
        }
        // `(a1, a2) = (b1, b2)` is `a1 = b1 AND a2 = b2` (and `<>` its negation), three-valued
        // as in Postgres: a NULL element with the rest equal makes it NULL (a struct
        // comparison would call two NULLs equal)
        Expr::BinaryOp {
            left,
            op: op @ (BinaryOperator::Eq | BinaryOperator::NotEq),
            right,
        } if matches!((row_items(left), row_items(right)), (Some(a), Some(b)) if a.len() == b.len() && a.len() > 1) =>
        {
            let (Some(a), Some(b)) = (row_items(left), row_items(right)) else {
                return;
            };
            let equal = a
                .iter()
                .zip(b)
                .map(|(x, y)| format!("(({x}) = ({y}))"))
                .collect::<Vec<_>>()
                .join(" AND ");
            let text = match op {
                BinaryOperator::Eq => format!("({equal})"),
                _ => format!("(NOT ({equal}))"),
            };
            if let Some(e) = try_parse_expr(&text) {
                *expr = e;
            }
        }
        // `(a1, a2) < (b1, b2)` (and `<=`, `>`, `>=`): element by element, the first pair
        // that differs decides; a pair with a NULL before that makes it NULL; all equal is
        // `<=`/`>=`'s true, `<`/`>`'s false, as Postgres compares rows
        Expr::BinaryOp {
            left,
            op:
                op @ (BinaryOperator::Lt
                | BinaryOperator::LtEq
                | BinaryOperator::Gt
                | BinaryOperator::GtEq),
            right,
        } if matches!((row_items(left), row_items(right)), (Some(a), Some(b)) if a.len() == b.len() && a.len() > 1) =>
        {
            let (Some(a), Some(b)) = (row_items(left), row_items(right)) else {
                return;
            };
            let strict = match op {
                BinaryOperator::Lt | BinaryOperator::LtEq => "<",
                _ => ">",
            };
            let all_equal = matches!(op, BinaryOperator::LtEq | BinaryOperator::GtEq);
            let mut text = String::from("(CASE");
            for (x, y) in a.iter().zip(b) {
                text.push_str(&format!(
                    " WHEN ({x}) IS NULL OR ({y}) IS NULL THEN NULL \
                     WHEN ({x}) <> ({y}) THEN ({x}) {strict} ({y})"
                ));
            }
            text.push_str(&format!(" ELSE {all_equal} END)"));
            if let Some(e) = try_parse_expr(&text) {
                *expr = e;
            }
        }
        // `a[:n]`, `a[m:]`, `a[:]`: a slice from the array's first or to its last element
        Expr::CompoundFieldAccess { root, access_chain }
            if access_chain.iter().any(|a| {
                matches!(
                    a,
                    ast::AccessExpr::Subscript(ast::Subscript::Slice {
                        lower_bound,
                        upper_bound,
                        ..
                    }) if lower_bound.is_none() || upper_bound.is_none()
                )
            }) =>
        {
            let whole = root.as_ref().clone();
            for a in access_chain.iter_mut() {
                if let ast::AccessExpr::Subscript(ast::Subscript::Slice {
                    lower_bound,
                    upper_bound,
                    ..
                }) = a
                {
                    if lower_bound.is_none() {
                        *lower_bound = Some(Expr::value(ast::Value::Number("1".into(), false)));
                    }
                    if upper_bound.is_none() {
                        *upper_bound = Some(Expr::Cast {
                            kind: ast::CastKind::Cast,
                            expr: Box::new(call("cardinality", vec![whole.clone()])),
                            data_type: ast::DataType::BigInt(None),
                            array: false,
                            format: None,
                        });
                    }
                }
            }
        }
        // `(composite).field` → get_field(composite, 'field')
        Expr::CompoundFieldAccess { root, access_chain }
            if !matches!(
                root.as_ref(),
                Expr::Identifier(_) | Expr::CompoundIdentifier(_)
            ) && access_chain
                .iter()
                .all(|a| matches!(a, ast::AccessExpr::Dot(Expr::Identifier(_)))) =>
        {
            let mut e = std::mem::replace(root.as_mut(), Expr::value(ast::Value::Null));
            for a in access_chain.iter() {
                if let ast::AccessExpr::Dot(Expr::Identifier(id)) = a {
                    let field =
                        Expr::value(ast::Value::SingleQuotedString(id.value.to_lowercase()));
                    e = call("get_field", vec![e, field]);
                }
            }
            *expr = e;
        }
        // `x [NOT] [I]LIKE ANY (patterns)`: Postgres' three-valued ANY over the patterns
        Expr::Like {
            any: true,
            escape_char: None,
            ..
        }
        | Expr::ILike {
            any: true,
            escape_char: None,
            ..
        } => {
            let ilike = matches!(expr, Expr::ILike { .. });
            let (Expr::Like {
                negated,
                expr: x,
                pattern,
                ..
            }
            | Expr::ILike {
                negated,
                expr: x,
                pattern,
                ..
            }) = expr
            else {
                return;
            };
            let op = match (ilike, *negated) {
                (false, false) => "~~",
                (false, true) => "!~~",
                (true, false) => "~~*",
                (true, true) => "!~~*",
            };
            let null = || Expr::value(ast::Value::Null);
            let l = std::mem::replace(x.as_mut(), null());
            let mut r = std::mem::replace(pattern.as_mut(), null());
            if let Expr::Nested(inner) = &r {
                r = inner.as_ref().clone();
            }
            // `LIKE ANY ('{a%,b%}')`: the literal is an array
            if let Some(arr) = array_literal(&r) {
                r = arr;
            }
            *expr = call(
                crate::sql::pg_functions::ANY_OP,
                vec![
                    l,
                    r,
                    Expr::value(ast::Value::SingleQuotedString(op.into())),
                    Expr::value(ast::Value::Boolean(false)),
                ],
            );
        }
        Expr::Like {
            pattern,
            escape_char: escape @ Some(_),
            ..
        }
        | Expr::ILike {
            pattern,
            escape_char: escape @ Some(_),
            ..
        } => {
            let esc = escape.as_ref().and_then(|v| match &v.value {
                ast::Value::SingleQuotedString(s) if s.chars().count() == 1 => s.chars().next(),
                _ => None,
            });
            if let Some(esc) = esc
                && esc != '\\'
            {
                let p = std::mem::replace(pattern.as_mut(), Expr::value(ast::Value::Null));
                **pattern = match fold_string(&p) {
                    Some(text) => Expr::value(ast::Value::SingleQuotedString(backslash_pattern(
                        &text, esc,
                    ))),
                    // a bound parameter: converted when it is known
                    None => call(
                        "weir_like_escape",
                        vec![
                            p,
                            Expr::value(ast::Value::SingleQuotedString(esc.to_string())),
                        ],
                    ),
                };
                *escape = None;
            }
        }
        // (`INTERVAL '5' SECOND`: the field names the number's unit, DataFusion reads it)
        Expr::Interval(iv) if iv.leading_field.is_none() => {
            normalize_interval_literal(iv.value.as_mut());
        }
        // `INTERVAL '1:30' HOUR TO MINUTE`: read, then cut below the last field (Postgres'
        // AdjustIntervalForTypmod); `MINUTE TO SECOND` reads `a:b` as minutes:seconds
        Expr::Interval(iv) if iv.last_field.is_some() => {
            if let Expr::Value(v) = iv.value.as_mut()
                && let ast::Value::SingleQuotedString(text) = &v.value
            {
                use ast::DateTimeField as F;
                let minutes_seconds = matches!(
                    (&iv.leading_field, &iv.last_field),
                    (Some(F::Minute), Some(F::Second))
                ) && text.matches(':').count() == 1;
                // `'1-2' YEAR TO MONTH`: the SQL standard's years-months
                let years_months = matches!(
                    (&iv.leading_field, &iv.last_field),
                    (Some(F::Year), Some(F::Month))
                )
                .then(|| {
                    let t = text.trim();
                    let (negative, t) = match t.strip_prefix('-') {
                        Some(r) => (true, r),
                        None => (false, t.strip_prefix('+').unwrap_or(t)),
                    };
                    let (y, m) = t.split_once('-')?;
                    let (y, m): (i32, i32) = (y.parse().ok()?, m.parse().ok()?);
                    let months = y.checked_mul(12)?.checked_add(m)?;
                    Some(crate::sql::interval_in::Interval {
                        months: if negative { -months } else { months },
                        days: 0,
                        micros: 0,
                    })
                })
                .flatten();
                let read = if years_months.is_some() {
                    years_months
                } else if minutes_seconds {
                    crate::sql::interval_in::parse(&format!("0:{}", text.trim()))
                } else {
                    crate::sql::interval_in::parse(text)
                };
                if let Some(mut parsed) = read {
                    let unit = match iv.last_field {
                        Some(F::Year) => Some(-1),
                        Some(F::Month) => Some(0),
                        Some(F::Day) => Some(86_400_000_000),
                        Some(F::Hour) => Some(3_600_000_000),
                        Some(F::Minute) => Some(60_000_000),
                        _ => None,
                    };
                    match unit {
                        Some(-1) => {
                            parsed.months = parsed.months / 12 * 12;
                            parsed.days = 0;
                            parsed.micros = 0;
                        }
                        Some(0) | Some(86_400_000_000) => {
                            if unit == Some(0) {
                                parsed.days = 0;
                            }
                            parsed.micros = 0;
                        }
                        Some(u) => parsed.micros = parsed.micros / u * u,
                        None => {}
                    }
                    v.value = ast::Value::SingleQuotedString(format!(
                        "{} months {} days {} microseconds",
                        parsed.months, parsed.days, parsed.micros
                    ));
                    iv.leading_field = None;
                    iv.last_field = None;
                    iv.leading_precision = None;
                    iv.fractional_seconds_precision = None;
                }
            }
        }
        // a text constant of a multi-dimensional array cast to an array type: the type
        // gets the constant's dimensions (Postgres' `int[]` has any number of them), so
        // `('{{1,2},{3,4}}'::int[])[2][1]` plans as `int[][]`
        Expr::Cast {
            data_type: t @ ast::DataType::Array(_),
            expr: inner,
            ..
        } if array_literal_type(inner, t).is_some() => {
            if let Some(nested) = array_literal_type(inner, t) {
                *t = nested;
            }
        }
        Expr::Cast {
            data_type: ast::DataType::Interval { .. },
            expr: inner,
            ..
        } => normalize_interval_literal(inner.as_mut()),
        Expr::Cast {
            data_type: ast::DataType::Bytea,
            expr: inner,
            ..
        } => normalize_bytea_literal(inner.as_mut()),
        // `'$.a[*]'::jsonpath`: the path's text, checked to parse
        Expr::Cast {
            data_type: ast::DataType::Custom(name, args),
            expr: inner,
            ..
        } if args.is_empty() && last_name(name).is_some_and(|n| n == "jsonpath") => {
            let x = std::mem::replace(inner.as_mut(), Expr::value(ast::Value::Null));
            *expr = call(crate::sql::jsonpath::JSONPATH_IN, vec![x]);
        }
        // a cast to `timestamp(p)`, `timestamptz(p)` or `time(p)`: to the type, rounded to p
        // fractional digits (`now()::timestamp(0)`)
        Expr::Cast {
            data_type:
                ast::DataType::Timestamp(precision @ Some(_), _)
                | ast::DataType::Time(precision @ Some(_), _),
            ..
        } => {
            let digits = precision.take().unwrap_or(6);
            let cast = std::mem::replace(expr, Expr::value(ast::Value::Null));
            *expr = call(
                crate::sql::pg_functions::TIME_ROUND,
                vec![
                    cast,
                    Expr::value(ast::Value::Number(digits.to_string(), false)),
                ],
            );
        }
        // `character` is `character(1)`
        Expr::Cast {
            data_type: t @ (ast::DataType::Char(None) | ast::DataType::Character(None)),
            ..
        } => {
            *t = ast::DataType::Character(Some(ast::CharacterLength::IntegerLength {
                length: 1,
                unit: None,
            }));
            rewrite_expr(expr);
        }
        // an explicit cast to `varchar(n)` / `char(n)` cuts the text to n characters, as
        // Postgres does (an assignment of a longer text fails instead: 22001); `char(n)`
        // also drops trailing blanks (they mean nothing to it; it is padded when sent)
        Expr::Cast {
            data_type,
            expr: inner,
            ..
        } if cut_to_length(data_type).is_some() => {
            let Some((n, blank_padded)) = cut_to_length(data_type) else {
                return;
            };
            let x = std::mem::replace(inner.as_mut(), Expr::value(ast::Value::Null));
            let text = Expr::Cast {
                kind: ast::CastKind::Cast,
                expr: Box::new(x),
                data_type: ast::DataType::Text,
                array: false,
                format: None,
            };
            let cut = call(
                "left",
                vec![text, Expr::value(ast::Value::Number(n.to_string(), false))],
            );
            **inner = match blank_padded {
                true => call(
                    "rtrim",
                    vec![cut, Expr::value(ast::Value::SingleQuotedString(" ".into()))],
                ),
                false => cut,
            };
        }
        Expr::Collate { expr: inner, .. } => {
            *expr = std::mem::replace(inner.as_mut(), Expr::value(ast::Value::Null));
        }
        Expr::BinaryOp {
            left,
            op:
                op @ (BinaryOperator::Arrow
                | BinaryOperator::LongArrow
                | BinaryOperator::HashArrow
                | BinaryOperator::HashLongArrow),
            right,
        } => {
            let name = match op {
                BinaryOperator::Arrow => "weir_json_get",
                BinaryOperator::LongArrow => "weir_json_get_text",
                BinaryOperator::HashArrow => "weir_json_path",
                _ => "weir_json_path_text",
            };
            let null = || Expr::value(ast::Value::Null);
            let l = std::mem::replace(left.as_mut(), null());
            let r = std::mem::replace(right.as_mut(), null());
            *expr = call(name, vec![l, r]);
        }
        Expr::BinaryOp { left, op, right } => {
            // `'nextval(' || x::regclass || ')'`: a reg value in text is its name (the
            // output function, as Postgres' implicit cast to text)
            if *op == BinaryOperator::StringConcat {
                for side in [&mut *left, &mut *right] {
                    if let Expr::Function(f) = side.as_mut() {
                        shown_as_name(f);
                    }
                }
            }
            // `indisprimary = 'f'`: Postgres reads the literal as a boolean
            if matches!(op, BinaryOperator::Eq | BinaryOperator::NotEq) {
                let (l, r) = (is_bool_catalog_column(left), is_bool_catalog_column(right));
                for (is_bool, lit) in [(l, &mut **right), (r, &mut **left)] {
                    if is_bool
                        && let Expr::Value(v) = lit
                        && let ast::Value::SingleQuotedString(t) = &v.value
                        && let Some(b) = match t.to_lowercase().as_str() {
                            "t" | "true" | "y" | "yes" | "on" | "1" => Some(true),
                            "f" | "false" | "n" | "no" | "off" | "0" => Some(false),
                            _ => None,
                        }
                    {
                        *lit = Expr::value(ast::Value::Boolean(b));
                    }
                }
            }
            if let BinaryOperator::PGCustomBinaryOperator(parts) = op
                && let Some(last) = parts.last()
            {
                let mapped = match last.as_str() {
                    "~" => Some(BinaryOperator::PGRegexMatch),
                    "~*" => Some(BinaryOperator::PGRegexIMatch),
                    "!~" => Some(BinaryOperator::PGRegexNotMatch),
                    "!~*" => Some(BinaryOperator::PGRegexNotIMatch),
                    "=" => Some(BinaryOperator::Eq),
                    "<>" => Some(BinaryOperator::NotEq),
                    "<" => Some(BinaryOperator::Lt),
                    ">" => Some(BinaryOperator::Gt),
                    "<=" => Some(BinaryOperator::LtEq),
                    ">=" => Some(BinaryOperator::GtEq),
                    "~~" => None,
                    _ => None,
                };
                if let Some(m) = mapped {
                    *op = m;
                }
            }
        }
        Expr::Function(f) => {
            if f.name.0.len() > 1
                && let Some(last) = f.name.0.last().cloned()
            {
                f.name = ObjectName(vec![last]);
            }
            let lname = last_name(&f.name).unwrap_or_default();
            if matches!(f.args, FunctionArguments::None)
                && matches!(
                    lname.as_str(),
                    "current_user"
                        | "session_user"
                        | "current_role"
                        | "user"
                        | "current_catalog"
                        | "current_schema"
                )
            {
                *expr = call(&lname, vec![]);
                return;
            }
            // `localtimestamp` / `localtime` / `current_date`: the transaction's time
            // without a zone (in the session's: `pg_semantics` casts in it)
            if matches!(f.args, FunctionArguments::None)
                && matches!(
                    lname.as_str(),
                    "localtimestamp" | "localtime" | "current_date"
                )
            {
                let to = match lname.as_str() {
                    "localtime" => "TIME",
                    "current_date" => "DATE",
                    _ => "TIMESTAMP",
                };
                *expr = parse_expr(&format!("CAST(now() AS {to})"));
                return;
            }

            if lname == "array"
                && let FunctionArguments::Subquery(q) = &f.args
            {
                *expr = if reads_only_empty_catalogs(q) || requires_column_acl(q) {
                    // ARRAY over no rows is empty (psql's \dp asks pg_policy, and the
                    // columns with an ACL: Weir has no column privileges)
                    parse_expr("CAST(make_array() AS TEXT[])")
                } else if unnests_reloptions(q) {
                    // psql's \d+ lists toast options: Weir has no storage options
                    Expr::value(ast::Value::Null)
                } else {
                    array_of_subquery((**q).clone())
                };
                return;
            }
            if lname == "generate_series"
                && let FunctionArguments::List(l) = &f.args
                && let Some(series) = only_plain_args(&l.args).and_then(|a| numeric_series(&a))
            {
                *expr = series;
                return;
            }
            // `generate_series(start, stop, step)` of dates or timestamps with some of them
            // written as text: typed as Postgres types unknown constants (the bounds as the
            // other bound, the step as an interval)
            if lname == "generate_series"
                && let FunctionArguments::List(l) = &mut f.args
                && l.args.len() == 3
            {
                series_text_arguments(&mut l.args);
            }
            if lname == "unnest"
                && let FunctionArguments::List(l) = &mut f.args
            {
                for arg in &mut l.args {
                    if let ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e)) = arg {
                        all_elements(e);
                    }
                }
            }
            // Postgres' `array_replace` replaces every occurrence (DataFusion's the first)
            if lname == "array_replace" {
                f.name = ObjectName::from(vec![Ident::new("array_replace_all")]);
                return;
            }
            // `regexp_substr(s, pattern)` (Postgres 15): the first match, whole
            if lname == "regexp_substr"
                && let FunctionArguments::List(l) = &f.args
                && let [
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(text)),
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(pattern)),
                ] = l.args.as_slice()
            {
                // the pattern as one group: substring's first group is the whole match
                let whole = parse_expr(&format!("('(' || ({pattern}) || ')')"));
                *expr = call(
                    crate::sql::pg_functions::SUBSTRING_REGEX,
                    vec![text.clone(), whole],
                );
                return;
            }
            // `date_trunc(unit, ts, zone)` (Postgres 12): truncated in `zone`'s local time,
            // `timezone(zone, date_trunc(unit, timezone(zone, ts)))`
            if lname == "date_trunc"
                && let FunctionArguments::List(l) = &f.args
                && let [
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(unit)),
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ts)),
                    ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(zone)),
                ] = l.args.as_slice()
            {
                let local = call("timezone", vec![zone.clone(), ts.clone()]);
                let cut = call("date_trunc", vec![unit.clone(), local]);
                *expr = call("timezone", vec![zone.clone(), cut]);
                return;
            }
            if lname == "_pg_expandarray"
                && let FunctionArguments::List(l) = &f.args
                && let [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(arr))] =
                    l.args.as_slice()
            {
                *expr = call("unnest", vec![call("weir_expandarray", vec![arr.clone()])]);
                return;
            }
            // make_interval's arguments by name (`days => 10`) or position, the ones not
            // given 0 (`make_interval` has seven)
            if lname == "make_interval"
                && let FunctionArguments::List(l) = &f.args
                && let Some(args) = make_interval_args(l)
            {
                *expr = call("make_interval", args);
                return;
            }
            // age(x) is Postgres' `age(current_date::timestamp, x)`; a quoted literal
            // argument of age is a timestamp (beside a timestamptz, one in the session's
            // zone: `pg_semantics.rs`)
            if lname == "age"
                && let FunctionArguments::List(l) = &f.args
                && let Some(args) = only_plain_args(&l.args)
                && (1..=2).contains(&args.len())
            {
                let timestamp = |e: &Expr| match e {
                    Expr::Value(v) if matches!(v.value, ast::Value::SingleQuotedString(_)) => {
                        Expr::Cast {
                            kind: CastKind::Cast,
                            expr: Box::new(e.clone()),
                            data_type: ast::DataType::Timestamp(None, ast::TimezoneInfo::None),
                            array: false,
                            format: None,
                        }
                    }
                    other => other.clone(),
                };
                let mut args: Vec<Expr> = args.iter().map(timestamp).collect();
                if args.len() == 1 {
                    args.insert(0, parse_expr("CAST(current_date AS TIMESTAMP)"));
                }
                *expr = call("age", args);
                return;
            }
            // arrays are 1-based: array_upper is the length, array_lower 1
            if lname == "array_upper" {
                f.name = ObjectName(vec![ObjectNamePart::Identifier(Ident::new("array_length"))]);
                let len = std::mem::replace(expr, Expr::value(ast::Value::Null));
                *expr = Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(len),
                    data_type: ast::DataType::BigInt(None),
                    array: false,
                    format: None,
                };
                return;
            }
            if lname == "array_lower"
                && let FunctionArguments::List(l) = &f.args
            {
                let args = plain_args(l);
                if let [a, d] = args.as_slice() {
                    *expr = parse_expr(&format!(
                        "CASE WHEN array_length({a}, {d}) > 0 THEN CAST(1 AS BIGINT) END"
                    ));
                }
                return;
            }
            // generate_subscripts(a, dim) → unnest(generate_series(1, array_length(a, dim)))
            if lname == "generate_subscripts"
                && let FunctionArguments::List(l) = &f.args
                && let [arr, dim] = plain_args(l).as_slice()
                && l.args.len() == 2
            {
                *expr = subscripts(arr, dim);
            }
        }
        Expr::Subquery(q) => {
            if reads_only_empty_catalogs(q) {
                // a scalar subquery over no rows is NULL (SQLAlchemy's column query asks
                // pg_attrdef and pg_sequence with correlations DataFusion cannot plan)
                *expr = Expr::value(ast::Value::Null);
                return;
            }
            if let Some(outer_cond) = aggregate_catalog_subquery(q) {
                let sub = std::mem::replace(expr, Expr::value(ast::Value::Null));
                *expr = Expr::Case {
                    case_token: ast::helpers::attached_token::AttachedToken::empty(),
                    end_token: ast::helpers::attached_token::AttachedToken::empty(),
                    operand: None,
                    conditions: vec![ast::CaseWhen {
                        condition: outer_cond,
                        result: sub,
                    }],
                    else_result: None,
                };
            }
        }
        Expr::Identifier(id)
            if id.quote_style.is_none()
                && matches!(
                    id.value.to_lowercase().as_str(),
                    "current_schema" | "current_catalog" | "session_user" | "current_role"
                ) =>
        {
            let n = id.value.to_lowercase();
            *expr = call(&n, vec![]);
        }
        Expr::Cast {
            data_type,
            expr: inner,
            kind,
            ..
        } => {
            if *data_type == ast::DataType::Regclass {
                let arg = std::mem::replace(inner.as_mut(), Expr::value(ast::Value::Null));
                *expr = call("weir_regclass", vec![arg]);
                return;
            }
            // `'{int,int8}'::regtype[]`: the names as text[], each looked up
            if let ast::DataType::Array(
                ast::ArrayElemTypeDef::SquareBracket(element, _)
                | ast::ArrayElemTypeDef::AngleBracket(element),
            ) = data_type
                && let ast::DataType::Custom(name, args) = element.as_ref()
                && args.is_empty()
                && let Some(udf) = last_name(name).as_deref().and_then(reg_call)
            {
                let arg = std::mem::replace(inner.as_mut(), Expr::value(ast::Value::Null));
                let texts = Expr::Cast {
                    kind: CastKind::Cast,
                    expr: Box::new(arg),
                    data_type: ast::DataType::Array(ast::ArrayElemTypeDef::SquareBracket(
                        Box::new(ast::DataType::Text),
                        None,
                    )),
                    array: false,
                    format: None,
                };
                *expr = call(udf, vec![texts]);
                return;
            }
            // `x::regtype::text`: the name, as the reg type prints (its OID otherwise)
            if matches!(
                data_type,
                ast::DataType::Text
                    | ast::DataType::Varchar(_)
                    | ast::DataType::CharacterVarying(_)
            ) && let Expr::Function(f) = inner.as_mut()
                && shown_as_name(f)
            {
                // (the reg call's own argument: a name is looked up, an OID named)
                *expr = std::mem::replace(inner.as_mut(), Expr::value(ast::Value::Null));
                return;
            }
            if let ast::DataType::Custom(name, args) = data_type
                && args.is_empty()
            {
                let tname = last_name(name).unwrap_or_default();
                let udf = reg_call(&tname);
                if let Some(udf) = udf {
                    let arg = std::mem::replace(inner.as_mut(), Expr::value(ast::Value::Null));
                    *expr = call(udf, vec![arg]);
                    return;
                }
                if name.0.len() > 1
                    && !crate::catalog::user_types::user_type_name(name).contains('.')
                {
                    // (a user type keeps its name as written: `"public"."Mood"` is Mood; one
                    // of a user schema, `app.mood`, keeps its schema)
                    *data_type = match (plain_type(&tname), name.0.last()) {
                        (ast::DataType::Custom(..), Some(last)) => {
                            ast::DataType::Custom(ObjectName(vec![last.clone()]), vec![])
                        }
                        (t, _) => t,
                    };
                }
            }
            // `::` and CAST are the same to us
            if *kind == CastKind::DoubleColon {
                *kind = CastKind::Cast;
            }
        }
        _ => {}
    }
}

/// Postgres interval text (`1 day 02:03:04`) in the unit form arrow parses
/// (`1 day 2 hours 3 minutes 4 seconds`).
pub fn normalize_interval(s: &str) -> Option<String> {
    // Postgres' own input forms, read by Postgres' rules (`sql::interval_in`), in the one
    // form arrow's parser reads exactly
    crate::sql::interval_in::parse(s).map(|iv| {
        format!(
            "{} months {} days {} microseconds",
            iv.months, iv.days, iv.micros
        )
    })
}

/// Normalize a string literal holding an interval, in place.
pub fn normalize_interval_literal(e: &mut Expr) {
    if let Expr::Value(v) = e
        && let ast::Value::SingleQuotedString(s) = &mut v.value
        && let Some(n) = normalize_interval(s)
    {
        *s = n;
    }
}

/// A bytea literal with a backslash (Postgres' hex form `'\\x0102'` or escapes
/// `'a\\000b'`) as the hex literal of its bytes (`X'0102'`); other strings are their own
/// bytes. A literal bytea input refuses is left for the cast to refuse (`weir_bytea_in`).
pub fn normalize_bytea_literal(e: &mut Expr) {
    if let Expr::Value(v) = e
        && let ast::Value::SingleQuotedString(s) = &v.value
        && s.contains('\\')
        && let Ok(bytes) = crate::sql::bytea_codec::bytea_in(s)
    {
        let mut hex = String::with_capacity(bytes.len() * 2);
        crate::sql::bytea_codec::encode_into(
            &bytes,
            crate::sql::bytea_codec::Format::Hex,
            &mut hex,
        );
        v.value = ast::Value::HexStringLiteral(hex);
    }
}

/// `'{1,2}'` / `'{a,b}'` as an `ARRAY[...]` (numbers stay numbers).
fn array_literal(e: &Expr) -> Option<Expr> {
    let Expr::Value(v) = e else { return None };
    let ast::Value::SingleQuotedString(s) = &v.value else {
        return None;
    };
    let body = s.strip_prefix('{')?.strip_suffix('}')?;
    let items: Vec<&str> = if body.trim().is_empty() {
        vec![]
    } else {
        body.split(',')
            .map(|x| x.trim().trim_matches('"'))
            .collect()
    };
    let numeric = !items.is_empty() && items.iter().all(|x| x.parse::<i64>().is_ok());
    Some(Expr::Array(ast::Array {
        elem: items
            .into_iter()
            .map(|x| {
                if numeric {
                    Expr::value(ast::Value::Number(x.to_owned(), false))
                } else {
                    Expr::value(ast::Value::SingleQuotedString(x.to_owned()))
                }
            })
            .collect(),
        named: false,
    }))
}

/// A `pg_catalog.`-qualified type name as the plain type.
fn plain_type(name: &str) -> ast::DataType {
    match name {
        "text" => ast::DataType::Text,
        "int2" => ast::DataType::Int2(None),
        "int4" => ast::DataType::Int4(None),
        "int8" => ast::DataType::Int8(None),
        "bool" => ast::DataType::Bool,
        "float4" => ast::DataType::Float4,
        "float8" => ast::DataType::Float8,
        "numeric" => ast::DataType::Numeric(ast::ExactNumberInfo::None),
        "varchar" => ast::DataType::Varchar(None),
        "date" => ast::DataType::Date,
        "timestamp" => ast::DataType::Timestamp(None, ast::TimezoneInfo::None),
        "timestamptz" => ast::DataType::Timestamp(None, ast::TimezoneInfo::Tz),
        other => ast::DataType::Custom(
            ObjectName(vec![ObjectNamePart::Identifier(Ident::new(other))]),
            vec![],
        ),
    }
}

/// A query the rewrite wrote as text (None if it does not parse: the rewrite is skipped).
fn parse_query_text(sql: &str) -> Option<Box<ast::Query>> {
    crate::sql::parser::parse_query(sql).ok()
}

fn parse_expr(sql: &str) -> Expr {
    try_parse_expr(sql).unwrap_or_else(|| Expr::value(ast::Value::Null))
}

fn try_parse_expr(sql: &str) -> Option<Expr> {
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    datafusion::sql::sqlparser::parser::Parser::new(&dialect)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_expr())
        .ok()
}

/// `SELECT ... FROM unnest(x.reloptions) ...`: storage options, which Weir never has.
fn unnests_reloptions(q: &ast::Query) -> bool {
    let ast::SetExpr::Select(select) = q.body.as_ref() else {
        return false;
    };
    matches!(select.from.as_slice(), [t] if t.joins.is_empty() && match &t.relation {
        ast::TableFactor::Table { name, args: Some(args), .. } => {
            last_name(name).as_deref() == Some("unnest")
                && args.args.iter().any(|a| a.to_string().ends_with("reloptions"))
        }
        // (its array read through `weir_array_elements(...)` once visited)
        ast::TableFactor::UNNEST { array_exprs, .. } => array_exprs
            .iter()
            .any(|a| a.to_string().trim_end_matches(')').ends_with("reloptions")),
        _ => false,
    })
}

fn array_of_subquery(q: ast::Query) -> Expr {
    // a plain one-column SELECT aggregates in place, so a correlated one (psql's \du:
    // `ARRAY(SELECT b.rolname ... WHERE m.member = r.oid)`) stays a correlated scalar
    // subquery DataFusion can decorrelate; its ORDER BY orders the aggregate (psql's \dT+:
    // `ARRAY(SELECT e.enumlabel ... WHERE e.enumtypid = t.oid ORDER BY e.enumsortorder)`)
    if let ast::SetExpr::Select(select) = q.body.as_ref()
        && select.projection.len() == 1
        && select.distinct.is_none()
        && select.having.is_none()
        && q.limit_clause.is_none()
        && q.with.is_none()
        && matches!(&select.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty())
        && let ast::SelectItem::UnnamedExpr(e) | ast::SelectItem::ExprWithAlias { expr: e, .. } =
            &select.projection[0]
        && !contains_aggregate(e)
        && !has_set_returning(e)
    {
        let mut inner = q.clone();
        // the select list's one column, by position or alias, is its expression inside
        // the aggregate (`ARRAY(SELECT x FROM t ORDER BY 1)`)
        let alias = match &select.projection[0] {
            ast::SelectItem::ExprWithAlias { alias, .. } => {
                Some(crate::sql::parser::normalize_ident(alias))
            }
            _ => None,
        };
        if let Some(ast::OrderBy {
            kind: ast::OrderByKind::Expressions(items),
            ..
        }) = inner.order_by.as_mut()
        {
            for item in items {
                let itself = match &item.expr {
                    Expr::Value(v) => matches!(&v.value, ast::Value::Number(n, _) if n == "1"),
                    Expr::Identifier(i) => {
                        alias.as_deref() == Some(crate::sql::parser::normalize_ident(i).as_str())
                    }
                    _ => false,
                };
                if itself {
                    item.expr = e.clone();
                }
            }
        }
        let order = inner
            .order_by
            .take()
            .map(|o| format!(" {o}"))
            .unwrap_or_default();
        if let ast::SetExpr::Select(s) = inner.body.as_mut() {
            s.projection = vec![ast::SelectItem::UnnamedExpr(parse_expr(&format!(
                "array_agg({e}{order})"
            )))];
        }
        // ARRAY over no rows is `{}`: an empty list coerces to the aggregate's type
        return call(
            "coalesce",
            vec![Expr::Subquery(Box::new(inner)), call("make_array", vec![])],
        );
    }
    let sql = match ordered_elements(&q) {
        Some(sql) => sql,
        None => format!("(SELECT array_agg(weir_c) FROM ({q}) AS weir_s(weir_c))"),
    };
    let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
    match datafusion::sql::sqlparser::parser::Parser::new(&dialect)
        .try_with_sql(&sql)
        .and_then(|mut p| p.parse_expr())
    {
        Ok(e) => e,
        // unreachable for a query that parsed; keep the original call so planning reports it
        Err(_) => Expr::Subquery(Box::new(q)),
    }
}

/// `ARRAY(SELECT e FROM ... ORDER BY k)` whose `e` cannot go inside the aggregate (a
/// set-returning function): the order keys become columns of the subquery and order the
/// aggregate (a derived table's ORDER BY alone would not order it), `ORDER BY 1` or the
/// column's alias being `e` itself.
fn ordered_elements(q: &ast::Query) -> Option<String> {
    let ast::SetExpr::Select(select) = q.body.as_ref() else {
        return None;
    };
    let Some(ast::OrderBy {
        kind: ast::OrderByKind::Expressions(items),
        ..
    }) = q.order_by.as_ref()
    else {
        return None;
    };
    let (e, alias) = match select.projection.as_slice() {
        [SelectItem::UnnamedExpr(e)] => (e, None),
        [SelectItem::ExprWithAlias { expr, alias }] => {
            (expr, Some(crate::sql::parser::normalize_ident(alias)))
        }
        _ => return None,
    };
    let mut inner = q.clone();
    inner.order_by = None;
    let mut projection = vec![SelectItem::ExprWithAlias {
        expr: e.clone(),
        alias: Ident::new("weir_c"),
    }];
    let mut keys = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let itself = match &item.expr {
            Expr::Value(v) => matches!(&v.value, ast::Value::Number(n, _) if n == "1"),
            Expr::Identifier(id) => {
                alias.as_deref() == Some(crate::sql::parser::normalize_ident(id).as_str())
            }
            _ => false,
        };
        let key = Ident::new(format!("weir_k{i}"));
        projection.push(SelectItem::ExprWithAlias {
            expr: if itself { e.clone() } else { item.expr.clone() },
            alias: key.clone(),
        });
        keys.push(
            ast::OrderByExpr {
                expr: Expr::Identifier(key),
                options: item.options,
                with_fill: None,
            }
            .to_string(),
        );
    }
    if let ast::SetExpr::Select(s) = inner.body.as_mut() {
        s.projection = projection;
    }
    Some(format!(
        "(SELECT array_agg(weir_c ORDER BY {}) FROM ({inner}) AS weir_s)",
        keys.join(", ")
    ))
}

/// A SELECT whose WHERE requires `attacl IS NOT NULL`: Weir has no column privileges, so
/// it has no rows (psql's \dp lists column privileges this way).
fn requires_column_acl(q: &ast::Query) -> bool {
    let ast::SetExpr::Select(select) = q.body.as_ref() else {
        return false;
    };
    fn conjuncts(e: &Expr, out: &mut Vec<Expr>) {
        match e {
            Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::And,
                right,
            } => {
                conjuncts(left, out);
                conjuncts(right, out);
            }
            Expr::Nested(inner) => conjuncts(inner, out),
            other => out.push(other.clone()),
        }
    }
    let mut all = Vec::new();
    if let Some(w) = &select.selection {
        conjuncts(w, &mut all);
    }
    all.iter().any(|c| {
        matches!(c, Expr::IsNotNull(inner)
            if matches!(inner.as_ref(), Expr::Identifier(i) if i.value.eq_ignore_ascii_case("attacl"))
                || matches!(inner.as_ref(), Expr::CompoundIdentifier(p) if p.last().is_some_and(|i| i.value.eq_ignore_ascii_case("attacl"))))
    })
}

/// A plain `SELECT expr FROM` catalog tables that never have rows (see
/// [`crate::catalog::pg_catalog::ALWAYS_EMPTY`]), without aggregates.
fn reads_only_empty_catalogs(q: &ast::Query) -> bool {
    let ast::SetExpr::Select(select) = q.body.as_ref() else {
        return false;
    };
    let empty = |f: &ast::TableFactor| {
        matches!(f, ast::TableFactor::Table { name, .. }
            if crate::catalog::pg_catalog::ALWAYS_EMPTY.contains(
                &name.to_string().to_lowercase().trim_start_matches("pg_catalog.")))
    };
    // inner joins with an empty relation are empty
    let inner_only = select.from.iter().all(|t| {
        t.joins.iter().all(|j| {
            matches!(
                j.join_operator,
                ast::JoinOperator::Join(_) | ast::JoinOperator::Inner(_)
            )
        })
    });
    select.projection.len() == 1
        && !select.from.is_empty()
        && inner_only
        && select
            .from
            .iter()
            .any(|t| empty(&t.relation) || t.joins.iter().any(|j| empty(&j.relation)))
        && matches!(&select.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty())
        && select.having.is_none()
        && !select.projection.iter().any(|i| match i {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                contains_aggregate(e)
            }
            _ => true,
        })
}

/// DataFusion decorrelates a correlated scalar subquery only when it aggregates. Client
/// introspection queries (psql's `\d`) use plain ones over catalog tables, which return at
/// most one row by construction; wrap their single output in `first_value` so they plan.
/// User queries are left alone, so they keep Postgres' error for a subquery returning more
/// than one row.
///
/// DataFusion also cannot pull correlated non-equality predicates over that aggregate, so
/// predicates are normalized first: an outer column equated with an inner one is replaced
/// by the inner one elsewhere, and predicates on outer columns alone move out of the
/// subquery into a `CASE WHEN` around it (returned).
fn aggregate_catalog_subquery(q: &mut ast::Query) -> Option<Expr> {
    if q.limit_clause.is_some() || q.order_by.is_some() {
        return None;
    }
    let ast::SetExpr::Select(select) = q.body.as_mut() else {
        return None;
    };
    let is_catalog = |f: &ast::TableFactor| {
        matches!(f, ast::TableFactor::Table { name, .. }
            if name.to_string().to_lowercase().trim_start_matches("pg_catalog.").starts_with("pg_"))
    };
    let only_catalog = !select.from.is_empty()
        && select
            .from
            .iter()
            .all(|t| is_catalog(&t.relation) && t.joins.iter().all(|j| is_catalog(&j.relation)));
    let grouped = !matches!(&select.group_by, ast::GroupByExpr::Expressions(e, _) if e.is_empty());
    if !only_catalog || grouped || select.projection.len() != 1 {
        return None;
    }
    let item = &mut select.projection[0];
    let (inner, alias) = match item {
        SelectItem::UnnamedExpr(e) => (e, None),
        SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias.clone())),
        _ => return None,
    };
    if contains_aggregate(inner) {
        return None;
    }
    let e = std::mem::replace(inner, Expr::value(ast::Value::Null));
    let wrapped = call("first_value", vec![e]);
    *item = match alias {
        Some(alias) => SelectItem::ExprWithAlias {
            expr: wrapped,
            alias,
        },
        None => SelectItem::UnnamedExpr(wrapped),
    };
    let inner_names: HashSet<String> = select
        .from
        .iter()
        .flat_map(|t| std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)))
        .filter_map(|f| match f {
            ast::TableFactor::Table { name, alias, .. } => Some(match alias {
                Some(a) => a.name.value.to_lowercase(),
                None => last_name(name).unwrap_or_default(),
            }),
            _ => None,
        })
        .collect();
    let selection = select.selection.take()?;
    let mut conjuncts = Vec::new();
    split_and(selection, &mut conjuncts);
    let is_outer = |e: &Expr| matches!(e, Expr::CompoundIdentifier(ids) if ids.len() == 2 && !inner_names.contains(&ids[0].value.to_lowercase()));
    let is_inner = |e: &Expr| matches!(e, Expr::CompoundIdentifier(ids) if ids.len() == 2 && inner_names.contains(&ids[0].value.to_lowercase()));
    // outer column -> an inner column it is equated with
    let mut equiv: Vec<(String, Expr)> = Vec::new();
    for c in &conjuncts {
        if let Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } = c
        {
            if is_outer(left) && is_inner(right) {
                equiv.push((left.to_string(), (**right).clone()));
            } else if is_inner(left) && is_outer(right) {
                equiv.push((right.to_string(), (**left).clone()));
            }
        }
    }
    let mut keep = Vec::new();
    let mut outside = Vec::new();
    for mut c in conjuncts {
        let is_equiv_def = matches!(&c, Expr::BinaryOp { left, op: BinaryOperator::Eq, right }
            if (is_outer(left) && is_inner(right)) || (is_inner(left) && is_outer(right)));
        if !is_equiv_def {
            let _ = c.visit(&mut SubstituteOuter { equiv: &equiv });
        }
        let mentions_inner = mentions_inner_column(&c, &inner_names);
        if !mentions_inner && !is_equiv_def {
            outside.push(c);
        } else {
            keep.push(c);
        }
    }
    select.selection = join_and(keep);
    join_and(outside)
}

/// Whether an expression refers to a column of the subquery's own relations (unqualified
/// names resolve there first).
fn mentions_inner_column(e: &Expr, inner: &HashSet<String>) -> bool {
    struct Finder<'a> {
        inner: &'a HashSet<String>,
        found: bool,
    }
    impl ast::Visitor for Finder<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            match e {
                Expr::Identifier(_) => self.found = true,
                Expr::CompoundIdentifier(ids)
                    if ids.len() < 2 || self.inner.contains(&ids[0].value.to_lowercase()) =>
                {
                    self.found = true
                }
                _ => {}
            }
            ControlFlow::Continue(())
        }
    }
    let mut f = Finder {
        inner,
        found: false,
    };
    let _ = ast::Visit::visit(e, &mut f);
    f.found
}

struct SubstituteOuter<'a> {
    equiv: &'a [(String, Expr)],
}

impl VisitorMut for SubstituteOuter<'_> {
    type Break = ();
    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::CompoundIdentifier(_) = expr {
            let key = expr.to_string();
            if let Some((_, inner)) = self.equiv.iter().find(|(k, _)| *k == key) {
                *expr = inner.clone();
            }
        }
        ControlFlow::Continue(())
    }
}

#[recursive::recursive]
fn split_and(e: Expr, out: &mut Vec<Expr>) {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            split_and(*left, out);
            split_and(*right, out);
        }
        Expr::Nested(inner)
            if matches!(
                inner.as_ref(),
                Expr::BinaryOp {
                    op: BinaryOperator::And,
                    ..
                }
            ) =>
        {
            split_and(*inner, out)
        }
        other => out.push(other),
    }
}

fn join_and(parts: Vec<Expr>) -> Option<Expr> {
    parts.into_iter().reduce(|a, b| Expr::BinaryOp {
        left: Box::new(a),
        op: BinaryOperator::And,
        right: Box::new(b),
    })
}

/// `array_agg(DISTINCT x)`, `string_agg(DISTINCT x, ',')`, `json[b]_agg(DISTINCT x)`
/// without an ORDER BY: ordered by `x`, as Postgres' answers are (it removes duplicates by
/// sorting; DataFusion's hash set gave them in any order).
fn distinct_aggregate_in_order(expr: &mut Expr) {
    let Expr::Function(f) = expr else {
        return;
    };
    if f.over.is_some()
        || !matches!(
            last_name(&f.name).as_deref(),
            Some("array_agg" | "string_agg" | "json_agg" | "jsonb_agg")
        )
    {
        return;
    }
    let FunctionArguments::List(l) = &mut f.args else {
        return;
    };
    if l.duplicate_treatment != Some(ast::DuplicateTreatment::Distinct)
        || l.clauses
            .iter()
            .any(|c| matches!(c, ast::FunctionArgumentClause::OrderBy(_)))
    {
        return;
    }
    let Some(ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(first))) = l.args.first() else {
        return;
    };
    let by = ast::OrderByExpr {
        expr: first.clone(),
        options: ast::OrderByOptions {
            asc: None,
            nulls_first: None,
        },
        with_fill: None,
    };
    l.clauses
        .push(ast::FunctionArgumentClause::OrderBy(vec![by]));
}

/// The hypothetical-set aggregates `rank(x)`, `dense_rank(x)`, `percent_rank(x)` and
/// `cume_dist(x)` `WITHIN GROUP (ORDER BY v [ASC|DESC] [NULLS FIRST|LAST])`: where `x` would
/// stand among the group's `v`s, written as counts of the rows that sort before it (and of
/// its peers), with Postgres' NULL ordering (last ascending, first descending, unless
/// said). One sort key; more, or a FILTER, are left to the planner (which refuses them).
fn hypothetical_rank(expr: &mut Expr) {
    let Expr::Function(f) = expr else { return };
    let Some(name) = last_name(&f.name) else {
        return;
    };
    if !matches!(
        name.as_str(),
        "rank" | "dense_rank" | "percent_rank" | "cume_dist"
    ) || f.over.is_some()
        || f.filter.is_some()
    {
        return;
    }
    let ([by], FunctionArguments::List(l)) = (f.within_group.as_slice(), &f.args) else {
        return;
    };
    let [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(x))] = l.args.as_slice() else {
        return;
    };
    let v = &by.expr;
    let asc = by.options.asc != Some(false);
    let nulls_first = by.options.nulls_first.unwrap_or(!asc);
    let less = if asc { "<" } else { ">" };
    let nulls = if nulls_first {
        format!("(({v}) IS NULL AND ({x}) IS NOT NULL)")
    } else {
        format!("(({v}) IS NOT NULL AND ({x}) IS NULL)")
    };
    let before = format!("(({v}) {less} ({x}) OR {nulls})");
    let peer = format!("(({v}) = ({x}) OR (({v}) IS NULL AND ({x}) IS NULL))");
    let text = match name.as_str() {
        "rank" => format!("(1 + count(*) FILTER (WHERE {before}))"),
        "dense_rank" => format!(
            "(1 + count(DISTINCT {v}) FILTER (WHERE {before}) + CASE WHEN count(*) FILTER (WHERE ({v}) IS NULL AND {before}) > 0 THEN 1 ELSE 0 END)"
        ),
        "percent_rank" => format!(
            "CASE WHEN count(*) = 0 THEN CAST(0 AS DOUBLE PRECISION) ELSE CAST(count(*) FILTER (WHERE {before}) AS DOUBLE PRECISION) / count(*) END"
        ),
        _ => format!(
            "CAST(count(*) FILTER (WHERE {before} OR {peer}) + 1 AS DOUBLE PRECISION) / (count(*) + 1)"
        ),
    };
    *expr = parse_expr(&text);
}

/// `percentile_cont(ARRAY[0.25, 0.5]) WITHIN GROUP (ORDER BY x)` (also `percentile_disc`):
/// the array of each fraction's percentile, as Postgres answers it, written as `ARRAY[
/// percentile_cont(0.25) WITHIN GROUP (ORDER BY x), ...]` (an array written out; an array
/// value from elsewhere is left to the planner, which refuses it).
fn percentiles_of_an_array(expr: &mut Expr) {
    let Expr::Function(f) = expr else { return };
    let Some(name) = last_name(&f.name) else {
        return;
    };
    if !matches!(name.as_str(), "percentile_cont" | "percentile_disc") || f.within_group.is_empty()
    {
        return;
    }
    let FunctionArguments::List(l) = &f.args else {
        return;
    };
    let [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(Expr::Array(arr)))] =
        l.args.as_slice()
    else {
        return;
    };
    let elem = arr
        .elem
        .iter()
        .map(|fraction| {
            let mut one = f.clone();
            if let FunctionArguments::List(l) = &mut one.args {
                l.args = vec![ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(
                    fraction.clone(),
                ))];
            }
            Expr::Function(one)
        })
        .collect();
    *expr = Expr::Array(ast::Array {
        elem,
        named: arr.named,
    });
}

/// `(s1, e1) OVERLAPS (s2, e2)`: Postgres' `overlaps(s1, e1, s2, e2)`.
fn overlaps_operator(expr: &mut Expr) {
    if let Expr::BinaryOp {
        left,
        op: BinaryOperator::Overlaps,
        right,
    } = expr
        && let (Expr::Tuple(l), Expr::Tuple(r)) = (left.as_ref(), right.as_ref())
        && l.len() == 2
        && r.len() == 2
    {
        let args = l.iter().chain(r.iter()).cloned().collect();
        *expr = call("overlaps", args);
    }
}

/// `x || NULL` and `NULL || x` with an untyped NULL: Postgres reads the NULL as `x`'s type,
/// so an array is itself (`array_cat`: `ARRAY[1] || NULL` is `{1}`; DataFusion appended a
/// NULL element) and text is NULL (`pg_functions::CONCAT_NULL`); `array_cat(x, NULL)` and
/// `array_cat(NULL, x)` are `x`.
fn concatenated_null(expr: &mut Expr) {
    let is_null = |e: &Expr| matches!(e, Expr::Value(v) if v.value == ast::Value::Null);
    match expr {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::StringConcat,
            right,
        } if is_null(left) != is_null(right) => {
            let other = if is_null(left) { right } else { left };
            let other = std::mem::replace(other.as_mut(), Expr::value(ast::Value::Null));
            *expr = call(crate::sql::pg_functions::CONCAT_NULL, vec![other]);
        }
        // (`NULL || NULL`: text)
        Expr::BinaryOp {
            left,
            op: BinaryOperator::StringConcat,
            right,
        } if is_null(left) && is_null(right) => *expr = parse_expr("CAST(NULL AS TEXT)"),
        Expr::Function(f) if last_name(&f.name).as_deref() == Some("array_cat") => {
            let FunctionArguments::List(l) = &f.args else {
                return;
            };
            if let [
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(a)),
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(b)),
            ] = l.args.as_slice()
                && is_null(a) != is_null(b)
            {
                *expr = if is_null(a) { b.clone() } else { a.clone() };
            }
        }
        _ => {}
    }
}

/// Whether `e` calls a set-returning function (at its own level, not in subqueries).
fn has_set_returning(e: &Expr) -> bool {
    calls_at_this_level(e, |n| n == "unnest" || srf_list(n).is_some())
}

/// Postgres' aggregate functions by name (what makes a call an aggregate at the AST).
const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "every",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "jsonb_object_agg",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "variance",
    "var_pop",
    "var_samp",
    "bit_and",
    "bit_or",
    "bit_xor",
    "median",
    "first_value",
    "last_value",
    "mode",
    "percentile_cont",
    "percentile_disc",
    "corr",
    "covar_pop",
    "covar_samp",
    "regr_slope",
    "regr_intercept",
    "regr_count",
    "regr_r2",
    "regr_avgx",
    "regr_avgy",
    "regr_sxx",
    "regr_syy",
    "regr_sxy",
    "approx_distinct",
    "approx_percentile_cont",
    "any_value",
];

/// DataFusion names an aggregate call without its arguments' casts (`sum(x::float8)` and
/// `sum(x::real)` are both `sum(t.x)`), and an aggregate's calls must have distinct names:
/// `SELECT min(ts), min(ts::date)` failed "column specified more than once" (Postgres
/// answers; apache/datafusion#18975). Where one query level has calls that differ only in
/// their casts, each argument with a cast is wrapped in `weir_typed(arg, 'arg as
/// written')`, the argument itself under a name that keeps the cast apart; every occurrence
/// (select list, HAVING, ORDER BY) the same way, so they still match.
fn distinct_cast_aggregates(q: &mut ast::Query) {
    use std::collections::HashMap;
    fn without_casts<T: VisitMut + Clone>(x: &T) -> T {
        let mut x = x.clone();
        let _ = ast::visit_expressions_mut(&mut x, |e| {
            while let Expr::Cast { expr, .. } = e {
                *e = std::mem::replace(expr.as_mut(), Expr::value(ast::Value::Null));
            }
            ControlFlow::<()>::Continue(())
        });
        x
    }
    let ast::SetExpr::Select(select) = q.body.as_mut() else {
        return;
    };
    /// The aggregate calls of the select list, HAVING and ORDER BY of one query level.
    fn each_call(
        select: &mut ast::Select,
        order_by: &mut Option<ast::OrderBy>,
        mut each: impl FnMut(&mut ast::Function),
    ) {
        let mut call = |e: &mut Expr| {
            if let Expr::Function(f) = e
                && f.over.is_none()
                && last_name(&f.name)
                    .is_some_and(|n| AGGREGATES.contains(&n.to_lowercase().as_str()))
            {
                each(f);
            }
        };
        this_level_exprs_mut(&mut select.projection, &mut call);
        this_level_exprs_mut(&mut select.having, &mut call);
        this_level_exprs_mut(order_by, &mut call);
    }
    // each call's text by its text without casts
    let mut by_plain: HashMap<String, HashSet<String>> = HashMap::new();
    each_call(select, &mut q.order_by, |f| {
        if let FunctionArguments::List(l) = &f.args {
            by_plain
                .entry(format!("{}({})", f.name, without_casts(l)))
                .or_default()
                .insert(f.to_string());
        }
    });
    let clashing: HashSet<String> = by_plain
        .into_values()
        .filter(|calls| calls.len() > 1)
        .flatten()
        .collect();
    if clashing.is_empty() {
        return;
    }
    each_call(select, &mut q.order_by, |f| {
        if !clashing.contains(&f.to_string()) {
            return;
        }
        let FunctionArguments::List(l) = &mut f.args else {
            return;
        };
        for a in l.args.iter_mut() {
            if let FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) = a
                && without_casts(e).to_string() != e.to_string()
            {
                let written = e.to_string();
                let arg = std::mem::replace(e, Expr::value(ast::Value::Null));
                *e = Expr::Function(ast::Function {
                    name: ObjectName(vec![ObjectNamePart::Identifier(Ident::new(
                        crate::sql::pg_functions::TYPED,
                    ))]),
                    uses_odbc_syntax: false,
                    parameters: FunctionArguments::None,
                    args: FunctionArguments::List(FunctionArgumentList {
                        duplicate_treatment: None,
                        args: vec![
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(arg)),
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::value(
                                ast::Value::SingleQuotedString(written),
                            ))),
                        ],
                        clauses: vec![],
                    }),
                    filter: None,
                    null_treatment: None,
                    over: None,
                    within_group: vec![],
                });
            }
        }
    });
}

fn contains_aggregate(e: &Expr) -> bool {
    calls_at_this_level(e, |n| AGGREGATES.contains(&n.to_lowercase().as_str()))
}

/// Whether `e` calls a function whose name `named` accepts, at its own query level (not in
/// subqueries inside it).
fn calls_at_this_level(e: &Expr, named: impl Fn(&str) -> bool) -> bool {
    struct Finder<F> {
        depth: usize,
        found: bool,
        named: F,
    }
    impl<F: Fn(&str) -> bool> ast::Visitor for Finder<F> {
        type Break = ();
        fn pre_visit_query(&mut self, _: &ast::Query) -> ControlFlow<()> {
            self.depth += 1;
            ControlFlow::Continue(())
        }
        fn post_visit_query(&mut self, _: &ast::Query) -> ControlFlow<()> {
            self.depth -= 1;
            ControlFlow::Continue(())
        }
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if self.depth == 0
                && let Expr::Function(f) = e
                && last_name(&f.name).is_some_and(|n| (self.named)(&n))
            {
                self.found = true;
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        }
    }
    let mut f = Finder {
        depth: 0,
        found: false,
        named,
    };
    let _ = ast::Visit::visit(e, &mut f);
    f.found
}

/// The right operand of `INTERSECT ALL` / `EXCEPT ALL` under the alias
/// `pg_functions::BAG_SET_OPERAND` (`SELECT * FROM (right) AS weir_bag_set_operand`): the
/// mark by which `pg_semantics` finds the join DataFusion plans for it and counts copies.
fn mark_bag_operands(body: &mut ast::SetExpr) -> crate::error::Result<()> {
    let ast::SetExpr::SetOperation {
        op,
        set_quantifier,
        left,
        right,
    } = body
    else {
        return Ok(());
    };
    mark_bag_operands(left)?;
    mark_bag_operands(right)?;
    if !matches!(op, ast::SetOperator::Intersect | ast::SetOperator::Except)
        || !matches!(set_quantifier, ast::SetQuantifier::All)
    {
        return Ok(());
    }
    let mut wrapper = crate::sql::parser::parse_query(&format!(
        "SELECT * FROM (SELECT 1) AS {}",
        crate::sql::pg_functions::BAG_SET_OPERAND
    ))?;
    let ast::SetExpr::Select(select) = wrapper.body.as_mut() else {
        return Ok(());
    };
    let Some(ast::TableFactor::Derived { subquery, .. }) =
        select.from.first_mut().map(|t| &mut t.relation)
    else {
        return Ok(());
    };
    let operand = std::mem::replace(
        right.as_mut(),
        ast::SetExpr::Values(ast::Values {
            explicit_row: false,
            value_keyword: false,
            rows: vec![],
        }),
    );
    match operand {
        ast::SetExpr::Query(q) => *subquery = q,
        other => *subquery.body = other,
    }
    **right = *wrapper.body;
    Ok(())
}

/// `[OFFSET n {ROW | ROWS}] FETCH {FIRST | NEXT} [n] {ROW | ROWS} ONLY`, the standard's
/// LIMIT (Hibernate 6 and other standard SQL writers send it), is `LIMIT n` (1 without a
/// count), as in Postgres.
fn fetch_as_limit(q: &mut ast::Query) -> crate::error::Result<()> {
    use crate::error::WeirError;
    let Some(fetch) = q.fetch.take() else {
        return Ok(());
    };
    if fetch.with_ties {
        return with_ties(q, fetch);
    }
    if fetch.percent {
        return Err(WeirError::syntax("syntax error at or near \"PERCENT\""));
    }
    let n = fetch
        .quantity
        .unwrap_or_else(|| Expr::value(ast::Value::Number("1".into(), false)));
    match &mut q.limit_clause {
        None => {
            q.limit_clause = Some(ast::LimitClause::LimitOffset {
                limit: Some(n),
                offset: None,
                limit_by: vec![],
            })
        }
        Some(ast::LimitClause::LimitOffset { limit: None, .. }) => {
            if let Some(ast::LimitClause::LimitOffset { limit, .. }) = &mut q.limit_clause {
                *limit = Some(n);
            }
        }
        Some(_) => return Err(WeirError::syntax("multiple LIMIT clauses not allowed")),
    }
    Ok(())
}

/// `ORDER BY keys [OFFSET m] FETCH FIRST n ROWS WITH TIES`: the rows after the first m,
/// up to the n-th and every row tied with it, as a filter over the select's rows numbered
/// and ranked in that order:
///
/// ```sql
/// SELECT * EXCLUDE (rank, row, cut) FROM (
///   SELECT *, max(CASE WHEN row = m + n THEN rank END) OVER () AS cut
///   FROM (SELECT items, rank() OVER (ORDER BY keys) AS rank,
///                row_number() OVER (ORDER BY keys) AS row FROM ...) AS t) AS t
/// WHERE row > m AND (cut IS NULL OR rank <= cut) ORDER BY row
/// ```
///
/// A key that is an output column's position or alias is that column's expression. For a
/// plain SELECT (not DISTINCT, not a set operation).
fn with_ties(q: &mut ast::Query, fetch: ast::Fetch) -> crate::error::Result<()> {
    use crate::error::WeirError;
    let keys = match &q.order_by {
        Some(ast::OrderBy {
            kind: ast::OrderByKind::Expressions(items),
            ..
        }) if !items.is_empty() => items.clone(),
        _ => {
            return Err(WeirError::syntax(
                "WITH TIES cannot be specified without ORDER BY clause",
            ));
        }
    };
    let ast::SetExpr::Select(select) = q.body.as_ref() else {
        return Err(WeirError::not_supported(
            "FETCH FIRST ... WITH TIES over a set operation is not supported",
        ));
    };
    if select.distinct.is_some() {
        return Err(WeirError::not_supported(
            "FETCH FIRST ... WITH TIES with DISTINCT is not supported",
        ));
    }
    let offset = match q.limit_clause.take() {
        None => "0".to_owned(),
        Some(ast::LimitClause::LimitOffset {
            limit: None,
            offset: Some(o),
            ..
        }) => format!("({})", o.value),
        Some(_) => return Err(WeirError::syntax("multiple LIMIT clauses not allowed")),
    };
    let n = fetch
        .quantity
        .map_or_else(|| "1".to_owned(), |n| format!("({n})"));
    // keys in the select's own terms
    let mut resolved = Vec::with_capacity(keys.len());
    for mut k in keys {
        let item = match &k.expr {
            Expr::Value(v) => match &v.value {
                ast::Value::Number(p, _) => p
                    .parse::<usize>()
                    .ok()
                    .and_then(|p| p.checked_sub(1))
                    .and_then(|p| select.projection.get(p)),
                _ => None,
            },
            Expr::Identifier(id) => select.projection.iter().find(|i| {
                matches!(i, SelectItem::ExprWithAlias { alias, .. }
                    if crate::sql::parser::normalize_ident(alias) == crate::sql::parser::normalize_ident(id))
            }),
            _ => None,
        };
        match item {
            Some(SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }) => {
                k.expr = e.clone();
            }
            Some(_) => {
                return Err(WeirError::not_supported(
                    "FETCH FIRST ... WITH TIES ordered by a position of a star",
                ));
            }
            None => {}
        }
        resolved.push(k.to_string());
    }
    let keys = resolved.join(", ");
    let mut inner = select.as_ref().clone();
    for (f, name) in [("rank", "weir_ties_rank"), ("row_number", "weir_ties_row")] {
        inner.projection.push(SelectItem::ExprWithAlias {
            expr: parse_expr(&format!("{f}() OVER (ORDER BY {keys})")),
            alias: Ident::new(name),
        });
    }
    let with = q.with.take();
    let mut inner_q = q.clone();
    *inner_q.body = ast::SetExpr::Select(Box::new(inner));
    inner_q.order_by = None;
    inner_q.limit_clause = None;
    let text = format!(
        "SELECT * FROM (SELECT *, max(CASE WHEN weir_ties_row = {offset} + {n} THEN weir_ties_rank END) \
         OVER () AS weir_ties_cut FROM ({inner_q}) AS weir_ties_in) AS weir_ties \
         WHERE weir_ties_row > {offset} AND (weir_ties_cut IS NULL OR weir_ties_rank <= weir_ties_cut) \
         ORDER BY weir_ties_row"
    );
    let Some(mut outer) = parse_query_text(&text) else {
        return Err(WeirError::internal(
            "FETCH ... WITH TIES: the rewrite did not parse",
        ));
    };
    if let ast::SetExpr::Select(s) = outer.body.as_mut()
        && let Some(SelectItem::Wildcard(opts)) = s.projection.first_mut()
    {
        opts.opt_exclude = Some(ast::ExcludeSelectItem::Multiple(vec![
            Ident::new("weir_ties_rank").into(),
            Ident::new("weir_ties_row").into(),
            Ident::new("weir_ties_cut").into(),
        ]));
    }
    // the WITH clause stays outermost (the inner query reads it)
    outer.with = with;
    *q = *outer;
    Ok(())
}

/// The elements of a row constructor: `(a, b)` or `ROW(a, b)`.
fn row_items(e: &Expr) -> Option<&[Expr]> {
    match e {
        Expr::Tuple(items) => Some(items),
        Expr::Nested(inner) => row_items(inner),
        _ => None,
    }
}

/// Postgres' name for an unnamed select item (FigureColname).
#[recursive::recursive]
pub(crate) fn figure_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => None,
        // operators rewritten into calls (`doc -> 'a'`) keep Postgres' name for operators
        Expr::Function(f) if last_name(&f.name).is_some_and(|n| n.starts_with("weir_json_")) => {
            Some("?column?".into())
        }
        Expr::Function(f)
            if last_name(&f.name).as_deref() == Some(crate::sql::pg_functions::SUBSTRING_REGEX) =>
        {
            Some("substring".into())
        }
        // `x::regclass` and friends were rewritten into calls: named like the cast
        Expr::Function(f)
            if last_name(&f.name).is_some_and(|n| {
                matches!(
                    n.as_str(),
                    "weir_regclass"
                        | "weir_regtype"
                        | "weir_regproc"
                        | "weir_regnamespace"
                        | "weir_regrole"
                )
            }) =>
        {
            let ty = last_name(&f.name)
                .unwrap_or_default()
                .trim_start_matches("weir_")
                .to_owned();
            let arg = match &f.args {
                FunctionArguments::List(l) => match l.args.first() {
                    Some(ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(e))) => Some(e),
                    _ => None,
                },
                _ => None,
            };
            Some(match arg {
                Some(Expr::Identifier(id)) => id.value.to_lowercase(),
                Some(Expr::CompoundIdentifier(ids)) => {
                    ids.last().map(|i| i.value.to_lowercase()).unwrap_or(ty)
                }
                Some(inner @ (Expr::Function(_) | Expr::Cast { .. })) => {
                    figure_name(inner).unwrap_or(ty)
                }
                _ => ty,
            })
        }
        Expr::Function(f) => Some(last_name(&f.name).unwrap_or_else(|| "?column?".into())),
        Expr::Cast {
            expr, data_type, ..
        } => match expr.as_ref() {
            Expr::Identifier(id) => Some(id.value.to_lowercase()),
            Expr::CompoundIdentifier(ids) => ids.last().map(|i| i.value.to_lowercase()),
            // a cast of a cast of a constant is named after the outer type, as in Postgres
            // ('t'::regclass::oid is "oid")
            Expr::Function(f) if is_reg_cast_of_constant(f) => Some(type_column_name(data_type)),
            // a cast of what has no strong name of its own (a constant, an operator, a
            // CASE, another cast of those) is named after the type, as in Postgres
            // (`'2024-01-01'::date` is "date", `'{}'::json::text` is "text")
            inner if strongly_named(inner) => figure_name(inner),
            _ => Some(type_column_name(data_type)),
        },
        Expr::Nested(inner) => match inner.as_ref() {
            // `(a)` is still named `a`
            Expr::Identifier(id) => Some(id.value.to_lowercase()),
            Expr::CompoundIdentifier(ids) => ids.last().map(|i| i.value.to_lowercase()),
            inner => figure_name(inner).or(Some("?column?".into())),
        },
        // `a[1]`, `(ARRAY[...])[2:3]`: named after the array; `(x).f`: after the field
        Expr::CompoundFieldAccess { root, access_chain } => match access_chain.last() {
            Some(ast::AccessExpr::Dot(Expr::Identifier(id))) => Some(id.value.to_lowercase()),
            // `t.a[1]`: the field before the subscripts
            Some(ast::AccessExpr::Subscript(_))
                if let Some(ast::AccessExpr::Dot(Expr::Identifier(id))) = access_chain
                    .iter()
                    .rev()
                    .find(|a| !matches!(a, ast::AccessExpr::Subscript(_))) =>
            {
                Some(id.value.to_lowercase())
            }
            Some(ast::AccessExpr::Subscript(_))
                if access_chain
                    .iter()
                    .all(|a| matches!(a, ast::AccessExpr::Subscript(_))) =>
            {
                let mut root = root.as_ref();
                while let Expr::Nested(inner) = root {
                    root = inner;
                }
                match root {
                    Expr::Identifier(id) => Some(id.value.to_lowercase()),
                    Expr::CompoundIdentifier(ids) => ids.last().map(|i| i.value.to_lowercase()),
                    other => figure_name(other).or(Some("?column?".into())),
                }
            }
            _ => Some("?column?".into()),
        },
        Expr::BinaryOp {
            op: BinaryOperator::Overlaps,
            ..
        } => Some("overlaps".into()),
        Expr::Case { .. } => Some("case".into()),
        Expr::Exists { .. } => Some("exists".into()),
        Expr::Array(_) => Some("array".into()),
        Expr::Subquery(q) => {
            // the first column's name (of a set operation: its leftmost operand's)
            let mut body = q.body.as_ref();
            while let ast::SetExpr::SetOperation { left, .. } = body {
                body = left.as_ref();
            }
            if let ast::SetExpr::Query(inner) = body {
                body = inner.body.as_ref();
            }
            match body {
                ast::SetExpr::Select(s) => match s.projection.first() {
                    Some(SelectItem::ExprWithAlias { alias, .. }) => Some(alias.value.clone()),
                    Some(SelectItem::UnnamedExpr(Expr::Identifier(id))) => {
                        Some(id.value.to_lowercase())
                    }
                    Some(SelectItem::UnnamedExpr(Expr::CompoundIdentifier(ids))) => {
                        ids.last().map(|i| i.value.to_lowercase())
                    }
                    Some(SelectItem::UnnamedExpr(inner)) => figure_name(inner),
                    _ => Some("?column?".into()),
                },
                _ => Some("?column?".into()),
            }
        }
        Expr::Interval(_) => Some("interval".into()),
        Expr::Extract { .. } => Some("extract".into()),
        Expr::AtTimeZone { .. } => Some("timezone".into()),
        // `substr(...)` is a function of its own name in Postgres
        Expr::Substring {
            shorthand: true, ..
        } => Some("substr".into()),
        Expr::Substring { .. } => Some("substring".into()),
        Expr::Trim { trim_where, .. } => Some(
            match trim_where {
                Some(ast::TrimWhereField::Leading) => "ltrim",
                Some(ast::TrimWhereField::Trailing) => "rtrim",
                _ => "btrim",
            }
            .into(),
        ),
        Expr::Position { .. } => Some("position".into()),
        Expr::Overlay { .. } => Some("overlay".into()),
        Expr::Ceil { .. } => Some("ceil".into()),
        Expr::Floor { .. } => Some("floor".into()),
        Expr::TypedString(ts) => Some(type_column_name(&ts.data_type)),
        _ => Some("?column?".into()),
    }
}

/// Whether Postgres names an expression itself rather than a cast around it (its
/// FigureColname strength 2): a column, a function call (and the SQL forms that are one),
/// a subquery, an ARRAY, or a cast or parentheses around one of those.
fn strongly_named(e: &Expr) -> bool {
    match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => true,
        Expr::Function(f) => {
            !is_reg_cast_of_constant(f)
                && !last_name(&f.name).is_some_and(|n| n.starts_with("weir_json_"))
        }
        Expr::Extract { .. }
        | Expr::Substring { .. }
        | Expr::Trim { .. }
        | Expr::Position { .. }
        | Expr::Overlay { .. }
        | Expr::Ceil { .. }
        | Expr::Floor { .. }
        | Expr::AtTimeZone { .. }
        | Expr::Subquery(_)
        | Expr::Exists { .. }
        | Expr::Array(_) => true,
        Expr::Nested(inner) | Expr::Cast { expr: inner, .. } => strongly_named(inner),
        _ => false,
    }
}

fn type_column_name(t: &ast::DataType) -> String {
    use ast::DataType as D;
    match t {
        // an array type is named after its elements' (`'{1}'::int[]` is "int4")
        D::Array(
            ast::ArrayElemTypeDef::SquareBracket(elem, _)
            | ast::ArrayElemTypeDef::AngleBracket(elem),
        ) => type_column_name(elem),
        D::Int(_) | D::Integer(_) | D::Int4(_) => "int4".into(),
        D::BigInt(_) | D::Int8(_) => "int8".into(),
        D::SmallInt(_) | D::Int2(_) => "int2".into(),
        D::Text => "text".into(),
        D::Varchar(_) | D::CharacterVarying(_) => "varchar".into(),
        D::Bool | D::Boolean => "bool".into(),
        D::Numeric(_) | D::Decimal(_) => "numeric".into(),
        D::Real | D::Float4 => "float4".into(),
        D::Double(_) | D::DoublePrecision | D::Float8 => "float8".into(),
        D::Date => "date".into(),
        D::Timestamp(_, ast::TimezoneInfo::Tz | ast::TimezoneInfo::WithTimeZone) => {
            "timestamptz".into()
        }
        D::Timestamp(..) => "timestamp".into(),
        D::Time(_, ast::TimezoneInfo::Tz | ast::TimezoneInfo::WithTimeZone) => "timetz".into(),
        D::Time(..) => "time".into(),
        D::Interval { .. } => "interval".into(),
        D::JSONB => "jsonb".into(),
        D::Bytea => "bytea".into(),
        // a type of the catalog's (an enum): its name without a schema (`mood` of
        // `app.mood`), as Postgres names the column
        D::Custom(n, args) if args.is_empty() => {
            let name = crate::catalog::user_types::user_type_name(n);
            name.rsplit('.').next().unwrap_or(&name).to_owned()
        }
        other => other.to_string().to_lowercase(),
    }
}

/// Call `f` on the select lists of a statement's top-level query (both sides of set
/// operations) and of the subqueries in their FROM, inner ones first, in one order, for
/// [`repeated_wildcard_probes`] and [`expand_repeated_wildcards`].
fn each_top_select(stmt: &mut ast::Statement, f: &mut dyn FnMut(&mut ast::Select)) {
    fn walk(body: &mut ast::SetExpr, f: &mut dyn FnMut(&mut ast::Select)) {
        match body {
            ast::SetExpr::Select(sel) => {
                for t in sel.from.iter_mut() {
                    in_factor(&mut t.relation, f);
                    for j in t.joins.iter_mut() {
                        in_factor(&mut j.relation, f);
                    }
                }
                f(sel);
            }
            ast::SetExpr::SetOperation { left, right, .. } => {
                walk(left, f);
                walk(right, f);
            }
            ast::SetExpr::Query(q) => walk(&mut q.body, f),
            _ => {}
        }
    }
    fn in_factor(t: &mut ast::TableFactor, f: &mut dyn FnMut(&mut ast::Select)) {
        match t {
            ast::TableFactor::Derived { subquery, .. } => walk(&mut subquery.body, f),
            ast::TableFactor::NestedJoin {
                table_with_joins, ..
            } => {
                in_factor(&mut table_with_joins.relation, f);
                for j in table_with_joins.joins.iter_mut() {
                    in_factor(&mut j.relation, f);
                }
            }
            _ => {}
        }
    }
    if let ast::Statement::Query(q) = stmt {
        walk(&mut q.body, f);
    }
}

fn is_wildcard(item: &SelectItem) -> bool {
    matches!(
        item,
        SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
    )
}

/// `SELECT *, *` / `SELECT t.*, t.*` (Postgres lists the columns twice; DataFusion refuses
/// the repeated names): for every wildcard after the first in a select list of the
/// top-level query, a query of that wildcard alone over the same FROM (and WITH), whose
/// planned columns name what it stands for. In the order [`expand_repeated_wildcards`]
/// takes the columns back.
pub fn repeated_wildcard_probes(stmt: &ast::Statement) -> Vec<ast::Statement> {
    let ast::Statement::Query(q) = stmt else {
        return Vec::new();
    };
    let mut copy = stmt.clone();
    let mut probes = Vec::new();
    each_top_select(&mut copy, &mut |sel| {
        let wild: Vec<usize> = (0..sel.projection.len())
            .filter(|k| is_wildcard(&sel.projection[*k]))
            .collect();
        for k in wild.iter().skip(1) {
            let mut one = sel.clone();
            one.projection = vec![sel.projection[*k].clone()];
            one.distinct = None;
            one.selection = None;
            one.group_by = ast::GroupByExpr::Expressions(vec![], vec![]);
            one.having = None;
            one.qualify = None;
            one.named_window.clear();
            one.sort_by.clear();
            let mut probe = (**q).clone();
            probe.body = Box::new(ast::SetExpr::Select(Box::new(one)));
            probe.order_by = None;
            probe.limit_clause = None;
            probe.fetch = None;
            probes.push(ast::Statement::Query(Box::new(probe)));
        }
    });
    probes
}

/// Replace the wildcards [`repeated_wildcard_probes`] probed by the columns each stands
/// for (`columns`: per probe, each column's qualifier parts and name, None where the
/// probe did not plan), as qualified column references named apart with a
/// [`DUPLICATE_NAME_MARKER`] (numbered by `round` and position); the first wildcard of
/// each list stays. Whether anything was replaced.
pub fn expand_repeated_wildcards(
    stmt: &mut ast::Statement,
    columns: Vec<Option<Vec<Vec<String>>>>,
    round: usize,
) -> bool {
    let mut columns = columns.into_iter();
    let mut changed = false;
    let mut n = 0usize;
    each_top_select(stmt, &mut |sel| {
        let wild: Vec<usize> = (0..sel.projection.len())
            .filter(|k| is_wildcard(&sel.projection[*k]))
            .collect();
        let lists: Vec<(usize, Vec<Vec<String>>)> = wild
            .iter()
            .skip(1)
            .filter_map(|k| columns.next().flatten().map(|c| (*k, c)))
            .collect();
        // back to front, so the earlier positions stay where they are
        for (k, cols) in lists.into_iter().rev() {
            let items: Vec<SelectItem> = cols
                .into_iter()
                .map(|parts| {
                    // named apart (clients see the column's own name): a name given again
                    // could be renamed where an inner list's item has it too
                    n += 1;
                    let alias = Ident::with_quote(
                        '"',
                        format!(
                            "{}{DUPLICATE_NAME_MARKER}e{round}.{n}",
                            display_column_name(parts.last().map(String::as_str).unwrap_or(""))
                        ),
                    );
                    let mut ids: Vec<Ident> = parts
                        .into_iter()
                        .map(|p| Ident::with_quote('"', p))
                        .collect();
                    let expr = if ids.len() == 1 {
                        Expr::Identifier(ids.remove(0))
                    } else {
                        Expr::CompoundIdentifier(ids)
                    };
                    SelectItem::ExprWithAlias { expr, alias }
                })
                .collect();
            sel.projection.splice(k..k + 1, items);
            changed = true;
        }
    });
    changed
}

/// After DataFusion refused `name` as repeated: in every select list that has a wildcard,
/// the other items named `name` get a [`DUPLICATE_NAME_MARKER`] name, which clients see as
/// `name` (a wildcard's columns are only known to the planner, so [`name_select_items`]
/// cannot number them). Whether an item was renamed.
pub fn rename_beside_wildcards(stmt: &mut ast::Statement, name: &str) -> bool {
    struct Rename<'a> {
        name: &'a str,
        renamed: bool,
    }
    fn in_body(body: &mut ast::SetExpr, r: &mut Rename) {
        match body {
            ast::SetExpr::Select(sel) => {
                let wildcard = sel.projection.iter().any(is_wildcard);
                if !wildcard {
                    return;
                }
                for (k, item) in sel.projection.iter_mut().enumerate() {
                    let named = match item {
                        SelectItem::ExprWithAlias { alias, .. } => alias.value == r.name,
                        SelectItem::UnnamedExpr(Expr::Identifier(id)) => {
                            id.value.to_lowercase() == r.name
                        }
                        SelectItem::UnnamedExpr(Expr::CompoundIdentifier(ids)) => {
                            ids.last().is_some_and(|i| i.value.to_lowercase() == r.name)
                        }
                        _ => false,
                    };
                    if !named {
                        continue;
                    }
                    let alias =
                        Ident::with_quote('"', format!("{}{DUPLICATE_NAME_MARKER}w{k}", r.name));
                    match item {
                        SelectItem::UnnamedExpr(e) => {
                            let e = std::mem::replace(e, Expr::value(ast::Value::Null));
                            *item = SelectItem::ExprWithAlias { expr: e, alias };
                        }
                        SelectItem::ExprWithAlias { alias: a, .. } => *a = alias,
                        _ => {}
                    }
                    r.renamed = true;
                }
            }
            ast::SetExpr::SetOperation { left, right, .. } => {
                in_body(left, r);
                in_body(right, r);
            }
            _ => {}
        }
    }
    impl VisitorMut for Rename<'_> {
        type Break = ();
        fn pre_visit_query(&mut self, q: &mut ast::Query) -> ControlFlow<()> {
            in_body(&mut q.body, self);
            ControlFlow::Continue(())
        }
    }
    let mut r = Rename {
        name,
        renamed: false,
    };
    let _ = stmt.visit(&mut r);
    r.renamed
}

fn name_select_items(items: &mut [SelectItem]) {
    let mut used: HashSet<String> = HashSet::new();
    let mut counter = 0usize;
    for item in items.iter_mut() {
        let (base, needs_alias) = match item {
            SelectItem::ExprWithAlias { alias, .. } => (alias.value.clone(), false),
            SelectItem::UnnamedExpr(Expr::Identifier(id)) => (id.value.to_lowercase(), false),
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(ids)) => (
                ids.last()
                    .map(|i| i.value.to_lowercase())
                    .unwrap_or_default(),
                false,
            ),
            SelectItem::UnnamedExpr(e) => match figure_name(e) {
                Some(n) => (n, true),
                None => continue,
            },
            _ => continue,
        };
        let mut name = base.clone();
        if used.contains(&name) {
            counter += 1;
            name = format!("{base}{DUPLICATE_NAME_MARKER}{counter}");
        }
        let renamed = name != base;
        used.insert(name.clone());
        if needs_alias || renamed {
            let alias = Ident::with_quote('"', name);
            match item {
                SelectItem::UnnamedExpr(e) => {
                    let e = std::mem::replace(e, Expr::value(ast::Value::Null));
                    *item = SelectItem::ExprWithAlias { expr: e, alias };
                }
                SelectItem::ExprWithAlias { alias: a, .. } => *a = alias,
                _ => {}
            }
        }
    }
}

/// Whether every relation a statement reads is a `pg_catalog` table.
pub fn reads_only_catalog(stmt: &ast::Statement) -> bool {
    struct Relations {
        all_catalog: bool,
        any: bool,
    }
    impl ast::Visitor for Relations {
        type Break = ();
        fn pre_visit_relation(&mut self, r: &ObjectName) -> ControlFlow<()> {
            self.any = true;
            let n = r.to_string().to_lowercase();
            let n = n.trim_start_matches("pg_catalog.");
            if !n.starts_with("pg_") && n != "generate_series" {
                self.all_catalog = false;
            }
            ControlFlow::Continue(())
        }
    }
    let mut v = Relations {
        all_catalog: true,
        any: false,
    };
    let _ = ast::Visit::visit(stmt, &mut v);
    v.any && v.all_catalog
}

/// The statement with every select item replaced by NULL (names kept) and ORDER BY
/// dropped. Client introspection queries over catalog tables sometimes use expressions
/// DataFusion cannot plan (correlated ARRAY subqueries over `pg_policy`...); when the
/// rows they select from are empty, the items do not matter and this probe, which
/// plans, gives the exact (empty) answer.
pub fn null_projection_probe(stmt: &ast::Statement) -> Option<ast::Statement> {
    let ast::Statement::Query(q) = stmt else {
        return None;
    };
    let mut q = (**q).clone();
    q.order_by = None;
    null_items(q.body.as_mut());
    Some(ast::Statement::Query(Box::new(q)))
}

#[recursive::recursive]
fn null_items(body: &mut ast::SetExpr) {
    match body {
        ast::SetExpr::Select(s) => {
            for item in s.projection.iter_mut() {
                let alias = match item {
                    SelectItem::ExprWithAlias { alias, .. } => alias.clone(),
                    SelectItem::UnnamedExpr(e) => Ident::new(match e {
                        Expr::Identifier(id) => id.value.clone(),
                        Expr::CompoundIdentifier(ids) => {
                            ids.last().map(|i| i.value.clone()).unwrap_or_default()
                        }
                        other => figure_name(other).unwrap_or_else(|| "?column?".into()),
                    }),
                    _ => continue,
                };
                *item = SelectItem::ExprWithAlias {
                    expr: Expr::value(ast::Value::Null),
                    alias,
                };
            }
        }
        ast::SetExpr::SetOperation { left, right, .. } => {
            null_items(left);
            null_items(right);
        }
        ast::SetExpr::Query(q) => {
            q.order_by = None;
            null_items(q.body.as_mut());
        }
        _ => {}
    }
}

/// `generate_series(timestamp '2024-01-01 00:00', ...)`: a table function's arguments are
/// folded to constants when the function is planned, before the analyzer that reads
/// Postgres' date and time input (`sql::datetime_in`) runs; so the text of a date or
/// timestamp literal (typed, or cast with `::`) among them is put in the form arrow reads
/// here.
fn datetime_text_in_table_function_args(tf: &mut ast::TableFactor) {
    let ast::TableFactor::Table {
        args: Some(args), ..
    } = tf
    else {
        return;
    };
    let keep_zone = |t: &ast::DataType| match t {
        ast::DataType::Timestamp(_, tz) => Some(matches!(
            tz,
            ast::TimezoneInfo::Tz | ast::TimezoneInfo::WithTimeZone
        )),
        ast::DataType::Date => Some(false),
        _ => None,
    };
    let fix = |v: &mut ast::Value, zone: bool, t: &ast::DataType| {
        if let ast::Value::SingleQuotedString(text) = v
            && let Some(n) = match t {
                ast::DataType::Date => crate::sql::datetime_in::normalize_date(text),
                _ => crate::sql::datetime_in::normalize(text, zone),
            }
            && crate::sql::datetime_in::infinity(text).is_none()
        {
            *text = n;
        }
    };
    for arg in args.args.iter_mut() {
        let (FunctionArg::Unnamed(FunctionArgExpr::Expr(e))
        | FunctionArg::Named {
            arg: FunctionArgExpr::Expr(e),
            ..
        }) = arg
        else {
            continue;
        };
        // a timestamptz's text without a zone is a wall-clock time in the session's zone,
        // which the folding knows (`weir_timestamptz_in` without a zone argument reads in
        // the zone of the configuration it runs under)
        let zoneless_tstz = match &*e {
            Expr::TypedString(ts) if keep_zone(&ts.data_type) == Some(true) => {
                Some(&ts.value.value)
            }
            Expr::Cast {
                expr, data_type, ..
            } if keep_zone(data_type) == Some(true) => match expr.as_ref() {
                Expr::Value(v) => Some(&v.value),
                _ => None,
            },
            _ => None,
        }
        .filter(|v| {
            matches!(v, ast::Value::SingleQuotedString(t)
            if !crate::sql::datetime_in::names_its_instant(t))
        })
        .cloned();
        if let Some(text) = zoneless_tstz {
            *e = call(
                crate::sql::pg_functions::TIMESTAMPTZ_IN,
                vec![
                    Expr::value(text),
                    parse_expr("CAST(NULL AS TIMESTAMP WITH TIME ZONE)"),
                ],
            );
            continue;
        }
        match e {
            Expr::TypedString(ts) => {
                if let Some(zone) = keep_zone(&ts.data_type) {
                    fix(&mut ts.value.value, zone, &ts.data_type);
                }
            }
            Expr::Cast {
                expr, data_type, ..
            } => {
                if let (Some(zone), Expr::Value(v)) = (keep_zone(data_type), expr.as_mut()) {
                    fix(&mut v.value, zone, data_type);
                }
            }
            _ => {}
        }
    }
}

/// `(VALUES (1, 'a')) t(id)`: an alias naming fewer columns than a VALUES list has leaves
/// the rest their own names (`column2`), as Postgres does; DataFusion refuses the alias.
fn values_alias_padded(tf: &mut ast::TableFactor) {
    if let ast::TableFactor::Derived {
        subquery,
        alias: Some(alias),
        ..
    } = tf
        && !alias.columns.is_empty()
        && let ast::SetExpr::Values(v) = subquery.body.as_ref()
        && let Some(width) = v.rows.first().map(|r| r.len())
    {
        for i in alias.columns.len()..width {
            alias
                .columns
                .push(ast::TableAliasColumnDef::from_name(format!(
                    "column{}",
                    i + 1
                )));
        }
    }
}

/// `(a, b) IN (subquery)`: a row compared with each row of the subquery, which DataFusion
/// does not plan (one column only). As Postgres: true if some row equals it (every column
/// equal), else NULL if some row has no column unequal (a NULL decides), else false; NOT
/// IN its negation. With `exists_only` (a WHERE conjunct, where only true keeps a row) the
/// one EXISTS, a semi join. The subquery's columns are renamed `weir_cN`, so the row's own
/// expressions (correlated references inside the EXISTS) resolve to the outer query.
fn row_in_subquery(e: &Expr, exists_only: bool) -> Option<Expr> {
    let Expr::InSubquery {
        expr,
        subquery,
        negated,
    } = e
    else {
        return None;
    };
    let Expr::Tuple(items) = expr.as_ref() else {
        return None;
    };
    // (a width that does not fit is refused where the expression is visited)
    if row_in_subquery_width(e).is_err() {
        return None;
    }
    // a plain SELECT (no aggregate, grouping, DISTINCT, LIMIT): the comparisons join its
    // own WHERE, so correlated references stay where they were written; else over the
    // subquery as a derived table
    // (only where the row's own expressions cannot be captured by the subquery's FROM: each
    // column they read is qualified by a name that FROM does not have)
    let plain = plain_rows_select(subquery).filter(|s| {
        let inner: HashSet<String> = crate::sql::parser::relation_labels(&s.from)
            .into_iter()
            .collect();
        let captured = ast::visit_expressions(items, |e| match e {
            Expr::Identifier(_) => ControlFlow::Break(()),
            Expr::CompoundIdentifier(ids)
                if ids.len() < 2
                    || inner
                        .contains(&crate::sql::parser::normalize_ident(&ids[ids.len() - 2])) =>
            {
                ControlFlow::Break(())
            }
            _ => ControlFlow::Continue(()),
        })
        .is_break();
        s.projection.len() == items.len() && !captured
    });
    // the relation the rows are read from, its own condition and each compared value
    let (from, filter, compared): (String, Option<String>, Vec<String>) = match plain {
        Some(sel) => {
            let from = sel
                .from
                .iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let compared = sel
                .projection
                .iter()
                .map(|i| match i {
                    SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                        Some(format!("({e})"))
                    }
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            (
                from,
                sel.selection.as_ref().map(|w| format!("({w})")),
                compared,
            )
        }
        None => {
            let cols: Vec<String> = (1..=items.len()).map(|i| format!("weir_c{i}")).collect();
            let from = format!("({subquery}) AS weir_row({})", cols.join(", "));
            (
                from,
                None,
                cols.iter().map(|c| format!("weir_row.{c}")).collect(),
            )
        }
    };
    let eq = |i: usize| format!("{} = ({})", compared[i], items[i]);
    // `EXISTS` of the rows where every column compares as `test` says
    let exists = |test: &dyn Fn(String) -> String| {
        let conds: Vec<String> = filter
            .iter()
            .cloned()
            .chain((0..items.len()).map(|i| test(eq(i))))
            .collect();
        format!(
            "EXISTS (SELECT 1 FROM {from} WHERE {})",
            conds.join(" AND ")
        )
    };
    let equal = exists(&|c| c);
    let text = if exists_only && !negated {
        equal
    } else {
        let not_unequal = exists(&|c| format!("({c}) IS NOT FALSE"));
        let t =
            format!("(CASE WHEN {equal} THEN TRUE WHEN {not_unequal} THEN NULL ELSE FALSE END)");
        if *negated { format!("(NOT {t})") } else { t }
    };
    try_parse_expr(&text)
}

/// A [`plain_select`] without an aggregate or window call (whose rows are not its FROM's
/// filtered by its WHERE).
fn plain_rows_select(q: &ast::Query) -> Option<&ast::Select> {
    let sel = plain_select(q)?;
    if !sel.named_window.is_empty() || sel.qualify.is_some() {
        return None;
    }
    // an aggregate or window call makes the select one row (or per-row windows)
    let aggregate = ast::visit_expressions(&sel.projection, |e| match e {
        Expr::Function(f)
            if f.over.is_some()
                || f.filter.is_some()
                || !f.within_group.is_empty()
                || last_name(&f.name)
                    .is_some_and(|n| AGGREGATES.contains(&n.to_lowercase().as_str())) =>
        {
            ControlFlow::Break(())
        }
        Expr::Subquery(_) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break();
    (!aggregate).then_some(sel)
}

/// `(a, b) IN (subquery)` whose subquery's width is known from its text (a select list
/// without `*`, a VALUES list) and is not the row's: 42601, as Postgres.
fn row_in_subquery_width(e: &Expr) -> crate::error::Result<()> {
    let Expr::InSubquery { expr, subquery, .. } = e else {
        return Ok(());
    };
    let Expr::Tuple(items) = expr.as_ref() else {
        return Ok(());
    };
    let width = match subquery.body.as_ref() {
        ast::SetExpr::Select(sel) if !sel.projection.iter().any(is_wildcard) => {
            Some(sel.projection.len())
        }
        ast::SetExpr::Values(v) => v.rows.first().map(|r| r.len()),
        _ => None,
    };
    match width {
        Some(w) if w > items.len() => Err(crate::error::WeirError::syntax(
            "subquery has too many columns",
        )),
        Some(w) if w < items.len() => Err(crate::error::WeirError::syntax(
            "subquery has too few columns",
        )),
        _ => Ok(()),
    }
}

/// [`row_in_subquery`] of the conjuncts of a WHERE clause: each as its EXISTS.
fn row_in_subquery_conjuncts(e: &mut Expr) {
    match e {
        Expr::BinaryOp {
            left,
            op: ast::BinaryOperator::And,
            right,
        } => {
            row_in_subquery_conjuncts(left);
            row_in_subquery_conjuncts(right);
        }
        Expr::Nested(inner) => row_in_subquery_conjuncts(inner),
        _ => {
            if let Some(x) = row_in_subquery(e, true) {
                *e = x;
            }
        }
    }
}

/// A quoted literal (`'{a,b}'`), whose type Postgres takes from the other operand.
fn is_string_literal(e: &Expr) -> bool {
    matches!(e, Expr::Value(v) if matches!(v.value, ast::Value::SingleQuotedString(_)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rw(sql: &str) -> String {
        let mut s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .remove(0);
        rewrite_statement(&mut s).unwrap();
        s.to_string()
    }

    #[test]
    fn correlated_array_subquery_aggregates_in_place() {
        let out = rw(
            "SELECT ARRAY(SELECT b.rolname FROM pg_catalog.pg_auth_members m JOIN pg_catalog.pg_roles b ON (m.roleid = b.oid) WHERE m.member = r.oid) AS memberof FROM pg_catalog.pg_roles r",
        );
        assert!(out.contains("SELECT array_agg(b.rolname) FROM"), "{out}");
    }

    #[test]
    fn names_like_postgres() {
        assert_eq!(
            rw("SELECT count(*), version(), 1, 2, a FROM t"),
            "SELECT count(*) AS \"count\", version() AS \"version\", CAST(1 AS INT) AS \"?column?\", \
             CAST(2 AS INT) AS \"?column?\u{1}1\", a FROM t"
        );
    }

    #[test]
    fn psql_operator_and_collate() {
        assert_eq!(
            rw(
                "SELECT 1 AS x FROM c WHERE c.relname OPERATOR(pg_catalog.~) '^(t)$' COLLATE pg_catalog.default"
            ),
            "SELECT CAST(1 AS INT) AS x FROM c WHERE c.relname ~ '^(t)$'"
        );
    }

    #[test]
    fn postgres_interval_clock_form() {
        assert_eq!(
            normalize_interval("1 day 02:03:04.5").as_deref(),
            Some("0 months 1 days 7384500000 microseconds")
        );
        assert_eq!(
            normalize_interval("-01:30").as_deref(),
            Some("0 months 0 days -5400000000 microseconds")
        );
        let read = |t: &str| {
            datafusion::arrow::compute::kernels::cast_utils::parse_interval_month_day_nano(
                &normalize_interval(t).unwrap(),
            )
            .unwrap()
        };
        let v = read("-1 years -2 mons +3 days -04:05:06.5");
        assert_eq!(
            (v.months, v.days, v.nanoseconds),
            (-14, 3, -14_706_500_000_000)
        );
    }

    #[test]
    fn regclass_cast_becomes_call() {
        // shown as a result column: the name; compared in a subquery or WHERE: the OID
        assert_eq!(
            rw("SELECT c.oid::pg_catalog.regclass AS r FROM c"),
            "SELECT weir_regclass_out(c.oid) AS r FROM c"
        );
        assert_eq!(
            rw("SELECT 1 FROM c WHERE c.oid IN (SELECT 't'::regclass) AND c.oid = 'u'::regclass"),
            "SELECT CAST(1 AS INT) AS \"?column?\" FROM c WHERE c.oid IN (SELECT weir_regclass('t') AS \"regclass\") AND c.oid = weir_regclass('u')"
        );
    }
}
