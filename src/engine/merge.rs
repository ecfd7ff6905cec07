//! `MERGE INTO target [AS t] USING source [AS s] ON cond WHEN MATCHED [AND c] THEN UPDATE
//! SET ... | DELETE | DO NOTHING, WHEN NOT MATCHED [AND c] THEN INSERT [(cols)] VALUES (...) |
//! INSERT DEFAULT VALUES | DO NOTHING`, as Postgres 15 runs it.
//!
//! One query reads what the statement does, under the target's writer lock: the source
//! LEFT JOIN the target (marked, so a missing match is told from a row of NULLs) on the
//! condition, and for each joined row the first WHEN clause whose kind and condition hold
//! and every target column's new value under that clause (cast to the column's type).
//! Its rows become the statement's changes — the rows deleted, updated (old and new) and
//! inserted — applied one after another through `Engine::apply_change` (so CHECK, NOT
//! NULL, keys and foreign keys hold), all undone if one fails. A target row that two
//! source rows would change is 21000, as in Postgres.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{AsArray, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{Int64Type, Schema};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::ParamValues;
use datafusion::sql::sqlparser::ast;

use crate::catalog::RelationKind;
use crate::engine::{Engine, Output, collect_plan, lock_writer, refuse_connector_table};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::{
    MERGE_DEFAULT_VALUES, MERGE_DO_NOTHING, normalize_ident, relation_labels, relation_name,
};
use crate::sql::pg_text::quote_ident;
use crate::sql::types::SqlType;
use crate::state::table::Change;

/// UPDATE ... FROM ... RETURNING that reads the FROM relations: its items, rewritten to
/// read the MERGE query's join (the target's columns as their new values), are added to
/// that query; the values of the rows updated (each target row's first match) come back.
pub(crate) struct JoinReturning<'a> {
    pub items: Vec<String>,
    /// The items' columns, as the result's (set by the MERGE).
    pub schema: Option<datafusion::arrow::datatypes::SchemaRef>,
    pub rows: &'a mut Vec<RecordBatch>,
}

/// What one WHEN clause does.
enum Action {
    Update,
    Delete,
    Insert,
    Nothing,
}

impl Engine {
    pub(crate) async fn merge(&self, session: &mut Session, m: &ast::Merge) -> Result<Output> {
        self.merge_rows(session, m, false, None, None, None).await
    }

    /// [`Self::merge`]; with `first_match`, a target row two source rows match is changed
    /// by the first (UPDATE ... FROM's rule) instead of refused (MERGE's).
    /// `updated`: where the rows as updated go (UPDATE ... FROM ... RETURNING reads them).
    async fn merge_rows(
        &self,
        session: &mut Session,
        m: &ast::Merge,
        first_match: bool,
        updated: Option<&mut Vec<RecordBatch>>,
        mut join_returning: Option<&mut JoinReturning<'_>>,
        params: Option<ParamValues>,
    ) -> Result<Output> {
        let ast::TableFactor::Table {
            name,
            alias: talias,
            ..
        } = &m.table
        else {
            return Err(WeirError::syntax("MERGE INTO needs a table"));
        };
        let table_name = relation_name(name)?;
        let entry = self
            .catalog
            .get(&table_name)
            .ok_or_else(|| WeirError::undefined_table(&table_name))?;
        let Some(table) = entry.table.clone() else {
            return Err(WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("cannot execute MERGE on relation \"{table_name}\"",),
            )
            .with_detail(format!(
                "This operation is not supported for {}s.",
                entry.desc.kind.noun()
            )));
        };
        refuse_connector_table(&entry.desc, "MERGE into")?;
        let desc = &entry.desc;
        let target = talias
            .as_ref()
            .map(|a| normalize_ident(&a.name))
            .unwrap_or_else(|| table_name.clone());
        let t = quote_ident(&target);
        let present = "__weir_present";
        // each clause: its condition (kind and predicate) and each column's value under it
        let mut conditions: Vec<String> = Vec::new();
        let mut actions: Vec<Action> = Vec::new();
        let mut values: Vec<Vec<String>> = vec![Vec::new(); desc.columns.len()];
        for clause in &m.clauses {
            let matched = match clause.clause_kind {
                ast::MergeClauseKind::Matched => true,
                ast::MergeClauseKind::NotMatched | ast::MergeClauseKind::NotMatchedByTarget => {
                    false
                }
                ast::MergeClauseKind::NotMatchedBySource => {
                    return Err(WeirError::not_supported(
                        "WHEN NOT MATCHED BY SOURCE is not supported (Postgres 15 has no such clause)",
                    ));
                }
            };
            let mut cond = format!("{t}.{present} IS {}NULL", if matched { "NOT " } else { "" });
            if let Some(p) = &clause.predicate {
                cond = format!("{cond} AND ({p})");
            }
            let keep = |i: usize| format!("{t}.{}", quote_ident(&desc.columns[i].name));
            let action = match &clause.action {
                ast::MergeAction::Update(_) if !matched => {
                    return Err(WeirError::syntax(
                        "syntax error: UPDATE is not allowed in a WHEN NOT MATCHED clause",
                    ));
                }
                ast::MergeAction::Delete { .. } if !matched => {
                    return Err(WeirError::syntax(
                        "syntax error: DELETE is not allowed in a WHEN NOT MATCHED clause",
                    ));
                }
                ast::MergeAction::Insert(_) if matched => {
                    return Err(WeirError::syntax(
                        "syntax error: INSERT is not allowed in a WHEN MATCHED clause",
                    ));
                }
                ast::MergeAction::Update(u) => {
                    let nothing = u.assignments.iter().any(|a| {
                        matches!(&a.target, ast::AssignmentTarget::ColumnName(c)
                            if c.to_string() == MERGE_DO_NOTHING)
                    });
                    if nothing {
                        for (i, v) in values.iter_mut().enumerate() {
                            v.push(keep(i));
                        }
                        Action::Nothing
                    } else {
                        let mut set: Vec<Option<String>> = vec![None; desc.columns.len()];
                        for a in &u.assignments {
                            let ast::AssignmentTarget::ColumnName(c) = &a.target else {
                                return Err(WeirError::not_supported(
                                    "a tuple assignment in MERGE ... UPDATE SET",
                                ));
                            };
                            let col =
                                c.0.last()
                                    .and_then(|p| p.as_ident())
                                    .map(normalize_ident)
                                    .unwrap_or_default();
                            let Some(at) = desc.columns.iter().position(|x| x.name == col) else {
                                return Err(WeirError::new(
                                    sqlstate::UNDEFINED_COLUMN,
                                    format!(
                                        "column \"{col}\" of relation \"{table_name}\" does not exist"
                                    ),
                                ));
                            };
                            if set[at].is_some() {
                                return Err(WeirError::syntax(format!(
                                    "multiple assignments to same column \"{col}\""
                                )));
                            }
                            set[at] = Some(a.value.to_string());
                        }
                        for (i, v) in values.iter_mut().enumerate() {
                            v.push(set[i].clone().unwrap_or_else(|| keep(i)));
                        }
                        Action::Update
                    }
                }
                ast::MergeAction::Delete { .. } => {
                    for (i, v) in values.iter_mut().enumerate() {
                        v.push(keep(i));
                    }
                    Action::Delete
                }
                ast::MergeAction::Insert(ins) => {
                    let given: Vec<String> = match &ins.kind {
                        ast::MergeInsertKind::Values(v) if v.rows.len() == 1 => {
                            v.rows[0].content.iter().map(|e| e.to_string()).collect()
                        }
                        _ => {
                            return Err(WeirError::syntax("MERGE ... INSERT takes one VALUES row"));
                        }
                    };
                    let defaults = given.len() == 1 && given[0] == MERGE_DEFAULT_VALUES;
                    let columns: Vec<String> = if ins.columns.is_empty() {
                        desc.columns.iter().map(|c| c.name.clone()).collect()
                    } else {
                        ins.columns
                            .iter()
                            .map(|c| {
                                c.0.last()
                                    .and_then(|p| p.as_ident())
                                    .map(normalize_ident)
                                    .unwrap_or_default()
                            })
                            .collect()
                    };
                    if !defaults && given.len() > columns.len() {
                        return Err(WeirError::syntax(
                            "INSERT has more expressions than target columns",
                        ));
                    }
                    if !defaults && given.len() < columns.len() && !ins.columns.is_empty() {
                        return Err(WeirError::syntax(
                            "INSERT has more target columns than expressions",
                        ));
                    }
                    for c in &columns {
                        if !desc.columns.iter().any(|x| &x.name == c) {
                            return Err(WeirError::new(
                                sqlstate::UNDEFINED_COLUMN,
                                format!(
                                    "column \"{c}\" of relation \"{table_name}\" does not exist"
                                ),
                            ));
                        }
                    }
                    for (i, v) in values.iter_mut().enumerate() {
                        let col = &desc.columns[i].name;
                        let default = || {
                            desc.defaults
                                .iter()
                                .find(|(c, _)| c == col)
                                .map(|(_, d)| d.clone())
                                .unwrap_or_else(|| "NULL".to_owned())
                        };
                        let value = match columns.iter().position(|c| c == col) {
                            Some(k) if !defaults => match given.get(k) {
                                Some(g) if g.eq_ignore_ascii_case("default") => default(),
                                Some(g) => g.clone(),
                                None => default(),
                            },
                            _ => default(),
                        };
                        v.push(value);
                    }
                    Action::Insert
                }
            };
            conditions.push(cond);
            actions.push(action);
        }
        if actions.is_empty() {
            return Ok(Output::Command("MERGE 0".into()));
        }
        if entry.desc.kind == RelationKind::AppendOnlyTable
            && actions
                .iter()
                .any(|a| matches!(a, Action::Update | Action::Delete))
        {
            return Err(crate::state::table::append_only_error(&table_name, "MERGE"));
        }
        // the query: source LEFT JOIN the marked target, the clause each row takes, the
        // target's old values and each column's new value
        let which = conditions
            .iter()
            .enumerate()
            .map(|(k, c)| format!("WHEN {c} THEN {}", k + 1))
            .collect::<Vec<_>>()
            .join(" ");
        let mut items = vec![format!("CASE {which} ELSE 0 END AS __weir_clause")];
        for (i, c) in desc.columns.iter().enumerate() {
            items.push(format!("{t}.{}", quote_ident(&c.name)));
            let to = assigned_type(&c.ty);
            let cases = conditions
                .iter()
                .zip(&values[i])
                .map(|(c, v)| format!("WHEN {c} THEN CAST(({v}) AS {to})"))
                .collect::<Vec<_>>()
                .join(" ");
            items.push(format!("CASE {cases} END"));
        }
        // the RETURNING items after the MERGE's own columns
        let base = items.len();
        if let Some(jr) = &join_returning {
            items.extend(jr.items.iter().cloned());
        }
        let sql = format!(
            "SELECT {} FROM {} LEFT JOIN (SELECT *, true AS {present} FROM {}) AS {t} ON {}",
            items.join(", "),
            m.source,
            quote_ident(&table_name),
            m.on
        );
        let query = crate::sql::parser::parse_query(&sql)?;
        let writer = lock_writer(session, &table).await?;
        let plan = self
            .plan_ast(session, &ast::Statement::Query(query))
            .await?;
        // an UPDATE ... FROM's or DELETE ... USING's parameters, bound
        let plan = match params {
            Some(p) => plan.with_param_values(p)?,
            None => plan,
        };
        if let Some(jr) = join_returning.as_deref_mut() {
            let shown = self.result_schema(&plan);
            jr.schema = Some(Arc::new(Schema::new(shown.fields()[base..].to_vec())));
        }
        let batches = collect_plan(session, plan).await?;
        // the rows each action takes
        let schema = desc.schema();
        // (NOT NULL is the table's to check, with Postgres' error, where rows are written)
        let loose = Arc::new(Schema::new(
            schema
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_nullable(true))
                .collect::<Vec<_>>(),
        ));
        let ncols = desc.columns.len();
        let mut deleted = Vec::new();
        let mut updated_old = Vec::new();
        let mut updated_new = Vec::new();
        // the RETURNING values of the deleted and the updated rows, batch for batch with
        // `deleted` and `updated_new`
        let mut deleted_returning = Vec::new();
        let mut updated_returning = Vec::new();
        let mut inserted = Vec::new();
        for b in batches.iter().filter(|b| b.num_rows() > 0) {
            let clause = cast(b.column(0), &datafusion::arrow::datatypes::DataType::Int64)?;
            let clause = clause.as_primitive::<Int64Type>();
            let side = |offset: usize, rows: &[u32]| -> Result<RecordBatch> {
                let idx = UInt32Array::from(rows.to_vec());
                let cols = (0..ncols)
                    .map(|i| {
                        let c = take(b.column(1 + 2 * i + offset).as_ref(), &idx, None)?;
                        Ok(cast(&c, schema.field(i).data_type())?)
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(RecordBatch::try_new(loose.clone(), cols)?)
            };
            let mut by_action: [Vec<u32>; 3] = Default::default();
            for r in 0..b.num_rows() {
                let k = clause.value(r);
                if k < 1 {
                    continue;
                }
                match actions[k as usize - 1] {
                    Action::Delete => by_action[0].push(r as u32),
                    Action::Update => by_action[1].push(r as u32),
                    Action::Insert => by_action[2].push(r as u32),
                    Action::Nothing => {}
                }
            }
            // the RETURNING columns of these rows
            let returned = |rows: &[u32]| -> Result<RecordBatch> {
                let idx = UInt32Array::from(rows.to_vec());
                let cols = b.columns()[base..]
                    .iter()
                    .map(|c| Ok(take(c.as_ref(), &idx, None)?))
                    .collect::<Result<Vec<_>>>()?;
                let fields = b.schema().fields()[base..].to_vec();
                Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?)
            };
            if !by_action[0].is_empty() {
                deleted.push(side(0, &by_action[0])?);
                if join_returning.is_some() {
                    deleted_returning.push(returned(&by_action[0])?);
                }
            }
            if !by_action[1].is_empty() {
                updated_old.push(side(0, &by_action[1])?);
                updated_new.push(side(1, &by_action[1])?);
                if join_returning.is_some() {
                    updated_returning.push(returned(&by_action[1])?);
                }
            }
            if !by_action[2].is_empty() {
                inserted.push(side(1, &by_action[2])?);
            }
        }
        // a target row changed twice (two source rows matched it)
        let conv = RowConverter::new(
            schema
                .fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect(),
        )?;
        let mut seen = HashSet::new();
        if first_match {
            // keep each target row's first delete, then its first update (by its old values)
            let mut first = |old: &RecordBatch| -> Result<datafusion::arrow::array::BooleanArray> {
                let rows = conv.convert_columns(old.columns())?;
                Ok(rows
                    .iter()
                    .map(|r| Some(seen.insert(r.as_ref().to_vec())))
                    .collect())
            };
            let keep = |batches: &mut Vec<RecordBatch>,
                        masks: &[datafusion::arrow::array::BooleanArray]|
             -> Result<()> {
                for (b, m) in batches.iter_mut().zip(masks) {
                    *b = datafusion::arrow::compute::filter_record_batch(b, m)?;
                }
                Ok(())
            };
            let masks = deleted.iter().map(&mut first).collect::<Result<Vec<_>>>()?;
            keep(&mut deleted, &masks)?;
            keep(&mut deleted_returning, &masks)?;
            let masks = updated_old
                .iter()
                .map(&mut first)
                .collect::<Result<Vec<_>>>()?;
            keep(&mut updated_old, &masks)?;
            keep(&mut updated_new, &masks)?;
            keep(&mut updated_returning, &masks)?;
        } else {
            for b in deleted.iter().chain(&updated_old) {
                let rows = conv.convert_columns(b.columns())?;
                for r in rows.iter() {
                    if !seen.insert(r.as_ref().to_vec()) {
                        return Err(WeirError::new(
                            "21000",
                            "MERGE command cannot affect row a second time",
                        )
                        .with_hint(
                            "Ensure that not more than one source row matches any one target row.",
                        ));
                    }
                }
            }
        }
        let count: usize = deleted
            .iter()
            .chain(&updated_new)
            .chain(&inserted)
            .map(|b| b.num_rows())
            .sum();
        if let Some(out) = updated {
            out.extend(updated_new.iter().cloned());
        }
        if let Some(jr) = join_returning {
            jr.rows.extend(deleted_returning);
            jr.rows.extend(updated_returning);
        }
        let changes = [
            (!deleted.is_empty()).then(|| (Change::Delete(deleted), "DELETE")),
            (!updated_old.is_empty()).then(|| {
                (
                    Change::Update {
                        old: updated_old,
                        new: updated_new,
                    },
                    "UPDATE",
                )
            }),
            (!inserted.is_empty()).then(|| (Change::Insert(inserted), "INSERT")),
        ];
        self.apply_as_one_statement(
            session,
            &table,
            changes.into_iter().flatten().collect(),
            writer,
            false,
        )
        .await?;
        Ok(Output::Command(format!("MERGE {count}")))
    }
}

/// The value an UPDATE's SET list assigns to `column`, if it does.
fn assignment_of<'a>(assignments: &'a [ast::Assignment], column: &str) -> Option<&'a ast::Expr> {
    assignments.iter().find_map(|a| match &a.target {
        ast::AssignmentTarget::ColumnName(c)
            if c.0
                .last()
                .and_then(|p| p.as_ident())
                .map(normalize_ident)
                .as_deref()
                == Some(column) =>
        {
            Some(&a.value)
        }
        _ => None,
    })
}

/// The type a column's new value is cast to in the MERGE query (a `varchar(n)`'s length is
/// checked where the row is written, as an assignment: not cut here).
fn assigned_type(ty: &SqlType) -> String {
    match ty {
        SqlType::Varchar(Some(_)) => "text".to_owned(),
        ty => ty.display_name(),
    }
}

impl Engine {
    /// UPDATE ... FROM ... RETURNING's items as select items over the MERGE query's join
    /// (see [`JoinReturning`]): the target's columns — qualified by its name or alias, or
    /// unqualified where no FROM relation has the name (42702 where one has) — become
    /// their new values; `*` is the target's columns then every FROM relation's, the
    /// target's `t.*` its columns. Each item keeps the name Postgres gives it, made unique
    /// with the duplicate-name marker clients do not see.
    async fn returning_over_join(
        &self,
        session: &Session,
        relation: &ast::TableFactor,
        assignments: &[ast::Assignment],
        returning: &[ast::SelectItem],
        source: &str,
        from_names: &[String],
    ) -> Result<Vec<String>> {
        let ast::TableFactor::Table { name, alias, .. } = relation else {
            return Err(WeirError::syntax("UPDATE takes one table to update"));
        };
        let table_name = relation_name(name)?;
        let entry = self
            .catalog
            .get(&table_name)
            .ok_or_else(|| WeirError::undefined_table(&table_name))?;
        let label = alias
            .as_ref()
            .map(|a| normalize_ident(&a.name))
            .unwrap_or_else(|| table_name.clone());
        let t = quote_ident(&label);
        // each target column's new value: itself, its assigned value cast to its type, or
        // for a stored generated column its expression over the others' new values (it
        // reads no generated column)
        let assigned = |value: &dyn std::fmt::Display, ty: &SqlType| {
            crate::sql::parser::parse_expr_text(&format!(
                "CAST(({value}) AS {})",
                assigned_type(ty)
            ))
        };
        let mut parsed: Vec<(String, ast::Expr)> = entry
            .desc
            .columns
            .iter()
            .map(|c| {
                let value = assignment_of(assignments, &c.name)
                    .map(|v| assigned(v, &c.ty))
                    .unwrap_or_else(|| {
                        crate::sql::parser::parse_expr_text(&format!(
                            "{t}.{}",
                            quote_ident(&c.name)
                        ))
                    })?;
                Ok((c.name.clone(), value))
            })
            .collect::<Result<_>>()?;
        for (gcol, gexpr) in &entry.desc.generated {
            let (Some(at), Some(desc)) = (
                parsed.iter().position(|(n, _)| n == gcol),
                entry.desc.columns.iter().find(|c| c.name == *gcol),
            ) else {
                continue;
            };
            let mut e = crate::sql::parser::parse_expr_text(gexpr)?;
            let _ = ast::visit_expressions_mut(&mut e, |x| {
                if let ast::Expr::Identifier(id) = &*x
                    && let Some((_, v)) = parsed.iter().find(|(n, _)| *n == normalize_ident(id))
                {
                    *x = ast::Expr::Nested(Box::new(v.clone()));
                }
                std::ops::ControlFlow::<()>::Continue(())
            });
            parsed[at].1 = assigned(&e, &desc.ty)?;
        }
        let source_columns = self.source_columns(session, source).await?;
        let marker = crate::catalog::rewrite::DUPLICATE_NAME_MARKER;
        let named = |expr: &dyn std::fmt::Display, name: &str, k: usize| {
            format!("{expr} AS {}", quote_ident(&format!("{name}{marker}r{k}")))
        };
        let target_columns = |k: usize| -> Vec<String> {
            parsed
                .iter()
                .enumerate()
                .map(|(i, (n, v))| named(v, n, k * 1000 + i))
                .collect()
        };
        let rewrite = |e: &ast::Expr| -> Result<ast::Expr> {
            let mut e = e.clone();
            let mut ambiguous = None;
            let _ = ast::visit_expressions_mut(&mut e, |x| {
                let col = match &*x {
                    ast::Expr::CompoundIdentifier(ids)
                        if ids.len() == 2 && normalize_ident(&ids[0]) == label =>
                    {
                        normalize_ident(&ids[1])
                    }
                    ast::Expr::Identifier(id) => {
                        let col = normalize_ident(id);
                        if source_columns.contains(&col) && parsed.iter().any(|(n, _)| *n == col) {
                            ambiguous = Some(col);
                            return std::ops::ControlFlow::Break(());
                        }
                        col
                    }
                    _ => return std::ops::ControlFlow::Continue(()),
                };
                if let Some((_, v)) = parsed.iter().find(|(n, _)| *n == col) {
                    *x = ast::Expr::Nested(Box::new(v.clone()));
                }
                std::ops::ControlFlow::Continue(())
            });
            match ambiguous {
                Some(col) => Err(WeirError::new(
                    sqlstate::AMBIGUOUS_COLUMN,
                    format!("column reference \"{col}\" is ambiguous"),
                )),
                None => Ok(e),
            }
        };
        let mut out = Vec::new();
        for (k, item) in returning.iter().enumerate() {
            match item {
                ast::SelectItem::Wildcard(_) => {
                    out.extend(target_columns(k));
                    out.extend(from_names.iter().map(|n| format!("{}.*", quote_ident(n))));
                }
                ast::SelectItem::QualifiedWildcard(
                    ast::SelectItemQualifiedWildcardKind::ObjectName(o),
                    _,
                ) if o
                    .0
                    .last()
                    .and_then(|p| p.as_ident())
                    .map(normalize_ident)
                    .as_deref()
                    == Some(label.as_str()) =>
                {
                    out.extend(target_columns(k));
                }
                ast::SelectItem::UnnamedExpr(e) => {
                    let name = match e {
                        ast::Expr::Identifier(id) => normalize_ident(id),
                        ast::Expr::CompoundIdentifier(ids) => {
                            ids.last().map(normalize_ident).unwrap_or_default()
                        }
                        e => crate::catalog::rewrite::figure_name(e)
                            .unwrap_or_else(|| "?column?".into()),
                    };
                    out.push(named(&rewrite(e)?, &name, k));
                }
                ast::SelectItem::ExprWithAlias { expr, alias } => {
                    out.push(named(&rewrite(expr)?, &alias.value, k));
                }
                other => out.push(other.to_string()),
            }
        }
        Ok(out)
    }
}

impl Engine {
    /// Whether a RETURNING list of an UPDATE ... FROM or DELETE ... USING reads the other
    /// relations (`source`): by their names, or by a column name the target does not have
    /// or they have too (ambiguous: refused when the list is rewritten).
    async fn returning_reads_join(
        &self,
        session: &Session,
        target: &ast::TableFactor,
        items: &[ast::SelectItem],
        from_names: &[String],
        source: &str,
    ) -> Result<bool> {
        if items
            .iter()
            .any(|i| crate::sql::parser::returning_reads(i, from_names).is_some())
        {
            return Ok(true);
        }
        let mut unqualified = HashSet::new();
        for i in items {
            let _ = ast::visit_expressions(i, |e| {
                if let ast::Expr::Identifier(id) = e {
                    unqualified.insert(normalize_ident(id));
                }
                std::ops::ControlFlow::<()>::Continue(())
            });
        }
        if unqualified.is_empty() {
            return Ok(false);
        }
        let target_columns: HashSet<String> = match target {
            ast::TableFactor::Table { name, .. } => relation_name(name)
                .ok()
                .and_then(|n| self.catalog.get(&n))
                .map(|e| e.desc.columns.iter().map(|c| c.name.clone()).collect())
                .unwrap_or_default(),
            _ => HashSet::new(),
        };
        if !unqualified.is_subset(&target_columns) {
            return Ok(true);
        }
        Ok(self
            .source_columns(session, source)
            .await?
            .iter()
            .any(|c| unqualified.contains(c)))
    }

    /// The column names of an UPDATE's FROM or a DELETE's USING relations.
    async fn source_columns(&self, session: &Session, source: &str) -> Result<HashSet<String>> {
        let probe = crate::sql::parser::parse_query(&format!("SELECT * FROM {source}"))?;
        let plan = self
            .plan_ast(session, &ast::Statement::Query(probe))
            .await?;
        Ok(plan
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect())
    }

    /// Run a MERGE (UPDATE ... FROM's or DELETE ... USING's, each target row's first match)
    /// with RETURNING items over its join (see [`JoinReturning`]): the rows it returns.
    async fn merge_returning(
        &self,
        session: &mut Session,
        m: &ast::Merge,
        items: Vec<String>,
        tag: &'static str,
        params: Option<ParamValues>,
    ) -> Result<Output> {
        let mut rows = Vec::new();
        let mut jr = JoinReturning {
            items,
            schema: None,
            rows: &mut rows,
        };
        self.merge_rows(session, m, true, None, Some(&mut jr), params)
            .await?;
        let schema = jr
            .schema
            .ok_or_else(|| WeirError::internal("RETURNING's columns were not planned"))?;
        let batches = rows
            .into_iter()
            .map(|b| Ok(RecordBatch::try_new(schema.clone(), b.columns().to_vec())?))
            .collect::<Result<Vec<_>>>()?;
        Ok(Output::Batches {
            schema,
            batches,
            tag,
        })
    }

    /// `DELETE FROM t USING u WHERE c [RETURNING ...]`: the rows of t with a match. Run as
    /// `DELETE ... WHERE EXISTS (SELECT 1 FROM u WHERE c)` (DataFusion plans no USING),
    /// unless RETURNING reads the USING relations: then as a MERGE that deletes each
    /// target row at its first match and returns the items over that match, as Postgres.
    pub(crate) async fn delete_using(
        &self,
        session: &mut Session,
        d: &ast::Delete,
        params: Option<ParamValues>,
    ) -> Result<Output> {
        let using = d.using.as_deref().unwrap_or_default();
        let (ast::FromTable::WithFromKeyword(from) | ast::FromTable::WithoutKeyword(from)) =
            &d.from;
        let [target] = from.as_slice() else {
            return Err(WeirError::syntax("DELETE takes one table to delete from"));
        };
        let from_names: Vec<String> = relation_labels(using);
        let source = join_source(using);
        let reads_join = match &d.returning {
            Some(items) => {
                self.returning_reads_join(session, &target.relation, items, &from_names, &source)
                    .await?
            }
            None => false,
        };
        let Some(items) = d.returning.as_ref().filter(|_| reads_join) else {
            let exists = crate::sql::parser::delete_using_as_exists(d.clone())?;
            return Box::pin(self.execute_dml_fitted(
                session,
                &ast::Statement::Delete(exists),
                params,
            ))
            .await;
        };
        if !target.joins.is_empty() {
            return Err(WeirError::syntax("DELETE takes one table to delete from"));
        }
        let m = merge_over(&target.relation, &source, d.selection.as_ref(), "DELETE")?;
        let items = self
            .returning_over_join(session, &target.relation, &[], items, &source, &from_names)
            .await?;
        self.merge_returning(session, &m, items, "DELETE", params)
            .await
    }
}

/// `MERGE INTO target USING source ON cond WHEN MATCHED THEN action`: what UPDATE ... FROM
/// and DELETE ... USING run as (no condition: every pair matches).
fn merge_over(
    target: &ast::TableFactor,
    source: &str,
    cond: Option<&ast::Expr>,
    action: &str,
) -> Result<ast::Merge> {
    let on = cond.map_or_else(|| "true".to_owned(), |e| e.to_string());
    let sql = format!("MERGE INTO {target} USING {source} ON {on} WHEN MATCHED THEN {action}");
    match crate::sql::parser::parse(&sql)?
        .into_iter()
        .next()
        .map(|p| p.stmt)
    {
        Some(crate::sql::parser::Statement::Merge(m)) => Ok(*m),
        _ => Err(WeirError::internal(format!("not a MERGE: {sql}"))),
    }
}

/// The FROM list of an UPDATE ... FROM or the USING list of a DELETE ... USING as one
/// relation: its items cross-joined.
fn join_source(from: &[ast::TableWithJoins]) -> String {
    let source = from
        .iter()
        .map(|t| {
            if t.joins.is_empty() {
                t.relation.to_string()
            } else {
                format!("({t})")
            }
        })
        .collect::<Vec<_>>()
        .join(" CROSS JOIN ");
    if from.len() > 1 {
        format!("({source})")
    } else {
        source
    }
}

/// Whether a DML statement reads other relations beside its target: `UPDATE ... FROM`,
/// `DELETE ... USING` (run by [`Engine::update_from`] and [`Engine::delete_using`]).
pub(crate) fn joins_other_relations(q: &ast::Statement) -> bool {
    match q {
        ast::Statement::Update(u) => u.from.is_some(),
        ast::Statement::Delete(d) => d.using.is_some(),
        _ => false,
    }
}

impl Engine {
    /// Describe of an UPDATE ... FROM or DELETE ... USING: the parameters of its join (the
    /// condition, the SET values, the RETURNING items over the join) and its RETURNING
    /// columns, planned as `SELECT sets, items FROM from CROSS JOIN target WHERE cond`.
    pub(crate) async fn describe_join_dml(
        &self,
        session: &Session,
        q: &ast::Statement,
    ) -> Result<(
        Vec<Option<datafusion::arrow::datatypes::FieldRef>>,
        Option<datafusion::arrow::datatypes::SchemaRef>,
    )> {
        let (target, from, assignments, selection, returning) = match q {
            ast::Statement::Update(u) => match &u.from {
                Some(
                    ast::UpdateTableFromKind::AfterSet(f) | ast::UpdateTableFromKind::BeforeSet(f),
                ) => (
                    &u.table,
                    f.as_slice(),
                    u.assignments.as_slice(),
                    &u.selection,
                    &u.returning,
                ),
                None => return Err(WeirError::internal("UPDATE ... FROM without FROM")),
            },
            ast::Statement::Delete(d) => {
                let (ast::FromTable::WithFromKeyword(t) | ast::FromTable::WithoutKeyword(t)) =
                    &d.from;
                let [target] = t.as_slice() else {
                    return Err(WeirError::syntax("DELETE takes one table to delete from"));
                };
                let using = d.using.as_deref().unwrap_or_default();
                (target, using, &[][..], &d.selection, &d.returning)
            }
            _ => {
                return Err(WeirError::internal(
                    "describe_join_dml of another statement",
                ));
            }
        };
        let from_names: Vec<String> = relation_labels(from);
        let source = join_source(from);
        let over_join = match returning {
            Some(items) => {
                self.returning_reads_join(session, &target.relation, items, &from_names, &source)
                    .await?
            }
            None => false,
        };
        let items = match returning {
            Some(items) if over_join => {
                self.returning_over_join(
                    session,
                    &target.relation,
                    assignments,
                    items,
                    &source,
                    &from_names,
                )
                .await?
            }
            _ => vec!["1".to_owned()],
        };
        let sets: Vec<String> = assignments.iter().map(|a| a.value.to_string()).collect();
        let on = selection
            .as_ref()
            .map(|e| e.to_string())
            .unwrap_or_else(|| "true".into());
        let sql = format!(
            "SELECT {} FROM {source} CROSS JOIN {} WHERE {on}",
            sets.iter()
                .chain(&items)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            target.relation
        );
        let query = crate::sql::parser::parse_query(&sql)?;
        let plan = self
            .plan_ast(session, &ast::Statement::Query(query))
            .await?;
        let params = super::parameter_types(&plan)?;
        let schema = match returning {
            None => None,
            Some(_) if over_join => {
                let shown = self.result_schema(&plan);
                Some(Arc::new(Schema::new(shown.fields()[sets.len()..].to_vec())))
            }
            Some(_) => {
                let mut stmt = q.clone();
                if let ast::Statement::Delete(d) = &mut stmt {
                    d.using = None;
                }
                let r = super::returning::take_returning(&mut stmt)
                    .ok_or_else(|| WeirError::internal("RETURNING disappeared"))?;
                let shown = self.returning_plan(session, &r).await?;
                Some(self.result_schema(&shown))
            }
        };
        Ok((params, schema))
    }
}

/// `UPDATE t SET (a, b) = (x, y)` and `SET (a, b) = (SELECT x, y FROM ...)`: one
/// assignment per column (`a = x`, `b = (SELECT x FROM ...)`), as Postgres reads them.
/// None when the statement has no tuple assignment.
pub(crate) fn expand_tuple_assignments(q: &ast::Statement) -> Result<Option<ast::Statement>> {
    let ast::Statement::Update(u) = q else {
        return Ok(None);
    };
    if !u
        .assignments
        .iter()
        .any(|a| matches!(a.target, ast::AssignmentTarget::Tuple(_)))
    {
        return Ok(None);
    }
    let mut u = u.clone();
    let mut out = Vec::with_capacity(u.assignments.len());
    for a in u.assignments.drain(..) {
        let ast::AssignmentTarget::Tuple(cols) = a.target else {
            out.push(a);
            continue;
        };
        let values: Vec<ast::Expr> = match a.value {
            ast::Expr::Tuple(v) => v,
            ast::Expr::Subquery(q) => {
                let ast::SetExpr::Select(s) = q.body.as_ref() else {
                    return Err(WeirError::not_supported(
                        "a multiple-column assignment from a query other than a SELECT",
                    ));
                };
                (0..s.projection.len())
                    .map(|k| {
                        let mut one = q.clone();
                        if let ast::SetExpr::Select(s) = one.body.as_mut() {
                            let item = s.projection.remove(k);
                            s.projection = vec![item];
                        }
                        ast::Expr::Subquery(one)
                    })
                    .collect()
            }
            other => vec![other],
        };
        if values.len() != cols.len() {
            return Err(WeirError::syntax(
                "number of columns does not match number of values",
            ));
        }
        for (c, v) in cols.into_iter().zip(values) {
            out.push(ast::Assignment {
                target: ast::AssignmentTarget::ColumnName(c),
                value: v,
            });
        }
    }
    u.assignments = out;
    Ok(Some(ast::Statement::Update(u)))
}

impl Engine {
    /// `UPDATE t [AS a] SET ... FROM f, ... [WHERE cond]`, run as `MERGE INTO t [AS a] USING
    /// (f CROSS JOIN ...) ON cond WHEN MATCHED THEN UPDATE SET ...` (DataFusion plans no
    /// UPDATE ... FROM). Where several rows of the FROM list match one target row, one of
    /// them updates it (the first read), as in Postgres (which says: unspecified which).
    pub(crate) async fn update_from(
        &self,
        session: &mut Session,
        u: &ast::Update,
        params: Option<ParamValues>,
    ) -> Result<Output> {
        if !u.table.joins.is_empty() {
            return Err(WeirError::syntax("UPDATE takes one table to update"));
        }
        let from = match &u.from {
            Some(
                ast::UpdateTableFromKind::AfterSet(f) | ast::UpdateTableFromKind::BeforeSet(f),
            ) => f,
            None => return Err(WeirError::internal("UPDATE ... FROM without FROM")),
        };
        let source = join_source(from);
        let sets = u
            .assignments
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let m = merge_over(
            &u.table.relation,
            &source,
            u.selection.as_ref(),
            &format!("UPDATE SET {sets}"),
        )?;
        // RETURNING: of the updated rows (planned first, so that a list it cannot answer
        // changes nothing); one that reads the FROM relations is evaluated in the MERGE's
        // own query, over each updated row's match
        let from_names: Vec<String> = relation_labels(from);
        if let Some(items) = &u.returning
            && self
                .returning_reads_join(session, &u.table.relation, items, &from_names, &source)
                .await?
        {
            let items = self
                .returning_over_join(
                    session,
                    &u.table.relation,
                    &u.assignments,
                    items,
                    &source,
                    &from_names,
                )
                .await?;
            return self
                .merge_returning(session, &m, items, "UPDATE", params)
                .await;
        }
        let returning = match &u.returning {
            None => None,
            Some(_) => {
                let mut stmt = ast::Statement::Update(u.clone());
                let r = super::returning::take_returning(&mut stmt)
                    .ok_or_else(|| WeirError::internal("RETURNING disappeared"))?;
                self.returning_plan(session, &r).await?;
                Some(r)
            }
        };
        let mut written = Vec::new();
        let out = self
            .merge_rows(
                session,
                &m,
                true,
                returning.is_some().then_some(&mut written),
                None,
                params,
            )
            .await?;
        if let Some(r) = returning {
            let (schema, batches) = self.returning_rows(session, &r, written, &[]).await?;
            return Ok(Output::Batches {
                schema,
                batches,
                tag: "UPDATE",
            });
        }
        match out {
            Output::Command(tag) => Ok(Output::Command(tag.replacen("MERGE", "UPDATE", 1))),
            other => Ok(other),
        }
    }
}
