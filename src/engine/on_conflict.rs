//! `INSERT ... ON CONFLICT [(columns) [WHERE pred] | ON CONSTRAINT name] DO NOTHING | DO
//! UPDATE SET col = expr, ... [WHERE cond]`, over the primary key or a unique index (a
//! UNIQUE constraint's or CREATE UNIQUE INDEX's) whose columns the target names — a partial
//! one when the target's WHERE is its predicate (as written, where Postgres proves the
//! implication) —; DO NOTHING without a target over all of them, expression and partial
//! indexes included (on a table with none it is a plain INSERT).
//!
//! The INSERT is planned without its ON CONFLICT clause into the rows it proposes; their
//! keys are read from the table (under the writer lock the caller holds: the primary key
//! by point lookups, a unique index by its prefix lookups; a key holding a NULL conflicts
//! with nothing); then:
//! - DO NOTHING keeps the proposed rows whose key is neither stored nor proposed earlier in
//!   the statement;
//! - DO UPDATE inserts the rows without a stored key and, for the others, evaluates the SET
//!   expressions and WHERE over the stored row (the table's name or alias) and the proposed
//!   row (`excluded`), as Postgres does; a key proposed twice is 21000, as in Postgres.
//!
//! The result is the rows it wrote (for RETURNING and the row count) and the changes that
//! write them: on a table with a primary key one change that sets each affected key's row
//! (`Change::Upsert`; a row whose primary key DO UPDATE changed has its old key deleted
//! first), applied in one commit; on a table without one (the arbiter is a unique index)
//! the stored rows DO UPDATE changed (`Change::Update`, old and new) and the rows inserted
//! (`Change::Insert`), applied as one statement (`Engine::apply_as_one_statement`).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, UInt32Array};
use datafusion::arrow::compute::{cast, concat_batches, take};
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, ParamValues};
use datafusion::logical_expr::Expr;
use datafusion::sql::sqlparser::ast;

use crate::engine::Engine;
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::state::table::{Change, TableStore};
use crate::state::table_index::DerivedKeys;

/// Take the ON CONFLICT clause off an INSERT (with the target's alias, if any).
pub fn take_on_conflict(stmt: &mut ast::Statement) -> Option<(ast::OnConflict, Option<String>)> {
    let ast::Statement::Insert(ins) = stmt else {
        return None;
    };
    match ins.on.take()? {
        ast::OnInsert::OnConflict(c) => Some((
            c,
            ins.table_alias
                .as_ref()
                .map(|a| crate::sql::parser::normalize_ident(&a.alias)),
        )),
        other => {
            ins.on = Some(other);
            None
        }
    }
}

/// An INSERT's ON CONFLICT clause, the name its target is seen by (its alias), and the
/// statement's bound parameters (the clause's own `$n`).
pub(crate) struct Clause<'a> {
    pub on: &'a ast::OnConflict,
    pub alias: Option<String>,
    pub params: Option<&'a ParamValues>,
}

fn no_matching_constraint() -> WeirError {
    WeirError::new(
        "42P10",
        "there is no unique or exclusion constraint matching the ON CONFLICT specification",
    )
}

impl Engine {
    /// The change an INSERT ... ON CONFLICT makes, and the rows it writes.
    pub(crate) async fn resolve_conflicts(
        &self,
        session: &Session,
        table: &Arc<TableStore>,
        table_name: &str,
        clause: &Clause<'_>,
        proposed: Vec<RecordBatch>,
    ) -> Result<(Vec<(Change, &'static str)>, RecordBatch, Vec<bool>)> {
        let on = clause.on;
        let schema = table.schema();
        let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        let pk: Option<Vec<usize>> = table.primary_key().map(<[usize]>::to_vec);
        // the unique indexes (UNIQUE constraints' and CREATE UNIQUE INDEX's)
        let specs = table.indexes();
        let uniques: Vec<UniqueIndex> = self
            .catalog
            .get(table_name)
            .map(|e| {
                e.desc
                    .indexes
                    .iter()
                    .filter(|i| i.unique)
                    .filter_map(|i| {
                        let cols = match i.expressions.iter().any(Option::is_some) {
                            true => None,
                            false => Some(
                                i.columns
                                    .iter()
                                    .map(|c| names.iter().position(|n| n == c))
                                    .collect::<Option<Vec<_>>>()?,
                            ),
                        };
                        let derived = match i.derived() {
                            true => Some(specs.iter().find(|s| s.oid == i.oid)?.derived.clone()?),
                            false => None,
                        };
                        let arbiter = Arbiter::Unique {
                            oid: i.oid,
                            columns: cols.clone().unwrap_or_default(),
                            derived,
                            nulls_not_distinct: i.nulls_not_distinct,
                        };
                        let predicate = i.predicate.as_deref().map(normalized);
                        // (ON CONSTRAINT names a UNIQUE constraint, not a unique index)
                        let constraint = i.constraint.then(|| i.name.clone());
                        Some(UniqueIndex {
                            constraint,
                            columns: cols,
                            predicate,
                            arbiter,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let sorted = |v: &[usize]| {
            let mut v = v.to_vec();
            v.sort_unstable();
            v
        };
        // the arbiters: the constraints a proposed row may conflict with (Postgres' words)
        let arbiters: Vec<Arbiter> = match &on.conflict_target {
            Some(ast::ConflictTarget::Columns(cols)) => {
                // `(cols) WHERE pred` (the parser carries the predicate as a last column):
                // a partial index whose predicate it is
                let mut predicate = None;
                let cols: Vec<&ast::Ident> = cols
                    .iter()
                    .filter(
                        |c| match c.value.strip_prefix(crate::sql::parser::CONFLICT_WHERE) {
                            Some(p) => {
                                predicate = Some(normalized(p));
                                false
                            }
                            None => true,
                        },
                    )
                    .collect();
                let want: Vec<usize> = cols
                    .iter()
                    .map(|c| {
                        let n = crate::sql::parser::normalize_ident(c);
                        names.iter().position(|x| *x == n).ok_or_else(|| {
                            WeirError::new(
                                sqlstate::UNDEFINED_COLUMN,
                                format!("column \"{n}\" does not exist"),
                            )
                        })
                    })
                    .collect::<Result<_>>()?;
                let want = sorted(&want);
                // (a partial index only when the target's WHERE is its predicate; a target
                // with a WHERE still takes a full index, as in Postgres)
                if let Some(k) = pk.as_ref().filter(|k| sorted(k) == want) {
                    vec![Arbiter::Key(k.clone())]
                } else if let Some(u) = uniques.iter().find(|u| {
                    u.columns.as_ref().is_some_and(|c| sorted(c) == want)
                        && (u.predicate.is_none() || u.predicate == predicate)
                }) {
                    vec![u.arbiter.clone()]
                } else {
                    return Err(no_matching_constraint());
                }
            }
            Some(ast::ConflictTarget::OnConstraint(name)) => {
                let n = crate::sql::parser::relation_name(name)?;
                match (
                    &pk,
                    uniques.iter().find(|u| u.constraint.as_ref() == Some(&n)),
                ) {
                    (Some(k), _) if n == table.pkey_name() => vec![Arbiter::Key(k.clone())],
                    (_, Some(u)) => vec![u.arbiter.clone()],
                    _ => {
                        return Err(WeirError::new(
                            sqlstate::UNDEFINED_OBJECT,
                            format!("constraint \"{n}\" for table \"{table_name}\" does not exist"),
                        ));
                    }
                }
            }
            None if matches!(on.action, ast::OnConflictAction::DoUpdate(_)) => {
                return Err(WeirError::syntax(
                    "ON CONFLICT DO UPDATE requires inference specification or constraint name",
                ));
            }
            // DO NOTHING without a target: any unique constraint
            None => pk
                .iter()
                .map(|k| Arbiter::Key(k.clone()))
                .chain(uniques.iter().map(|u| u.arbiter.clone()))
                .collect(),
        };
        let proposed = concat_batches(&schema, &proposed)?;
        // per arbiter: each proposed row's stored row (in `stored`), and whether its key was
        // proposed earlier in the statement
        let mut found: Vec<(RecordBatch, Vec<Option<usize>>, Vec<bool>)> = Vec::new();
        for arbiter in &arbiters {
            found.push(self.conflicts(table, arbiter, &proposed)?);
        }
        let n = proposed.num_rows();
        let conflicting: Vec<bool> = (0..n)
            .map(|i| found.iter().any(|(_, at, rep)| at[i].is_some() || rep[i]))
            .collect();
        let (insert_idx, conflict_idx): (Vec<u32>, Vec<u32>) = {
            let mut ins = Vec::new();
            let mut conf = Vec::new();
            for (i, c) in conflicting.iter().enumerate() {
                match c {
                    false => ins.push(i as u32),
                    true => conf.push(i as u32),
                }
            }
            (ins, conf)
        };
        let pick = |b: &RecordBatch, idx: &[u32]| -> Result<RecordBatch> {
            let idx = UInt32Array::from(idx.to_vec());
            let cols = b
                .columns()
                .iter()
                .map(|c| take(c, &idx, None))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok(RecordBatch::try_new(b.schema(), cols)?)
        };
        let inserted = pick(&proposed, &insert_idx)?;
        // keys whose row DO UPDATE moved to another key (SET of a key column): deleted
        let mut moved_keys: Option<RecordBatch> = None;
        // without a primary key: the stored rows DO UPDATE changed, and their new values
        let mut keyless_update: Option<(RecordBatch, RecordBatch)> = None;
        // which written rows DO UPDATE wrote over a stored one (RETURNING's `xmax`)
        let mut updated_rows = vec![false; inserted.num_rows()];
        let written = match &on.action {
            ast::OnConflictAction::DoNothing => inserted.clone(),
            ast::OnConflictAction::DoUpdate(up) => {
                // one arbiter (the target named it)
                let Some((stored, at, repeated)) = found.pop() else {
                    return Err(no_matching_constraint());
                };
                if repeated.iter().any(|r| *r) {
                    return Err(WeirError::new(
                        "21000",
                        "ON CONFLICT DO UPDATE command cannot affect row a second time",
                    )
                    .with_hint(
                        "Ensure that no rows proposed for insertion within the same command have duplicate constrained values.",
                    ));
                }
                let stored_idx: Vec<u32> = conflict_idx
                    .iter()
                    .filter_map(|&i| at[i as usize].map(|s| s as u32))
                    .collect();
                let old = pick(&stored, &stored_idx)?;
                let excluded = pick(&proposed, &conflict_idx)?;
                let (updated, kept) =
                    self.updated_rows(session, table_name, clause, up, &old, &excluded)?;
                // the rows DO UPDATE changed compute their generated columns again
                let updated = match self.catalog.get(table_name) {
                    Some(e) => super::generated::fill_rows(&session.ctx, &e.desc, vec![updated])?
                        .pop()
                        .unwrap_or_else(|| RecordBatch::new_empty(schema.clone())),
                    None => updated,
                };
                let kept_idx: Vec<u32> = (0..kept.len() as u32)
                    .filter(|&k| kept[k as usize])
                    .collect();
                let changed = pick(&old, &kept_idx)?;
                match &pk {
                    Some(pk) => moved_keys = moved(pk, &changed, &updated)?,
                    None => keyless_update = Some((changed, updated.clone())),
                }
                // the rows in the order they were proposed, as Postgres returns them
                let mut order: Vec<(u32, u32)> = insert_idx
                    .iter()
                    .enumerate()
                    .map(|(k, &i)| (i, k as u32))
                    .collect();
                let mut next = inserted.num_rows() as u32;
                for (k, &i) in conflict_idx.iter().enumerate() {
                    if kept[k] {
                        order.push((i, next));
                        next += 1;
                    }
                }
                order.sort_unstable();
                let all = concat_batches(&schema, &[inserted.clone(), updated])?;
                let perm: Vec<u32> = order.into_iter().map(|(_, at)| at).collect();
                updated_rows = perm
                    .iter()
                    .map(|&at| at as usize >= inserted.num_rows())
                    .collect();
                pick(&all, &perm)?
            }
        };
        let Some(pk) = pk else {
            // the stored rows updated, then the rows inserted (DO NOTHING: only those)
            let (inserts, updates) = match keyless_update {
                Some((old, new)) => (
                    inserted,
                    (old.num_rows() > 0).then(|| {
                        (
                            Change::Update {
                                old: vec![old],
                                new: vec![new],
                            },
                            "UPDATE",
                        )
                    }),
                ),
                None => (written.clone(), None),
            };
            // (an INSERT that writes nothing is still one: a read-only transaction refuses it)
            let insert = (updates.is_none() || inserts.num_rows() > 0)
                .then(|| (Change::Insert(vec![inserts]), "INSERT"));
            let changes = updates.into_iter().chain(insert).collect();
            return Ok((changes, written, updated_rows));
        };
        let key_fields: Vec<_> = pk.iter().map(|&i| schema.field(i).clone()).collect();
        let deletes = match moved_keys {
            Some(d) => d,
            None => RecordBatch::new_empty(Arc::new(Schema::new(key_fields))),
        };
        // moved rows' old keys go first, then every written row is set
        let order = (0..deletes.num_rows() as u32)
            .map(|i| (true, i))
            .chain((0..written.num_rows() as u32).map(|i| (false, i)))
            .collect();
        Ok((
            vec![(
                Change::Upsert {
                    upserts: written.clone(),
                    deletes,
                    order,
                },
                "INSERT",
            )],
            written,
            updated_rows,
        ))
    }

    /// Which proposed rows conflict with `arbiter`: the stored rows they meet (a batch, and
    /// each proposed row's index in it) and whether the same key was proposed earlier in
    /// the statement. A key with a NULL in it conflicts with nothing (as a unique index
    /// has it), unless the index is `NULLS NOT DISTINCT`.
    fn conflicts(
        &self,
        table: &Arc<TableStore>,
        arbiter: &Arbiter,
        proposed: &RecordBatch,
    ) -> Result<(RecordBatch, Vec<Option<usize>>, Vec<bool>)> {
        // each row's key, and whether the index holds the row (a partial index's predicate)
        let keys_of = |batch: &RecordBatch| -> Result<(Vec<ArrayRef>, Option<BooleanArray>)> {
            match arbiter {
                Arbiter::Unique {
                    derived: Some(d), ..
                } => d.derive(batch),
                Arbiter::Key(c) | Arbiter::Unique { columns: c, .. } => {
                    Ok((c.iter().map(|&i| batch.column(i).clone()).collect(), None))
                }
            }
        };
        let (keys, holds) = keys_of(proposed)?;
        let conv = RowConverter::new(
            keys.iter()
                .map(|k| SortField::new(k.data_type().clone()))
                .collect(),
        )?;
        let rows = conv.convert_columns(&keys)?;
        let n = proposed.num_rows();
        // (a row the index does not hold conflicts with nothing, as one with a NULL key)
        let nulls_distinct = !matches!(
            arbiter,
            Arbiter::Unique {
                nulls_not_distinct: true,
                ..
            }
        );
        let has_null: Vec<bool> = (0..n)
            .map(|i| {
                (nulls_distinct && keys.iter().any(|k| k.is_null(i)))
                    || holds
                        .as_ref()
                        .is_some_and(|h| !(h.is_valid(i) && h.value(i)))
            })
            .collect();
        let (stored, at) = match arbiter {
            Arbiter::Key(_) => table
                .lookup_each(&keys)?
                .ok_or_else(no_matching_constraint)?,
            Arbiter::Unique { oid, .. } => {
                let stored = table
                    .index_lookup(*oid, &keys)?
                    .ok_or_else(no_matching_constraint)?;
                let (stored_keys, _) = keys_of(&stored)?;
                let stored_rows = conv.convert_columns(&stored_keys)?;
                let by_key: HashMap<&[u8], usize> = stored_rows
                    .iter()
                    .enumerate()
                    .map(|(k, r)| (r.data(), k))
                    .collect();
                let at = (0..n)
                    .map(|i| match has_null[i] {
                        true => None,
                        false => by_key.get(rows.row(i).data()).copied(),
                    })
                    .collect();
                (stored, at)
            }
        };
        let mut first: HashMap<&[u8], usize> = HashMap::new();
        let mut repeated = vec![false; n];
        for (i, r) in rows.iter().enumerate() {
            if !has_null[i] && first.insert(r.data(), i).is_some() {
                repeated[i] = true;
            }
        }
        Ok((stored, at, repeated))
    }

    /// DO UPDATE: the stored rows with the SET expressions applied, where WHERE holds.
    fn updated_rows(
        &self,
        session: &Session,
        table_name: &str,
        clause: &Clause<'_>,
        up: &ast::DoUpdate,
        old: &RecordBatch,
        excluded: &RecordBatch,
    ) -> Result<(RecordBatch, Vec<bool>)> {
        let schema = old.schema();
        let params = clause.params;
        let target = clause.alias.as_deref().unwrap_or(table_name);
        let both = DFSchema::try_from_qualified_schema(target, &schema)?
            .join(&DFSchema::try_from_qualified_schema("excluded", &schema)?)?;
        let mut cols: Vec<ArrayRef> = old.columns().to_vec();
        cols.extend(excluded.columns().iter().cloned());
        let input = RecordBatch::try_new(Arc::new(both.as_arrow().clone()), cols)?;
        let eval = |text: String| -> Result<ArrayRef> {
            let e = session.ctx.parse_sql_expr(&text, &both)?;
            // the clause's own `$n` (`DO UPDATE SET n = t.n + $3`): the statement's bound
            // values, as DataFusion binds a plan's
            let e = match params {
                Some(p) => {
                    e.transform(|e| match e {
                        Expr::Placeholder(ph) => Ok(Transformed::yes(Expr::Literal(
                            p.get_placeholders_with_values(&ph.id)?.value,
                            None,
                        ))),
                        e => Ok(Transformed::no(e)),
                    })?
                    .data
                }
                None => e,
            };
            // Postgres' semantics, coerced and simplified as a query's expressions are
            let e = crate::catalog::pg_semantics::analyze_expr(e, &both)?;
            let e = crate::catalog::table_exprs::coerced_and_simplified(e, &both)?;
            let p = session.ctx.create_physical_expr(e, &both)?;
            Ok(p.evaluate(&input)?.into_array(input.num_rows())?)
        };
        let mut new_cols: Vec<ArrayRef> = old.columns().to_vec();
        for a in &up.assignments {
            let ast::AssignmentTarget::ColumnName(name) = &a.target else {
                return Err(WeirError::not_supported(
                    "ON CONFLICT DO UPDATE SET (a, b) = ... is not supported; set each column",
                ));
            };
            let col = name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(crate::sql::parser::normalize_ident)
                .unwrap_or_default();
            let i = schema
                .fields()
                .iter()
                .position(|f| *f.name() == col)
                .ok_or_else(|| {
                    WeirError::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!("column \"{col}\" of relation \"{table_name}\" does not exist"),
                    )
                })?;
            let v = eval(a.value.to_string())?;
            new_cols[i] = cast(&v, schema.field(i).data_type())?;
        }
        let new = RecordBatch::try_new(schema.clone(), new_cols)?;
        match &up.selection {
            None => Ok((new, vec![true; old.num_rows()])),
            Some(cond) => {
                let mask = eval(cond.to_string())?;
                let mask = cast(&mask, &datafusion::arrow::datatypes::DataType::Boolean)?;
                let mask = mask.as_boolean();
                // NULL is not true: that row is left as it is
                let kept: Vec<bool> = (0..mask.len())
                    .map(|i| mask.is_valid(i) && mask.value(i))
                    .collect();
                let keep: datafusion::arrow::array::BooleanArray =
                    kept.iter().map(|k| Some(*k)).collect();
                Ok((
                    datafusion::arrow::compute::filter_record_batch(&new, &keep)?,
                    kept,
                ))
            }
        }
    }
}

/// A constraint INSERT ... ON CONFLICT checks proposed rows against.
/// A unique index of the table, as the ON CONFLICT target is matched against it.
struct UniqueIndex {
    /// The UNIQUE constraint's name, when the index keeps one (`ON CONSTRAINT name`).
    constraint: Option<String>,
    /// Its column positions; None for an expression index.
    columns: Option<Vec<usize>>,
    /// A partial index's predicate ([`normalized`]).
    predicate: Option<String>,
    arbiter: Arbiter,
}

#[derive(Clone)]
enum Arbiter {
    /// The primary key (its column positions).
    Key(Vec<usize>),
    /// A unique index: its OID, its column positions, or for an expression or partial
    /// index the keys the table store computes (`catalog::table_exprs`).
    Unique {
        oid: u32,
        columns: Vec<usize>,
        derived: Option<Arc<dyn DerivedKeys>>,
        /// `NULLS NOT DISTINCT`: a key with a NULL conflicts like any other.
        nulls_not_distinct: bool,
    },
}

/// A predicate's text as it prints once parsed, without outer parentheses (what two
/// spellings are compared by).
fn normalized(text: &str) -> String {
    match crate::sql::parser::parse_expr_text(text) {
        Ok(mut e) => {
            while let ast::Expr::Nested(inner) = e {
                e = *inner;
            }
            e.to_string()
        }
        Err(_) => text.to_owned(),
    }
}

/// The primary keys of `old` rows that `new` (the same rows, updated) no longer has, or
/// None when no key column changed.
fn moved(pk: &[usize], old: &RecordBatch, new: &RecordBatch) -> Result<Option<RecordBatch>> {
    let key_of =
        |b: &RecordBatch| -> Vec<ArrayRef> { pk.iter().map(|&i| b.column(i).clone()).collect() };
    let (o, n) = (key_of(old), key_of(new));
    let conv = RowConverter::new(
        o.iter()
            .map(|k| SortField::new(k.data_type().clone()))
            .collect(),
    )?;
    let (or, nr) = (conv.convert_columns(&o)?, conv.convert_columns(&n)?);
    let changed: Vec<u32> = (0..old.num_rows())
        .filter(|&i| or.row(i) != nr.row(i))
        .map(|i| i as u32)
        .collect();
    if changed.is_empty() {
        return Ok(None);
    }
    let idx = UInt32Array::from(changed);
    let cols = o
        .iter()
        .map(|c| take(c, &idx, None))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let fields: Vec<_> = pk.iter().map(|&i| old.schema().field(i).clone()).collect();
    Ok(Some(RecordBatch::try_new(
        Arc::new(Schema::new(fields)),
        cols,
    )?))
}
