//! `INSERT ... ON CONFLICT [(key columns) | ON CONSTRAINT t_pkey] DO NOTHING | DO UPDATE SET
//! col = expr, ... [WHERE cond]`, over the primary key (Weir's one unique constraint).
//!
//! The INSERT is planned without its ON CONFLICT clause into the rows it proposes; their
//! keys are read from the table (under the writer lock the caller holds); then:
//! - DO NOTHING keeps the proposed rows whose key is neither stored nor proposed earlier in
//!   the statement;
//! - DO UPDATE inserts the rows without a stored key and, for the others, evaluates the SET
//!   expressions and WHERE over the stored row (the table's name or alias) and the proposed
//!   row (`excluded`), as Postgres does; a key proposed twice is 21000, as in Postgres.
//!
//! The result is one change that sets each affected key's row (`Change::Upsert`), applied
//! in one commit, and the rows it wrote (for RETURNING and the row count).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, UInt32Array};
use datafusion::arrow::compute::{cast, concat_batches, take};
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::DFSchema;
use datafusion::sql::sqlparser::ast;

use crate::engine::Engine;
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::state::table::{Change, TableStore};

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
        alias: Option<String>,
        on: &ast::OnConflict,
        proposed: Vec<RecordBatch>,
    ) -> Result<(Change, RecordBatch)> {
        let schema = table.schema();
        let Some(pk) = table.primary_key() else {
            // DO NOTHING without a target on a table that has nothing to conflict with: a
            // plain INSERT, as in Postgres
            let unique = self
                .catalog
                .get(table_name)
                .is_some_and(|e| e.desc.indexes.iter().any(|i| i.unique));
            if on.conflict_target.is_none()
                && matches!(on.action, ast::OnConflictAction::DoNothing)
                && !unique
            {
                let written = concat_batches(&schema, &proposed)?;
                return Ok((Change::Insert(proposed), written));
            }
            return Err(no_matching_constraint());
        };
        let pk: Vec<usize> = pk.to_vec();
        let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
        match &on.conflict_target {
            Some(ast::ConflictTarget::Columns(cols)) => {
                let mut want: Vec<usize> = cols
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
                let mut have = pk.clone();
                want.sort_unstable();
                have.sort_unstable();
                if want != have {
                    return Err(no_matching_constraint());
                }
            }
            Some(ast::ConflictTarget::OnConstraint(name)) => {
                let n = crate::sql::parser::relation_name(name)?;
                if n != table.pkey_name() {
                    return Err(WeirError::new(
                        sqlstate::UNDEFINED_OBJECT,
                        format!("constraint \"{n}\" for table \"{table_name}\" does not exist"),
                    ));
                }
            }
            None if matches!(on.action, ast::OnConflictAction::DoUpdate(_)) => {
                return Err(WeirError::syntax(
                    "ON CONFLICT DO UPDATE requires inference specification or constraint name",
                ));
            }
            None => {}
        }
        let proposed = concat_batches(&schema, &proposed)?;
        let keys: Vec<ArrayRef> = pk.iter().map(|&i| proposed.column(i).clone()).collect();
        let (stored, at) = table
            .lookup_each(&keys)?
            .ok_or_else(no_matching_constraint)?;
        // keys proposed more than once in this statement
        let conv = RowConverter::new(
            keys.iter()
                .map(|k| SortField::new(k.data_type().clone()))
                .collect(),
        )?;
        let rows = conv.convert_columns(&keys)?;
        let mut first: HashMap<&[u8], usize> = HashMap::new();
        let mut repeated = vec![false; proposed.num_rows()];
        for (i, r) in rows.iter().enumerate() {
            if first.insert(r.data(), i).is_some() {
                repeated[i] = true;
            }
        }
        let (insert_idx, conflict_idx): (Vec<u32>, Vec<u32>) = {
            let mut ins = Vec::new();
            let mut conf = Vec::new();
            for i in 0..proposed.num_rows() {
                match (at[i], repeated[i]) {
                    (None, false) => ins.push(i as u32),
                    _ => conf.push(i as u32),
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
        let written = match &on.action {
            ast::OnConflictAction::DoNothing => inserted,
            ast::OnConflictAction::DoUpdate(up) => {
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
                    self.updated_rows(session, table_name, alias, up, &old, &excluded)?;
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
                let all = concat_batches(&schema, &[inserted, updated])?;
                let perm: Vec<u32> = order.into_iter().map(|(_, at)| at).collect();
                pick(&all, &perm)?
            }
        };
        let order = (0..written.num_rows() as u32).map(|i| (false, i)).collect();
        let key_fields: Vec<_> = pk.iter().map(|&i| schema.field(i).clone()).collect();
        let deletes = RecordBatch::new_empty(Arc::new(Schema::new(key_fields)));
        Ok((
            Change::Upsert {
                upserts: written.clone(),
                deletes,
                order,
            },
            written,
        ))
    }

    /// DO UPDATE: the stored rows with the SET expressions applied, where WHERE holds.
    fn updated_rows(
        &self,
        session: &Session,
        table_name: &str,
        alias: Option<String>,
        up: &ast::DoUpdate,
        old: &RecordBatch,
        excluded: &RecordBatch,
    ) -> Result<(RecordBatch, Vec<bool>)> {
        let schema = old.schema();
        let target = alias.unwrap_or_else(|| table_name.to_owned());
        let both = DFSchema::try_from_qualified_schema(target.as_str(), &schema)?
            .join(&DFSchema::try_from_qualified_schema("excluded", &schema)?)?;
        let mut cols: Vec<ArrayRef> = old.columns().to_vec();
        cols.extend(excluded.columns().iter().cloned());
        let input = RecordBatch::try_new(Arc::new(both.as_arrow().clone()), cols)?;
        let eval = |text: String| -> Result<ArrayRef> {
            let e = session.ctx.parse_sql_expr(&text, &both)?;
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
