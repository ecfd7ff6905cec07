//! `ALTER SEQUENCE [IF EXISTS] name` with `INCREMENT [BY] n`, `MINVALUE n | NO MINVALUE`,
//! `MAXVALUE n | NO MAXVALUE`, `START [WITH] n`, `RESTART [[WITH] n]`, `[NO] CYCLE`,
//! `CACHE n` (accepted, values are reserved 32 at a time regardless), `AS type` and
//! `OWNED BY table.column | NONE` — and `OWNED BY` at CREATE SEQUENCE; `ALTER TABLE t
//! ALTER COLUMN c ADD GENERATED { ALWAYS | BY DEFAULT } AS IDENTITY [(options)]`, which
//! makes an existing column an identity column as CREATE TABLE would have.
//!
//! The options are the sequence's catalog entry; the counter (`catalog::sequences`) keeps
//! the last value handed out: `nextval` after an ALTER continues from it with the new
//! increment, as in Postgres, unless RESTART sets the next value. A sequence OWNED BY a
//! table is dropped with it (the table's `weir.owned_sequence` option, which `serial` and
//! identity columns set too); pg_dump restores `serial` columns this way.

use crate::catalog::RelationKind;
use crate::catalog::sequences::SequenceSpec;
use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::{AddIdentity, AlterIdentity, AlterSequence};
use crate::sql::types::SqlType;

impl Engine {
    pub(crate) fn alter_sequence(
        &self,
        a: &AlterSequence,
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        let done = Ok(Output::Command("ALTER SEQUENCE".into()));
        let Some(entry) = self.catalog.get(&a.name) else {
            return crate::engine::missing_relation(
                &a.name,
                a.if_exists,
                notices,
                "ALTER SEQUENCE",
            );
        };
        if entry.desc.kind != RelationKind::Sequence {
            return Err(WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("\"{}\" is not a sequence", a.name),
            ));
        }
        let o = &a.options;
        let old = SequenceSpec::from_options(&entry.desc.options);
        let increment = o.increment.unwrap_or(old.increment);
        let ascending = increment > 0;
        let (min, max) = o.bounds(ascending);
        // a bound not written keeps its value, unless NO ... asks for the default, or the
        // direction changed (the old default bound of the other direction means nothing)
        let flipped = (old.increment > 0) != ascending;
        let keep = |written: Option<i64>, no: bool, old: i64| match (written, no) {
            (Some(v), _) => Some(v),
            (None, true) => None,
            (None, false) if flipped => None,
            (None, false) => Some(old),
        };
        let min = keep(min, o.no_min, old.min);
        let max = keep(max, o.no_max, old.max);
        let cycle = if o.cycle {
            true
        } else if o.no_cycle {
            false
        } else {
            old.cycle
        };
        let spec = SequenceSpec::new(
            Some(o.start.unwrap_or(old.start)),
            Some(increment),
            min,
            max,
            cycle,
        )?;
        let restart = o.restart.map(|r| r.unwrap_or(spec.start));
        if let Some(r) = restart {
            if r < spec.min {
                return Err(WeirError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!(
                        "RESTART value ({r}) cannot be less than MINVALUE ({})",
                        spec.min
                    ),
                ));
            }
            if r > spec.max {
                return Err(WeirError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    format!(
                        "RESTART value ({r}) cannot be greater than MAXVALUE ({})",
                        spec.max
                    ),
                ));
            }
        }
        if let Some(owned_by) = &o.owned_by {
            self.check_owned_by(owned_by.as_ref())?;
        }
        if spec != old {
            self.catalog.alter_sequence(&a.name, old, spec)?;
        }
        if let Some(r) = restart {
            self.catalog.setval(entry.desc.oid, r, false)?;
        }
        if let Some(owned_by) = &o.owned_by {
            self.sequence_owned_by(&a.name, owned_by.as_ref())?;
        }
        done
    }

    /// A column becomes an identity column: its own sequence (named as given, or
    /// `<table>_<column>_seq`, bounded by the column's type), owned by the table, whose
    /// nextval is the column's default; ALWAYS refuses values an INSERT gives it.
    pub(crate) fn add_identity(
        &self,
        session: &Session,
        a: &AddIdentity,
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        let done = Ok(Output::Command("ALTER TABLE".into()));
        let Some(entry) = self.catalog.get(&a.table) else {
            return crate::engine::missing_relation(&a.table, a.if_exists, notices, "ALTER TABLE");
        };
        let (table, col) = (&a.table, &a.column);
        let c = identity_column(&entry, table, col)?;
        let (lo, hi) = match c.ty {
            SqlType::Int2 => (i16::MIN as i64, i16::MAX as i64),
            SqlType::Int4 => (i32::MIN as i64, i32::MAX as i64),
            SqlType::Int8 => (i64::MIN, i64::MAX),
            _ => {
                return Err(WeirError::new(
                    sqlstate::INVALID_PARAMETER_VALUE,
                    "identity column type must be smallint, integer, or bigint",
                ));
            }
        };
        let owned: Vec<&String> = entry
            .desc
            .options
            .iter()
            .filter(|(k, _)| k == "weir.owned_sequence")
            .map(|(_, v)| v)
            .collect();
        let is_identity = entry.desc.defaults.iter().any(|(d, text)| {
            d == col
                && owned.iter().any(|s| {
                    crate::catalog::sequences::sequence_of_default(text).as_ref() == Some(s)
                })
        });
        if is_identity || entry.desc.identity(col).is_some() {
            return Err(WeirError::new(
                "55000",
                format!("column \"{col}\" of relation \"{table}\" is already an identity column"),
            ));
        }
        if entry.desc.defaults.iter().any(|(d, _)| d == col) {
            return Err(WeirError::new(
                "55000",
                format!("column \"{col}\" of relation \"{table}\" already has a default value"),
            ));
        }
        if c.nullable {
            return Err(WeirError::new(
                "55000",
                format!(
                    "column \"{col}\" of relation \"{table}\" must be declared NOT NULL before identity can be added"
                ),
            ));
        }
        let o = &a.options;
        let seq = match &o.sequence_name {
            Some(n) => n.clone(),
            None => crate::sql::parser::free_name(&format!("{table}_{col}_seq"), |n| {
                self.catalog.name_in_use(n)
            }),
        };
        let ascending = o.increment.unwrap_or(1) > 0;
        let (min, max) = o.bounds(ascending);
        let (min, max) = match ascending {
            true => (min, max.or(Some(hi))),
            false => (min.or(Some(lo)), max),
        };
        let spec = SequenceSpec::new(o.start, o.increment, min, max, o.cycle)?;
        let text = format!("CREATE SEQUENCE {}", crate::sql::pg_text::quote_ident(&seq));
        self.create_sequence(&seq, false, spec, &text, session.role())?;
        self.catalog.alter_relation(table, |d| {
            d.defaults.push((
                col.clone(),
                crate::catalog::sequences::nextval_default(&seq),
            ));
            d.options.push(("weir.owned_sequence".into(), seq.clone()));
            let kind = match a.always {
                true => "weir.identity_always",
                false => "weir.identity_by_default",
            };
            d.options.push((kind.into(), col.clone()));
            Ok(())
        })?;
        done
    }

    /// `ALTER TABLE t ALTER COLUMN c SET GENERATED ... | SET option | RESTART ... | DROP
    /// IDENTITY`: an identity column's kind, its sequence's options, or the identity itself
    /// (its default and its sequence go; the column stays).
    pub(crate) fn alter_identity(
        &self,
        a: &AlterIdentity,
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        let done = Ok(Output::Command("ALTER TABLE".into()));
        let Some(entry) = self.catalog.get(&a.table) else {
            return crate::engine::missing_relation(&a.table, a.if_exists, notices, "ALTER TABLE");
        };
        let (table, col) = (&a.table, &a.column);
        identity_column(&entry, table, col)?;
        let not_identity =
            format!("column \"{col}\" of relation \"{table}\" is not an identity column");
        let Some(kind) = entry.desc.identity(col) else {
            if a.drop == Some(true) {
                if let Some(n) = notices {
                    let _ = n.send(format!("{not_identity}, skipping"));
                }
                return done;
            }
            return Err(WeirError::new("55000", not_identity));
        };
        // its sequence: the one its default takes the next value of
        let seq = entry.desc.defaults.iter().find_map(|(d, text)| {
            (d == col)
                .then(|| crate::catalog::sequences::sequence_of_default(text))
                .flatten()
        });
        let Some(seq) = seq else {
            return Err(WeirError::internal(format!(
                "identity column {table}.{col} without its sequence"
            )));
        };
        let kinds = ["weir.identity_always", "weir.identity_by_default"];
        if a.drop.is_some() {
            self.catalog.alter_relation(table, |d| {
                d.defaults.retain(|(c, _)| c != col);
                d.options.retain(|(k, v)| {
                    !(kinds.contains(&k.as_str()) && v == col
                        || k == "weir.owned_sequence" && *v == seq)
                });
                Ok(())
            })?;
            if let Some(s) = self.catalog.get(&seq)
                && s.desc.kind == RelationKind::Sequence
            {
                self.catalog.drop_relation(&seq)?;
                self.catalog.drop_sequence_state(s.desc.oid)?;
            }
            return done;
        }
        if let Some(always) = a.generated
            && always != (kind == 'a')
        {
            self.catalog.alter_relation(table, |d| {
                d.options
                    .retain(|(k, v)| !(kinds.contains(&k.as_str()) && v == col));
                d.options
                    .push((kinds[usize::from(!always)].into(), col.clone()));
                Ok(())
            })?;
        }
        if a.options != crate::sql::parser::SeqOptions::default() {
            self.alter_sequence(
                &AlterSequence {
                    name: seq,
                    if_exists: false,
                    options: a.options.clone(),
                },
                notices,
            )?;
        }
        done
    }

    /// `OWNED BY table.column` names a table of ours and one of its columns.
    fn check_owned_by(&self, owned_by: Option<&(String, String)>) -> Result<()> {
        let Some((table, column)) = owned_by else {
            return Ok(());
        };
        let t = self
            .catalog
            .get(table)
            .ok_or_else(|| WeirError::undefined_table(table))?;
        if !t.desc.kind.is_table() {
            return Err(WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("sequence cannot be owned by relation \"{table}\""),
            )
            .with_detail(format!(
                "This operation is not supported for {}s.",
                t.desc.kind.noun()
            )));
        }
        if !t.desc.columns.iter().any(|c| c.name == *column) {
            return Err(WeirError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!("column \"{column}\" of relation \"{table}\" does not exist"),
            ));
        }
        Ok(())
    }

    /// Makes sequence `seq` owned by `owned_by`'s table (dropped with it), or by none.
    pub(crate) fn sequence_owned_by(
        &self,
        seq: &str,
        owned_by: Option<&(String, String)>,
    ) -> Result<()> {
        self.check_owned_by(owned_by)?;
        let owners: Vec<String> = self
            .catalog
            .entries()
            .into_iter()
            .filter(|e| {
                e.desc
                    .options
                    .iter()
                    .any(|(k, v)| k == "weir.owned_sequence" && v == seq)
            })
            .map(|e| e.desc.name.clone())
            .collect();
        for t in owners {
            if owned_by.is_some_and(|(o, _)| *o == t) {
                return Ok(());
            }
            self.catalog.alter_relation(&t, |d| {
                d.options
                    .retain(|(k, v)| !(k == "weir.owned_sequence" && v == seq));
                Ok(())
            })?;
        }
        if let Some((table, _)) = owned_by {
            self.catalog.alter_relation(table, |d| {
                d.options
                    .push(("weir.owned_sequence".into(), seq.to_owned()));
                Ok(())
            })?;
        }
        Ok(())
    }
}

/// The column an identity ALTER names: 42809 where the relation is no table, 42703 where
/// it has no such column.
fn identity_column<'e>(
    entry: &'e crate::catalog::Entry,
    table: &str,
    col: &str,
) -> Result<&'e crate::catalog::ColumnDesc> {
    if !entry.desc.kind.is_table() {
        return Err(WeirError::new(
            sqlstate::WRONG_OBJECT_TYPE,
            format!("\"{table}\" is not a table"),
        ));
    }
    entry
        .desc
        .columns
        .iter()
        .find(|c| c.name == col)
        .ok_or_else(|| {
            WeirError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!("column \"{col}\" of relation \"{table}\" does not exist"),
            )
        })
}
