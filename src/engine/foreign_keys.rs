//! FOREIGN KEY constraints (`REFERENCES p [(cols)]` on a column, `FOREIGN KEY (cols)
//! REFERENCES p [(cols)] [MATCH FULL|SIMPLE] [ON DELETE a] [ON UPDATE a]` on a table, or
//! added by `ALTER TABLE ... ADD`) [DEFERRABLE [INITIALLY DEFERRED]], as Postgres keeps
//! them, each statement checked as it ends — but a DEFERRABLE key in a transaction block
//! while deferred (INITIALLY DEFERRED, or SET CONSTRAINTS ... DEFERRED): its checks (the
//! rows written find their keys; NO ACTION keys removed are not referenced) are recorded
//! and made at COMMIT (or SET CONSTRAINTS ... IMMEDIATE) as `VALIDATE CONSTRAINT` makes
//! them, over the whole referencing table; a failure there rolls the block back:
//!
//! - Declared: the referenced columns are the referenced table's primary key or the columns
//!   of one of its unique indexes (42830 otherwise), of comparable types (42804); the
//!   referenced relation is a table (42809) that no connector feeds (its rows change without
//!   a statement that could be refused). Kept in the referencing table's
//!   `RelationDesc::foreign_keys`, the referenced table by name.
//! - A row an INSERT, UPDATE or COPY writes whose key columns are all non-NULL (MATCH
//!   SIMPLE; MATCH FULL also refuses a mix of NULL and non-NULL) must find its key in the
//!   referenced table (or, referencing its own table, among the rows written with it):
//!   23503 "insert or update on table ... violates foreign key constraint".
//! - A DELETE or key-changing UPDATE of a referenced table whose removed keys are still
//!   referenced: NO ACTION / RESTRICT refuse it (23503 "... is still referenced from table
//!   ..."); CASCADE deletes the referencing rows (or, ON UPDATE, gives them the new key);
//!   SET NULL sets their key columns to NULL. These effects are changes of the referencing
//!   tables, found (transitively) before anything is written and applied with the
//!   statement's change under those tables' writer locks; a failure while applying them
//!   undoes what was applied.
//!
//! Referenced keys are looked up by the referenced table's primary key or a unique index;
//! referencing rows by the referencing table's primary key, an index whose leading
//! columns are the key columns, or else a scan of that table (as Postgres without an index
//! on the referencing columns). Sessions are not serialized by row locks as in Postgres:
//! instead each change is checked again once applied ([`Engine::recheck_foreign_keys`])
//! and undone when a racing session's change broke it, so of two racing statements at
//! least one fails (23503) and no reference is left dangling.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, new_null_array};
use datafusion::arrow::compute::{CastOptions, cast_with_options, filter_record_batch, take};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, Rows, SortField};

use crate::catalog::{FkAction, ForeignKeyDesc, RelationDesc, RelationKind};
use crate::engine::{Engine, lock_writer};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::ForeignKeySpec;
use crate::sql::types::SqlType;
use crate::state::table::{Change, TableStore};

const FOREIGN_KEY_VIOLATION: &str = "23503";
const INVALID_FOREIGN_KEY: &str = "42830";
/// How many referencing tables one statement's cascades may reach, counting repeats.
const MAX_CASCADE_STEPS: usize = 256;

/// A table's columns and keys, as a foreign key declared on or against it sees them (the
/// table being created has no catalog entry yet).
pub(crate) struct KeyShape {
    pub name: String,
    pub columns: Vec<(String, SqlType)>,
    pub primary_key: Vec<String>,
    /// Column sets of its unique indexes.
    pub uniques: Vec<Vec<String>>,
}

impl KeyShape {
    pub(crate) fn of(desc: &RelationDesc) -> KeyShape {
        KeyShape {
            name: desc.name.clone(),
            columns: desc
                .columns
                .iter()
                .map(|c| (c.name.clone(), c.ty.clone()))
                .collect(),
            primary_key: desc.primary_key.clone(),
            uniques: desc
                .indexes
                .iter()
                .filter(|i| i.unique && !i.derived())
                .map(|i| i.columns.clone())
                .collect(),
        }
    }

    fn column_type(&self, c: &str) -> Option<&SqlType> {
        self.columns.iter().find(|(n, _)| n == c).map(|(_, t)| t)
    }
}

/// A change of a referencing table that a statement's change makes (CASCADE, SET NULL),
/// applied with it.
pub(crate) struct Effect {
    pub table: Arc<TableStore>,
    pub change: Change,
    /// Applied after the statement's change (it changes rows that change writes), else
    /// before.
    pub after: bool,
    /// The table's writer lock, unless the statement's own table (already held).
    pub _writer: Option<crate::engine::table_locks::WriterLock>,
}

/// What a removed key does to the rows of one referencing table.
struct Step {
    /// The referencing rows there were.
    found: Vec<RecordBatch>,
    /// None: they are deleted; else their new versions.
    found_new: Option<Vec<RecordBatch>>,
    /// Rows the statement itself writes (referencing its own table) that reference a key
    /// it removes: (as written, as they become).
    after: Option<(Vec<RecordBatch>, Vec<RecordBatch>)>,
}

/// Whether values of the two types compare as equal (an equality operator between them in
/// Postgres' terms): the same type, two numbers, two strings or two date/times.
fn comparable(a: &SqlType, b: &SqlType) -> bool {
    use SqlType as T;
    let class = |t: &SqlType| match t {
        T::Int2 | T::Int4 | T::Int8 | T::Float4 | T::Float8 | T::Numeric(_) => 1,
        T::Text | T::Varchar(_) | T::Name => 2,
        T::Date | T::Timestamp(_) | T::TimestampTz(_) => 3,
        _ => 0,
    };
    a.display_name() == b.display_name() || (class(a) != 0 && class(a) == class(b))
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

impl Engine {
    /// A foreign key as declared on table `me`, checked and named (the given name, else
    /// Postgres' `t_a_b_fkey`, numbered while `taken`).
    pub(crate) fn resolve_foreign_key(
        &self,
        me: &KeyShape,
        spec: &ForeignKeySpec,
        taken: impl Fn(&str) -> bool,
    ) -> Result<ForeignKeyDesc> {
        let entry;
        let parent: KeyShape = if spec.ref_table == me.name {
            KeyShape {
                name: me.name.clone(),
                columns: me.columns.clone(),
                primary_key: me.primary_key.clone(),
                uniques: me.uniques.clone(),
            }
        } else {
            entry = self
                .catalog
                .get(&spec.ref_table)
                .ok_or_else(|| WeirError::undefined_table(&spec.ref_table))?;
            if !matches!(
                entry.desc.kind,
                RelationKind::Table | RelationKind::AppendOnlyTable
            ) {
                return Err(WeirError::new(
                    sqlstate::WRONG_OBJECT_TYPE,
                    format!("referenced relation \"{}\" is not a table", spec.ref_table),
                ));
            }
            if entry.desc.options.iter().any(|(k, _)| k == "connector") {
                return Err(WeirError::not_supported(format!(
                    "table \"{}\" is fed by a connector: it cannot be referenced by a foreign key",
                    spec.ref_table
                )));
            }
            KeyShape::of(&entry.desc)
        };
        for c in &spec.columns {
            if me.column_type(c).is_none() {
                return Err(WeirError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!("column \"{c}\" referenced in foreign key constraint does not exist"),
                ));
            }
        }
        let ref_columns = if spec.ref_columns.is_empty() {
            if parent.primary_key.is_empty() {
                return Err(WeirError::new(
                    sqlstate::UNDEFINED_OBJECT,
                    format!(
                        "there is no primary key for referenced table \"{}\"",
                        parent.name
                    ),
                ));
            }
            parent.primary_key.clone()
        } else {
            for c in &spec.ref_columns {
                if parent.column_type(c).is_none() {
                    return Err(WeirError::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!(
                            "column \"{c}\" referenced in foreign key constraint does not exist"
                        ),
                    ));
                }
            }
            spec.ref_columns.clone()
        };
        if ref_columns.len() != spec.columns.len() {
            return Err(WeirError::new(
                INVALID_FOREIGN_KEY,
                "number of referencing and referenced columns for foreign key disagree",
            ));
        }
        let keyed = same_set(&ref_columns, &parent.primary_key)
            || parent.uniques.iter().any(|u| same_set(u, &ref_columns));
        if !keyed {
            return Err(WeirError::new(
                INVALID_FOREIGN_KEY,
                format!(
                    "there is no unique constraint matching given keys for referenced table \"{}\"",
                    parent.name
                ),
            ));
        }
        let name = match &spec.name {
            Some(n) => n.clone(),
            None => crate::sql::parser::free_name(
                &format!(
                    "{}_{}_fkey",
                    crate::sql::parser::bare_relation_name(&me.name),
                    spec.columns.join("_")
                ),
                taken,
            ),
        };
        for (c, r) in spec.columns.iter().zip(&ref_columns) {
            let (Some(a), Some(b)) = (me.column_type(c), parent.column_type(r)) else {
                continue;
            };
            if !comparable(a, b) {
                return Err(WeirError::new(
                    sqlstate::DATATYPE_MISMATCH,
                    format!("foreign key constraint \"{name}\" cannot be implemented"),
                )
                .with_detail(format!(
                    "Key columns \"{c}\" and \"{r}\" are of incompatible types: {} and {}.",
                    a.display_name(),
                    b.display_name()
                )));
            }
        }
        Ok(ForeignKeyDesc {
            oid: self.catalog.reserve_oid(),
            name,
            columns: spec.columns.clone(),
            ref_table: parent.name.clone(),
            ref_columns,
            on_delete: spec.on_delete,
            on_update: spec.on_update,
            match_full: spec.match_full,
            deferrable: spec.deferrable,
            initially_deferred: spec.initially_deferred,
        })
    }

    /// Every foreign key of another table, or of `name` itself, that references `name`:
    /// (referencing table, constraint).
    pub(crate) fn foreign_keys_to(&self, name: &str) -> Vec<(RelationDesc, ForeignKeyDesc)> {
        self.catalog
            .entries()
            .iter()
            .flat_map(|e| {
                e.desc
                    .foreign_keys
                    .iter()
                    .filter(|fk| fk.ref_table == name)
                    .map(|fk| (e.desc.clone(), fk.clone()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The rows of `rows` (of table `desc`) that break `fk` for want of a referenced row,
    /// first one only: checked against the referenced table as it is, and, for a key of
    /// its own table, the rows written with them (`rows`).
    pub(crate) async fn check_references(
        &self,
        desc: &RelationDesc,
        fk: &ForeignKeyDesc,
        rows: &[RecordBatch],
    ) -> Result<()> {
        let parent = self
            .catalog
            .get(&fk.ref_table)
            .ok_or_else(|| WeirError::undefined_table(&fk.ref_table))?;
        let Some(ptable) = parent.table.clone() else {
            return Err(WeirError::internal("a referenced table without storage"));
        };
        let KeyColumns {
            pcols,
            ccols,
            ptypes: types,
            conv,
        } = KeyColumns::new(&parent.desc, desc, fk)?;
        for batch in rows {
            let n = batch.num_rows();
            if n == 0 {
                continue;
            }
            let own: Vec<ArrayRef> = ccols.iter().map(|&i| batch.column(i).clone()).collect();
            let nulls: Vec<usize> = (0..n)
                .map(|r| own.iter().filter(|a| a.is_null(r)).count())
                .collect();
            if fk.match_full && nulls.iter().any(|&k| k > 0 && k < own.len()) {
                return Err(WeirError::new(
                    FOREIGN_KEY_VIOLATION,
                    format!(
                        "insert or update on table \"{}\" violates foreign key constraint \"{}\"",
                        crate::sql::parser::bare_relation_name(&desc.name),
                        fk.name
                    ),
                )
                .with_detail("MATCH FULL does not allow mixing of null and nonnull key values."));
            }
            // each distinct key once
            let own_types: Vec<DataType> = own.iter().map(|a| a.data_type().clone()).collect();
            let own_keys = converter(&own_types)?.convert_columns(&own)?;
            let mut seen: HashSet<&[u8]> = HashSet::new();
            let checked: Vec<usize> = (0..n)
                .filter(|&r| nulls[r] == 0 && seen.insert(own_keys.row(r).data()))
                .collect();
            if checked.is_empty() {
                continue;
            }
            let idx = datafusion::arrow::array::UInt32Array::from(
                checked.iter().map(|&r| r as u32).collect::<Vec<_>>(),
            );
            let probe: Vec<ArrayRef> = own
                .iter()
                .zip(&types)
                .map(|(a, t)| cast_key(&take(a.as_ref(), &idx, None)?, t))
                .collect::<Result<_>>()?;
            let found = {
                let t = ptable.clone();
                let (p, k) = (pcols.clone(), probe.clone());
                tokio::task::spawn_blocking(move || rows_matching(&t, &p, &k))
                    .await
                    .map_err(|e| WeirError::internal(e.to_string()))??
            };
            let mut present: HashSet<Vec<u8>> = HashSet::new();
            for b in &found {
                let cols: Vec<ArrayRef> = columns_at(b, &pcols);
                add_rows(&mut present, &conv.convert_columns(&cols)?);
            }
            if fk.ref_table == desc.name {
                // referencing its own table: the rows written together count
                for b in rows {
                    let cols: Vec<ArrayRef> = columns_at(b, &pcols);
                    add_rows(&mut present, &conv.convert_columns(&cols)?);
                }
            }
            let keys = conv.convert_columns(&probe)?;
            for (j, &r) in checked.iter().enumerate() {
                let missing =
                    probe.iter().any(|a| a.is_null(j)) || !present.contains(keys.row(j).as_ref());
                if missing {
                    return Err(WeirError::new(
                        FOREIGN_KEY_VIOLATION,
                        format!(
                            "insert or update on table \"{}\" violates foreign key constraint \"{}\"",
                            crate::sql::parser::bare_relation_name(&desc.name),
                            fk.name
                        ),
                    )
                    .with_detail(format!(
                        "Key ({})=({}) is not present in table \"{}\".",
                        fk.columns.join(", "),
                        key_text(&own, r),
                        crate::sql::parser::bare_relation_name(&fk.ref_table)
                    )));
                }
            }
        }
        Ok(())
    }

    /// What a change of table `desc` (whose writer lock the caller holds) does through
    /// foreign keys: its written rows checked against the tables they reference, and the
    /// keys it removes followed into the tables that reference them — refused (NO ACTION,
    /// RESTRICT) or changed there (CASCADE, SET NULL), transitively. Returns those changes,
    /// to apply with it; nothing is written here.
    pub(crate) async fn foreign_key_effects(
        &self,
        session: &Session,
        desc: &RelationDesc,
        change: &Change,
    ) -> Result<Vec<Effect>> {
        // the rows it writes reference existing rows
        if !desc.foreign_keys.is_empty() {
            let written: Vec<RecordBatch> = match change {
                Change::Insert(b) => b.clone(),
                Change::Update { old, new } => changed_rows(desc, old, new)?,
                // INSERT ... ON CONFLICT: the rows it sets
                Change::Upsert { upserts, .. } => vec![upserts.clone()],
                _ => vec![],
            };
            if written.iter().any(|b| b.num_rows() > 0) {
                for fk in &desc.foreign_keys {
                    if session.fk_deferred(fk) {
                        session.defer_check(&desc.name, &fk.name);
                        continue;
                    }
                    self.check_references(desc, fk, &written).await?;
                }
            }
        }
        let mut effects: Vec<Effect> = Vec::new();
        let mut locked: HashSet<u32> = HashSet::from([desc.oid]);
        // rows each table loses in this statement: not counted as referencing
        let mut gone: HashMap<u32, Vec<RecordBatch>> = HashMap::new();
        // (table, old rows, new rows: None for a delete)
        let mut queue: Vec<(RelationDesc, Vec<RecordBatch>, Option<Vec<RecordBatch>>)> =
            match change {
                Change::Delete(old) => vec![(desc.clone(), old.clone(), None)],
                Change::Update { old, new } => {
                    vec![(desc.clone(), old.clone(), Some(new.clone()))]
                }
                _ => vec![],
            };
        let mut steps = 0;
        while let Some((pdesc, old, new)) = queue.pop() {
            let referencing = self.foreign_keys_to(&pdesc.name);
            if referencing.is_empty() || old.iter().all(|b| b.num_rows() == 0) {
                continue;
            }
            gone.entry(pdesc.oid)
                .or_default()
                .extend(old.iter().cloned());
            for (cdesc, fk) in referencing {
                steps += 1;
                if steps > MAX_CASCADE_STEPS {
                    return Err(WeirError::new(
                        sqlstate::STATEMENT_TOO_COMPLEX,
                        format!(
                            "the statement's foreign key actions reach more than {MAX_CASCADE_STEPS} tables"
                        ),
                    ));
                }
                // NO ACTION of a deferred key: the referencing rows are looked at by COMMIT
                let action = if new.is_some() {
                    fk.on_update
                } else {
                    fk.on_delete
                };
                if action == FkAction::NoAction && session.fk_deferred(&fk) {
                    session.defer_check(&cdesc.name, &fk.name);
                    continue;
                }
                let Some(step) = self
                    .referencing_rows(&pdesc, &cdesc, &fk, &old, new.as_deref(), &gone)
                    .await?
                else {
                    continue;
                };
                let Some(centry) = self.catalog.get(&cdesc.name) else {
                    continue;
                };
                let Some(ctable) = centry.table.clone() else {
                    continue;
                };
                let writer = if locked.insert(cdesc.oid) {
                    lock_writer(session, &ctable).await?
                } else {
                    None
                };
                let Step {
                    found: rows,
                    found_new: new_rows,
                    after,
                } = step;
                super::checks::enforce(
                    &session.ctx,
                    &self.catalog,
                    &cdesc,
                    &new_rows
                        .iter()
                        .flatten()
                        .chain(after.iter().flat_map(|(_, n)| n))
                        .collect::<Vec<_>>(),
                )?;
                if let Some((old, new)) = after {
                    queue.push((cdesc.clone(), old.clone(), Some(new.clone())));
                    effects.push(Effect {
                        table: ctable.clone(),
                        change: Change::Update { old, new },
                        after: true,
                        _writer: None,
                    });
                }
                if rows.is_empty() {
                    continue;
                }
                queue.push((cdesc.clone(), rows.clone(), new_rows.clone()));
                effects.push(Effect {
                    table: ctable,
                    change: match new_rows {
                        None => Change::Delete(rows),
                        Some(new) => Change::Update { old: rows, new },
                    },
                    after: false,
                    _writer: writer,
                });
            }
        }
        Ok(effects)
    }

    /// The rows of `cdesc` that `fk` makes reference keys a change of `pdesc` removes
    /// (`old` rows deleted, or changed into `new`), and what becomes of them: None when
    /// there are none. Refused when the action is NO ACTION or RESTRICT.
    async fn referencing_rows(
        &self,
        pdesc: &RelationDesc,
        cdesc: &RelationDesc,
        fk: &ForeignKeyDesc,
        old: &[RecordBatch],
        new: Option<&[RecordBatch]>,
        gone: &HashMap<u32, Vec<RecordBatch>>,
    ) -> Result<Option<Step>> {
        let pschema = pdesc.schema();
        let kc = KeyColumns::new(pdesc, cdesc, fk)?;
        let (pcols, ccols, conv) = (&kc.pcols, &kc.ccols, &kc.conv);
        // the keys the change removes: old rows' keys no new row has
        let mut kept: HashSet<Vec<u8>> = HashSet::new();
        for b in new.unwrap_or(&[]) {
            let cols: Vec<ArrayRef> = columns_at(b, pcols);
            add_rows(&mut kept, &conv.convert_columns(&cols)?);
        }
        // removed key -> (batch, row) of its new row, for ON UPDATE CASCADE
        let mut removed: HashMap<Vec<u8>, (usize, usize)> = HashMap::new();
        let mut removed_keys: Vec<Vec<ArrayRef>> = Vec::new();
        for (bi, b) in old.iter().enumerate() {
            let cols: Vec<ArrayRef> = columns_at(b, pcols);
            let rows = conv.convert_columns(&cols)?;
            let mut pick = Vec::new();
            for r in 0..b.num_rows() {
                let k = rows.row(r).as_ref().to_vec();
                if cols.iter().any(|c| c.is_null(r)) || kept.contains(&k) {
                    continue;
                }
                if let std::collections::hash_map::Entry::Vacant(v) = removed.entry(k) {
                    v.insert((bi, r));
                    pick.push(r as u32);
                }
            }
            if !pick.is_empty() {
                let idx = datafusion::arrow::array::UInt32Array::from(pick);
                removed_keys.push(
                    cols.iter()
                        .map(|c| Ok(take(c.as_ref(), &idx, None)?))
                        .collect::<Result<_>>()?,
                );
            }
        }
        if removed.is_empty() {
            return Ok(None);
        }
        let cschema = cdesc.schema();
        let ctypes: Vec<DataType> = ccols
            .iter()
            .map(|&i| cschema.field(i).data_type().clone())
            .collect();
        let Some(ctable) = self.catalog.get(&cdesc.name).and_then(|e| e.table.clone()) else {
            return Ok(None);
        };
        let mut found: Vec<RecordBatch> = Vec::new();
        for keys in removed_keys {
            let probe: Vec<ArrayRef> = keys
                .iter()
                .zip(&ctypes)
                .map(|(a, t)| cast_key(a, t))
                .collect::<Result<_>>()?;
            let t = ctable.clone();
            let c = ccols.clone();
            let rows = tokio::task::spawn_blocking(move || rows_matching(&t, &c, &probe))
                .await
                .map_err(|e| WeirError::internal(e.to_string()))??;
            found.extend(rows);
        }
        // rows this statement already removes from the referencing table do not count
        if let Some(g) = gone.get(&cdesc.oid) {
            found = without_rows(&cschema, found, g)?;
        }
        // referencing its own table: the changed rows' new versions count too
        let mut written_refs: Vec<RecordBatch> = Vec::new();
        if cdesc.oid == pdesc.oid
            && let Some(new) = new
        {
            for b in new {
                let (cols, keys) = kc.encode_child(b)?;
                let mask: BooleanArray = (0..b.num_rows())
                    .map(|r| {
                        Some(
                            cols.iter().all(|c| c.is_valid(r))
                                && removed.contains_key(keys.row(r).as_ref()),
                        )
                    })
                    .collect();
                written_refs.push(filter_record_batch(b, &mask)?);
            }
        }
        if found.iter().chain(&written_refs).all(|b| b.num_rows() == 0) {
            return Ok(None);
        }
        let action = if new.is_some() {
            fk.on_update
        } else {
            fk.on_delete
        };
        let refuse = |b: &RecordBatch, r: usize| {
            let cols: Vec<ArrayRef> = columns_at(b, ccols);
            still_referenced(&pdesc.name, fk, &cdesc.name, &cols, r)
        };
        if matches!(action, FkAction::NoAction | FkAction::Restrict) {
            let b = found
                .iter()
                .chain(&written_refs)
                .find(|b| b.num_rows() > 0)
                .ok_or_else(|| WeirError::internal("no referencing row"))?;
            return Err(refuse(b, 0));
        }
        let found: Vec<RecordBatch> = found.into_iter().filter(|b| b.num_rows() > 0).collect();
        let written_refs: Vec<RecordBatch> = written_refs
            .into_iter()
            .filter(|b| b.num_rows() > 0)
            .collect();
        // the new versions of referencing rows: SET NULL, or ON UPDATE CASCADE's new keys
        let transform = |rows: &[RecordBatch]| -> Result<Vec<RecordBatch>> {
            match (action, new) {
                (FkAction::SetNull, _) => rows
                    .iter()
                    .map(|b| {
                        let mut cols = b.columns().to_vec();
                        for &i in ccols {
                            cols[i] = new_null_array(cols[i].data_type(), b.num_rows());
                        }
                        if let Some(&i) = ccols.iter().find(|&&i| !cschema.field(i).is_nullable())
                        {
                            return Err(WeirError::new(
                                sqlstate::NOT_NULL_VIOLATION,
                                format!(
                                    "null value in column \"{}\" of relation \"{}\" violates not-null constraint",
                                    cschema.field(i).name(),
                                    cdesc.name
                                ),
                            )
                            .with_detail(format!("Failing row contains ({}).", key_text(&cols, 0))));
                        }
                        Ok(RecordBatch::try_new(b.schema(), cols)?)
                    })
                    .collect(),
                (FkAction::Cascade, Some(new)) => {
                    // each referencing row takes the new key of the row whose key it had
                    let all = datafusion::arrow::compute::concat_batches(&pschema, new)?;
                    let mut start = Vec::with_capacity(new.len());
                    let mut at = 0;
                    for b in new {
                        start.push(at);
                        at += b.num_rows();
                    }
                    let mut out = Vec::new();
                    for b in rows {
                        let (_, keys) = kc.encode_child(b)?;
                        let idx = (0..b.num_rows())
                            .map(|r| {
                                removed
                                    .get(keys.row(r).as_ref())
                                    .map(|&(bi, row)| (start[bi] + row) as u32)
                                    .ok_or_else(|| {
                                        WeirError::internal("a referencing row of no key")
                                    })
                            })
                            .collect::<Result<Vec<u32>>>()?;
                        let idx = datafusion::arrow::array::UInt32Array::from(idx);
                        let mut cols = b.columns().to_vec();
                        for (k, &ci) in ccols.iter().enumerate() {
                            let v = take(all.column(pcols[k]).as_ref(), &idx, None)?;
                            cols[ci] = cast_key(&v, cols[ci].data_type())?;
                        }
                        out.push(RecordBatch::try_new(b.schema(), cols)?);
                    }
                    Ok(out)
                }
                _ => Err(WeirError::internal("no new rows for this action")),
            }
        };
        let found_new = match (action, new) {
            (FkAction::Cascade, None) => None,
            _ => Some(transform(&found)?),
        };
        // referencing its own table: rows the statement writes that reference a key it
        // removes change after it is applied
        let after = match written_refs.is_empty() {
            true => None,
            false => Some((written_refs.clone(), transform(&written_refs)?)),
        };
        Ok(Some(Step {
            found,
            found_new,
            after,
        }))
    }
}

/// A foreign key's columns by position in the referenced (`pcols`) and referencing
/// (`ccols`) tables, the referenced ones' types, and a row encoder of keys of those types.
struct KeyColumns {
    pcols: Vec<usize>,
    ccols: Vec<usize>,
    ptypes: Vec<DataType>,
    conv: RowConverter,
}

impl KeyColumns {
    fn new(parent: &RelationDesc, child: &RelationDesc, fk: &ForeignKeyDesc) -> Result<KeyColumns> {
        let pschema = parent.schema();
        let pcols = positions(parent, &fk.ref_columns)?;
        let ptypes: Vec<DataType> = pcols
            .iter()
            .map(|&i| pschema.field(i).data_type().clone())
            .collect();
        Ok(KeyColumns {
            ccols: positions(child, &fk.columns)?,
            conv: converter(&ptypes)?,
            pcols,
            ptypes,
        })
    }

    /// A referencing row's key columns as the referenced columns' types, and their encoding
    /// (comparable with the referenced keys').
    fn encode_child(&self, b: &RecordBatch) -> Result<(Vec<ArrayRef>, Rows)> {
        let cols: Vec<ArrayRef> = self
            .ccols
            .iter()
            .zip(&self.ptypes)
            .map(|(&i, t)| cast_key(b.column(i), t))
            .collect::<Result<_>>()?;
        let keys = self.conv.convert_columns(&cols)?;
        Ok((cols, keys))
    }
}

/// The columns of a batch at these positions.
fn columns_at(b: &RecordBatch, at: &[usize]) -> Vec<ArrayRef> {
    at.iter().map(|&i| b.column(i).clone()).collect()
}

/// Positions of named columns in a relation.
fn positions(desc: &RelationDesc, names: &[String]) -> Result<Vec<usize>> {
    names
        .iter()
        .map(|n| {
            desc.columns
                .iter()
                .position(|c| &c.name == n)
                .ok_or_else(|| {
                    WeirError::internal(format!(
                        "foreign key column \"{n}\" is not in \"{}\"",
                        desc.name
                    ))
                })
        })
        .collect()
}

fn converter(types: &[DataType]) -> Result<RowConverter> {
    Ok(RowConverter::new(
        types.iter().map(|t| SortField::new(t.clone())).collect(),
    )?)
}

fn add_rows(set: &mut HashSet<Vec<u8>>, rows: &Rows) {
    for r in rows.iter() {
        set.insert(r.as_ref().to_vec());
    }
}

/// A key column as the other side's type (a value that does not fit becomes NULL: it
/// cannot equal anything there).
fn cast_key(a: &ArrayRef, t: &DataType) -> Result<ArrayRef> {
    if a.data_type() == t {
        return Ok(a.clone());
    }
    Ok(cast_with_options(
        a.as_ref(),
        t,
        &CastOptions {
            safe: true,
            ..Default::default()
        },
    )?)
}

/// A key's values as Postgres' error detail writes them: `1, abc`.
fn key_text(cols: &[ArrayRef], row: usize) -> String {
    crate::sql::pg_text::row_values_text(cols, row)
}

/// 23503 for a key a change removes that a row of `child` still references (`cols`: that
/// row's referencing columns, in `row` of them).
fn still_referenced(
    parent: &str,
    fk: &ForeignKeyDesc,
    child: &str,
    cols: &[ArrayRef],
    row: usize,
) -> WeirError {
    // (Postgres names the tables without their schemas)
    let parent = crate::sql::parser::bare_relation_name(parent);
    let child = crate::sql::parser::bare_relation_name(child);
    WeirError::new(
        FOREIGN_KEY_VIOLATION,
        format!(
            "update or delete on table \"{parent}\" violates foreign key constraint \"{}\" on table \"{child}\"",
            fk.name
        ),
    )
    .with_detail(format!(
        "Key ({})=({}) is still referenced from table \"{child}\".",
        fk.ref_columns.join(", "),
        key_text(cols, row),
    ))
}

/// The new rows of an UPDATE whose referencing columns changed (the others were checked
/// when written).
fn changed_rows(
    desc: &RelationDesc,
    old: &[RecordBatch],
    new: &[RecordBatch],
) -> Result<Vec<RecordBatch>> {
    let mut cols: Vec<usize> = Vec::new();
    for fk in &desc.foreign_keys {
        for p in positions(desc, &fk.columns)? {
            if !cols.contains(&p) {
                cols.push(p);
            }
        }
    }
    let schema = desc.schema();
    let types: Vec<DataType> = cols
        .iter()
        .map(|&i| schema.field(i).data_type().clone())
        .collect();
    let conv = converter(&types)?;
    let mut out = Vec::new();
    for (o, n) in old.iter().zip(new) {
        let oc: Vec<ArrayRef> = cols.iter().map(|&i| o.column(i).clone()).collect();
        let nc: Vec<ArrayRef> = cols.iter().map(|&i| n.column(i).clone()).collect();
        let (orows, nrows) = (conv.convert_columns(&oc)?, conv.convert_columns(&nc)?);
        let mask: BooleanArray = (0..n.num_rows().min(o.num_rows()))
            .map(|r| Some(orows.row(r) != nrows.row(r)))
            .collect();
        if n.num_rows() == o.num_rows() {
            out.push(filter_record_batch(n, &mask)?);
        } else {
            out.push(n.clone());
        }
    }
    Ok(out)
}

/// `rows` without the rows that equal one of `drop` (whole rows compared).
fn without_rows(
    schema: &SchemaRef,
    rows: Vec<RecordBatch>,
    drop: &[RecordBatch],
) -> Result<Vec<RecordBatch>> {
    let conv = converter(
        &schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect::<Vec<_>>(),
    )?;
    let mut gone = HashSet::new();
    for b in drop {
        add_rows(&mut gone, &conv.convert_columns(b.columns())?);
    }
    rows.into_iter()
        .map(|b| {
            let keys = conv.convert_columns(b.columns())?;
            let mask: BooleanArray = (0..b.num_rows())
                .map(|r| Some(!gone.contains(keys.row(r).as_ref())))
                .collect();
            Ok(filter_record_batch(&b, &mask)?)
        })
        .collect()
}

/// The rows of `table` whose columns `cols` equal a row of `keys` (one array per column,
/// of those columns' types, no NULLs): by the primary key or an index whose leading
/// columns are `cols` when there is one, else by a scan.
pub(crate) fn rows_matching(
    table: &Arc<TableStore>,
    cols: &[usize],
    keys: &[ArrayRef],
) -> Result<Vec<RecordBatch>> {
    if keys.first().is_none_or(|k| k.is_empty()) {
        return Ok(vec![]);
    }
    let reorder = |order: &[usize]| -> Option<Vec<ArrayRef>> {
        order
            .iter()
            .map(|p| cols.iter().position(|c| c == p).map(|j| keys[j].clone()))
            .collect()
    };
    if let Some(pk) = table.primary_key()
        && pk.len() == cols.len()
        && let Some(probe) = reorder(pk)
        && let Some(b) = table.lookup(&probe)?
    {
        return Ok(vec![b]);
    }
    for ix in table.indexes() {
        if ix.columns.len() >= cols.len()
            && let Some(probe) = reorder(&ix.columns[..cols.len()])
            && let Some(b) = table.index_lookup(ix.oid, &probe)?
        {
            return Ok(vec![b]);
        }
    }
    let types: Vec<DataType> = keys.iter().map(|k| k.data_type().clone()).collect();
    let conv = converter(&types)?;
    let mut wanted = HashSet::new();
    add_rows(&mut wanted, &conv.convert_columns(keys)?);
    let mut out = Vec::new();
    for b in table.scan()?.batches() {
        let b = b?;
        let c: Vec<ArrayRef> = columns_at(&b, cols);
        let rows = conv.convert_columns(&c)?;
        let mask: BooleanArray = (0..b.num_rows())
            .map(|r| Some(c.iter().all(|a| a.is_valid(r)) && wanted.contains(rows.row(r).as_ref())))
            .collect();
        let f = filter_record_batch(&b, &mask)?;
        if f.num_rows() > 0 {
            out.push(f);
        }
    }
    Ok(out)
}

impl Engine {
    /// A foreign key that needs the unique index `index` (over `columns`) of table `table`:
    /// it references those columns and no other primary key or unique index of the table
    /// covers them. (referencing table, constraint name).
    pub(crate) fn foreign_key_needing_index(
        &self,
        table: &RelationDesc,
        index: &str,
        columns: &[String],
    ) -> Option<(String, String)> {
        let others = table
            .all_indexes()
            .into_iter()
            .any(|i| i.unique && !i.derived() && i.name != index && same_set(&i.columns, columns));
        if others {
            return None;
        }
        self.foreign_keys_to(&table.name)
            .into_iter()
            .find(|(_, fk)| same_set(&fk.ref_columns, columns))
            .map(|(d, fk)| (d.name, fk.name))
    }

    /// The descriptions of the tables whose foreign keys reference table `old` (not itself),
    /// following it being renamed `new` and its columns renamed (`columns`: old -> new).
    pub(crate) fn foreign_keys_following(
        &self,
        old: &str,
        new: &str,
        columns: &[(String, String)],
    ) -> Vec<RelationDesc> {
        self.catalog
            .entries()
            .iter()
            .filter(|e| {
                e.desc.name != old && e.desc.foreign_keys.iter().any(|f| f.ref_table == old)
            })
            .map(|e| {
                let mut d = e.desc.clone();
                follow_referenced(&mut d.foreign_keys, old, new, columns);
                d
            })
            .collect()
    }

    /// Whether `ty`, a new type of column `col` of table `desc`, still compares with the
    /// columns foreign keys pair it with (42804 otherwise, as when they were declared).
    pub(crate) fn check_foreign_key_types(
        &self,
        desc: &RelationDesc,
        col: &str,
        ty: &SqlType,
    ) -> Result<()> {
        let type_of = |table: &str, c: &str| -> Option<SqlType> {
            if table == desc.name {
                return desc
                    .columns
                    .iter()
                    .find(|x| x.name == c)
                    .map(|x| x.ty.clone());
            }
            let e = self.catalog.get(table)?;
            e.desc
                .columns
                .iter()
                .find(|x| x.name == c)
                .map(|x| x.ty.clone())
        };
        let mut pairs: Vec<(String, String, Option<SqlType>)> = Vec::new();
        for fk in &desc.foreign_keys {
            for (c, r) in fk.columns.iter().zip(&fk.ref_columns) {
                if c == col {
                    pairs.push((fk.name.clone(), r.clone(), type_of(&fk.ref_table, r)));
                }
            }
        }
        for (child, fk) in self.foreign_keys_to(&desc.name) {
            for (c, r) in fk.columns.iter().zip(&fk.ref_columns) {
                if r == col && child.name != desc.name {
                    pairs.push((fk.name.clone(), c.clone(), type_of(&child.name, c)));
                }
            }
        }
        for (name, other, t) in pairs {
            if let Some(t) = t
                && !comparable(ty, &t)
            {
                return Err(WeirError::new(
                    sqlstate::DATATYPE_MISMATCH,
                    format!("foreign key constraint \"{name}\" cannot be implemented"),
                )
                .with_detail(format!(
                    "Key columns \"{col}\" and \"{other}\" are of incompatible types: {} and {}.",
                    ty.display_name(),
                    t.display_name()
                )));
            }
        }
        Ok(())
    }

    /// `ALTER TABLE t ADD [CONSTRAINT name] FOREIGN KEY ...`: declared as at CREATE TABLE
    /// and, unless NOT VALID, every row already there checked.
    pub(crate) async fn add_foreign_key(
        &self,
        session: &Session,
        table: &str,
        spec: &ForeignKeySpec,
        not_valid: bool,
        exists: impl Fn(&str) -> bool,
    ) -> Result<()> {
        let entry = self
            .catalog
            .get(table)
            .ok_or_else(|| WeirError::undefined_table(table))?;
        if let Some(n) = &spec.name
            && exists(n)
        {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_OBJECT,
                format!("constraint \"{n}\" for relation \"{table}\" already exists"),
            ));
        }
        let fk = self.resolve_foreign_key(&KeyShape::of(&entry.desc), spec, |n| {
            exists(n) || self.constraint_name_in_use(table, n)
        })?;
        if !not_valid {
            self.validate_foreign_key(session, &entry.desc, &fk).await?;
        }
        self.catalog.alter_relation(table, |d| {
            d.foreign_keys.push(fk.clone());
            if not_valid {
                d.not_valid.push(fk.name.clone());
            }
            Ok(())
        })?;
        Ok(())
    }

    /// The deferred foreign key checks of the block (all, or those SET CONSTRAINTS ...
    /// IMMEDIATE names): every row of each table they were deferred for finds its key now
    /// (23503 otherwise). Checked ones are no longer pending.
    pub(crate) async fn check_deferred(
        &self,
        session: &Session,
        only: Option<&[String]>,
    ) -> Result<()> {
        let pending = std::mem::take(&mut session.deferred.lock().pending);
        let mut left = Vec::new();
        let mut result = Ok(());
        for (table, name) in pending {
            let Some(entry) = self.catalog.get(&table) else {
                continue;
            };
            let Some(fk) = entry.desc.foreign_keys.iter().find(|f| f.name == name) else {
                continue;
            };
            if result.is_err() || only.is_some_and(|names| !names.contains(&fk.name)) {
                left.push((table, name));
                continue;
            }
            result = self.validate_foreign_key(session, &entry.desc, fk).await;
        }
        session.deferred.lock().pending.extend(left);
        result
    }

    /// `SET CONSTRAINTS { ALL | names } { DEFERRED | IMMEDIATE }`: for the rest of the
    /// transaction block (a WARNING outside one, as Postgres); IMMEDIATE makes the pending
    /// checks of those constraints now. Names are DEFERRABLE foreign keys (42704 unknown,
    /// 42809 DEFERRED of one that is not deferrable).
    pub(crate) async fn set_constraints(
        &self,
        session: &Session,
        names: Option<&[String]>,
        deferred: bool,
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<crate::engine::Output> {
        let done = Ok(crate::engine::Output::Command("SET CONSTRAINTS".into()));
        if !session.in_transaction
            && let Some(n) = notices
        {
            let _ =
                n.send("WARNING: SET CONSTRAINTS can only be used in transaction blocks".into());
        }
        if let Some(names) = names {
            let entries = self.catalog.entries();
            for n in names {
                let fk = entries
                    .iter()
                    .flat_map(|e| e.desc.foreign_keys.iter())
                    .find(|f| f.name == *n);
                // (a name as SQL wrote it: its schema's constraints)
                let known = fk.is_some()
                    || self.constraint_name_in_use(n, crate::sql::parser::bare_relation_name(n));
                match fk {
                    Some(f) if f.deferrable => {}
                    // only a DEFERRED of a constraint that cannot wait is refused
                    _ if known && !deferred => {}
                    _ if known => {
                        return Err(WeirError::new(
                            sqlstate::WRONG_OBJECT_TYPE,
                            format!("constraint \"{n}\" is not deferrable"),
                        ));
                    }
                    _ => {
                        return Err(WeirError::new(
                            sqlstate::UNDEFINED_OBJECT,
                            format!("constraint \"{n}\" does not exist"),
                        ));
                    }
                }
            }
        }
        if !session.in_transaction {
            return done;
        }
        {
            let mut d = session.deferred.lock();
            match names {
                None => {
                    d.all = Some(deferred);
                    d.named.clear();
                }
                Some(names) => {
                    for n in names {
                        d.named.insert(n.clone(), deferred);
                    }
                }
            }
        }
        if !deferred {
            self.check_deferred(session, names).await?;
        }
        done
    }

    /// Every row of table `desc` finds its key (ADD FOREIGN KEY, VALIDATE CONSTRAINT).
    pub(crate) async fn validate_foreign_key(
        &self,
        session: &Session,
        desc: &RelationDesc,
        fk: &ForeignKeyDesc,
    ) -> Result<()> {
        let store = self
            .catalog
            .get(&desc.name)
            .and_then(|e| e.table.clone())
            .ok_or_else(|| WeirError::internal("a table without storage"))?;
        let _writer = lock_writer(session, &store).await?;
        let rows: Vec<RecordBatch> = {
            let t = store.clone();
            tokio::task::spawn_blocking(move || t.scan()?.batches().collect::<Result<Vec<_>>>())
                .await
                .map_err(|e| WeirError::internal(e.to_string()))??
        };
        self.check_references(desc, fk, &rows).await
    }
}

/// Foreign keys that reference table `old` follow it being renamed `new` and its columns
/// renamed (`columns`: old -> new).
pub(crate) fn follow_referenced(
    fks: &mut [ForeignKeyDesc],
    old: &str,
    new: &str,
    columns: &[(String, String)],
) {
    for fk in fks.iter_mut().filter(|f| f.ref_table == old) {
        fk.ref_table = new.to_owned();
        for c in fk.ref_columns.iter_mut() {
            if let Some((_, n)) = columns.iter().find(|(o, _)| o == c) {
                *c = n.clone();
            }
        }
    }
}

/// What a change must still satisfy once applied: its written rows reference existing
/// keys, and the keys it removed are referenced by nothing (see
/// [`Engine::recheck_foreign_keys`]).
pub(crate) struct Recheck {
    written: Vec<RecordBatch>,
    removed: Vec<RecordBatch>,
}

impl Engine {
    /// The rows of `change` (to table `desc`) to check again once it is applied: None when
    /// the table neither has nor is referenced by a foreign key.
    pub(crate) fn foreign_key_recheck(
        &self,
        desc: &RelationDesc,
        change: &Change,
    ) -> Option<Recheck> {
        let written = match change {
            _ if desc.foreign_keys.is_empty() => vec![],
            Change::Insert(b) => b.clone(),
            Change::Update { old, new } => changed_rows(desc, old, new).unwrap_or_default(),
            Change::Upsert { upserts, .. } => vec![upserts.clone()],
            _ => vec![],
        };
        let referenced = || {
            self.catalog
                .entries()
                .iter()
                .any(|e| e.desc.foreign_keys.iter().any(|f| f.ref_table == desc.name))
        };
        let removed = match change {
            Change::Delete(old) | Change::Update { old, .. } if referenced() => old.clone(),
            _ => vec![],
        };
        (!written.is_empty() || !removed.is_empty()).then_some(Recheck { written, removed })
    }

    /// After a change of table `desc` is applied: its written rows still find their keys and
    /// the keys it removed are referenced by no row. Checked before writing too
    /// ([`Engine::foreign_key_effects`]); this second look, after the write, is what makes
    /// two sessions racing (one inserting a row that references a key, the other deleting
    /// that key) leave no dangling reference: whichever applies second sees the other's
    /// change and fails (the caller undoes its change).
    pub(crate) async fn recheck_foreign_keys(
        &self,
        session: &Session,
        desc: &RelationDesc,
        recheck: &Recheck,
    ) -> Result<()> {
        if recheck.written.iter().any(|b| b.num_rows() > 0) {
            for fk in &desc.foreign_keys {
                if session.fk_deferred(fk) {
                    continue;
                }
                self.check_references(desc, fk, &recheck.written).await?;
            }
        }
        if recheck.removed.iter().all(|b| b.num_rows() == 0) {
            return Ok(());
        }
        let Some(ptable) = self.catalog.get(&desc.name).and_then(|e| e.table.clone()) else {
            return Ok(());
        };
        for (cdesc, fk) in self.foreign_keys_to(&desc.name) {
            if session.fk_deferred(&fk) {
                continue;
            }
            let KeyColumns {
                pcols, ccols, conv, ..
            } = KeyColumns::new(desc, &cdesc, &fk)?;
            // the removed keys the table no longer has
            let mut keys: Vec<Vec<ArrayRef>> = Vec::new();
            for b in &recheck.removed {
                let cols: Vec<ArrayRef> = columns_at(b, &pcols);
                let valid: Vec<u32> = (0..b.num_rows())
                    .filter(|&r| cols.iter().all(|c| c.is_valid(r)))
                    .map(|r| r as u32)
                    .collect();
                if valid.is_empty() {
                    continue;
                }
                let idx = datafusion::arrow::array::UInt32Array::from(valid);
                keys.push(
                    cols.iter()
                        .map(|c| Ok(take(c.as_ref(), &idx, None)?))
                        .collect::<Result<_>>()?,
                );
            }
            let mut gone: Vec<Vec<ArrayRef>> = Vec::new();
            for k in keys {
                let (t, p, probe) = (ptable.clone(), pcols.clone(), k.clone());
                let still = tokio::task::spawn_blocking(move || rows_matching(&t, &p, &probe))
                    .await
                    .map_err(|e| WeirError::internal(e.to_string()))??;
                let mut present = HashSet::new();
                for b in &still {
                    let cols: Vec<ArrayRef> = columns_at(b, &pcols);
                    add_rows(&mut present, &conv.convert_columns(&cols)?);
                }
                let rows = conv.convert_columns(&k)?;
                let keep: Vec<u32> = (0..rows.num_rows())
                    .filter(|&r| !present.contains(rows.row(r).as_ref()))
                    .map(|r| r as u32)
                    .collect();
                if !keep.is_empty() {
                    let idx = datafusion::arrow::array::UInt32Array::from(keep);
                    gone.push(
                        k.iter()
                            .map(|c| Ok(take(c.as_ref(), &idx, None)?))
                            .collect::<Result<_>>()?,
                    );
                }
            }
            let Some(ctable) = self.catalog.get(&cdesc.name).and_then(|e| e.table.clone()) else {
                continue;
            };
            let cschema = cdesc.schema();
            for k in gone {
                let probe: Vec<ArrayRef> = k
                    .iter()
                    .zip(&ccols)
                    .map(|(a, &i)| cast_key(a, cschema.field(i).data_type()))
                    .collect::<Result<_>>()?;
                let (t, c) = (ctable.clone(), ccols.clone());
                let found = tokio::task::spawn_blocking(move || rows_matching(&t, &c, &probe))
                    .await
                    .map_err(|e| WeirError::internal(e.to_string()))??;
                if let Some(b) = found.iter().find(|b| b.num_rows() > 0) {
                    let cols: Vec<ArrayRef> = columns_at(b, &ccols);
                    return Err(still_referenced(&desc.name, &fk, &cdesc.name, &cols, 0));
                }
            }
        }
        Ok(())
    }
}
