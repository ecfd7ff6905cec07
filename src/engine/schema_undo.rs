//! Schema changes inside a transaction block are undone by `ROLLBACK` (and `ROLLBACK TO
//! SAVEPOINT`, and the failure of a multi-statement query), as in Postgres: `BEGIN; CREATE
//! TABLE t ...; ROLLBACK` leaves no `t`.
//!
//! Like the block's row changes (applied at once, undone by their inverse), a schema change
//! is applied when its statement runs; what undoes it is found by comparing the catalog
//! before and after the statement ([`SchemaMark`]) and kept in the session's undo log as
//! the statements that reverse it, run newest first:
//!
//! - a new relation, index, type, function or extension is dropped (`CREATE TABLE t` →
//!   `DROP TABLE t`; the indexes and sequences made with a new table go with it), an
//!   extension dropped is created again;
//! - a renamed relation or column is renamed back, a column added is dropped, a NOT NULL or
//!   a default set or dropped is put back, a constraint or index added is dropped and one
//!   dropped is made again from its definition, a plain view replaced or dropped gets its
//!   old query back;
//! - a table or sequence dropped is not dropped until the block commits: it is detached
//!   from the catalog (no statement sees it; its entry and rows stay stored) and brought
//!   back by the rollback (`Catalog::detach_relation`, [`Undo::Reattach`]); the commit
//!   finishes the drop (`Engine::commit_undo`). A crash before the commit finds it stored;
//! - a table whose rows the statement rewrote under a new OID (ADD or DROP COLUMN, a
//!   column's type changed, a primary key added or dropped) keeps its old rows stored
//!   until the block ends (`Catalog::replace_table` with `in_block`): the rollback puts
//!   the old table back whole, with the views and tables the rewrite changed beside it as
//!   they were, and rebuilds the materialized views over it ([`Undo::Unrewrite`]); the
//!   commit purges the old rows. A crash in between keeps the rewrite (a completed
//!   statement, as every statement of a block) and purges the old rows at the next open;
//! - what cannot be reversed from the catalog alone — a materialized view, source or
//!   connector table dropped, a materialized view redefined — stays applied; the ROLLBACK
//!   that passes it says so in a WARNING (docs/GUARANTEES.md).

use std::collections::HashSet;

use crate::catalog::{RelationDesc, RelationKind};
use crate::server::session::{Rewrite, Undo};
use crate::sql::pg_text::quote_ident;

use super::Engine;

/// The schema objects of the catalog at one moment.
pub(crate) struct SchemaMark {
    relations: Vec<RelationDesc>,
    types: HashSet<String>,
    functions: HashSet<String>,
    extensions: HashSet<String>,
    schemas: HashSet<String>,
}

/// The statement keyword of a relation kind (`DROP <kind> name`, `ALTER <kind> ...`).
fn keyword(kind: RelationKind) -> &'static str {
    match kind {
        RelationKind::Table | RelationKind::AppendOnlyTable => "TABLE",
        RelationKind::MaterializedView => "MATERIALIZED VIEW",
        RelationKind::Source => "SOURCE",
        RelationKind::Sink => "SINK",
        RelationKind::View => "VIEW",
        RelationKind::Sequence => "SEQUENCE",
    }
}

impl Engine {
    /// The catalog's schema objects now (taken before a schema change in a block).
    pub(crate) fn schema_mark(&self) -> SchemaMark {
        SchemaMark {
            relations: self
                .catalog
                .entries()
                .iter()
                .map(|e| e.desc.clone())
                .collect(),
            types: self
                .catalog
                .user_types()
                .into_iter()
                .map(|(n, _)| n)
                .collect(),
            functions: self.catalog.sql_function_names().into_iter().collect(),
            extensions: self
                .catalog
                .installed_extensions()
                .iter()
                .map(|a| a.name.to_owned())
                .collect(),
            schemas: self
                .catalog
                .user_schemas()
                .into_iter()
                .map(|s| s.name)
                .collect(),
        }
    }

    /// What undoes the schema changes made since `before`, in the order to run it (the
    /// inverse of the last change first).
    pub(crate) fn schema_undo(&self, before: &SchemaMark) -> Vec<Undo> {
        let after = self.schema_mark();
        let mut undo = Vec::new();
        let old_names: HashSet<&str> = before.relations.iter().map(|d| d.name.as_str()).collect();
        // the same relation before and after: by OID, or by name (ALTER TABLE may rewrite a
        // table under a new OID)
        let earlier = |d: &RelationDesc| {
            before
                .relations
                .iter()
                .find(|b| b.oid == d.oid && b.kind == d.kind)
                .or_else(|| {
                    before.relations.iter().find(|b| {
                        b.name == d.name
                            && b.kind == d.kind
                            && !after.relations.iter().any(|a| a.oid == b.oid)
                    })
                })
        };
        // tables the statement rewrote under a new OID with their old rows kept (in a
        // block): the rollback brings each back whole, with the relations the rewrite
        // changed beside it, as they were
        let mut covered: HashSet<u32> = HashSet::new();
        for d in &after.relations {
            let Some(b) = earlier(d) else { continue };
            if b.oid == d.oid || !self.catalog.is_rewritten(b.oid) {
                continue;
            }
            let others: Vec<RelationDesc> = before
                .relations
                .iter()
                .filter(|o| {
                    o.oid != b.oid && after.relations.iter().any(|a| a.oid == o.oid && a != *o)
                })
                .cloned()
                .collect();
            covered.insert(d.oid);
            covered.extend(others.iter().map(|o| o.oid));
            undo.push(Undo::Unrewrite(Box::new(Rewrite {
                old_oid: b.oid,
                new_oid: d.oid,
                others,
            })));
        }
        // a statement that renamed a relation changed the queries of the views reading it
        // only to follow it: its undo renames it back, and they follow again
        let renaming = after
            .relations
            .iter()
            .any(|d| earlier(d).is_some_and(|b| b.name != d.name));
        let mut new_relations: Vec<&RelationDesc> = Vec::new();
        for d in after.relations.iter().filter(|d| !covered.contains(&d.oid)) {
            match earlier(d) {
                None => new_relations.push(d),
                Some(b) => undo.extend(altered(b, d, renaming)),
            }
        }
        // new relations: newest first (what reads a relation was made after it), a new
        // table's own sequences last (DROP ... IF EXISTS: dropping the table may take them)
        new_relations.sort_by_key(|d| {
            let rank = match d.kind {
                RelationKind::Sequence => 1,
                _ => 0,
            };
            // (newest first: what reads a relation was made after it)
            (rank, std::cmp::Reverse(d.oid))
        });
        for d in new_relations {
            if old_names.contains(d.name.as_str()) {
                // (a relation of the same name and another kind replaced: not reversible)
                continue;
            }
            undo.push(Undo::Schema(format!(
                "DROP {} IF EXISTS {}",
                keyword(d.kind),
                quote_ident(&d.name)
            )));
        }
        // dropped relations: a plain view is made again from its query (the oldest first:
        // views over it were made after it); what holds rows or runs cannot be
        let mut dropped: Vec<&RelationDesc> = before
            .relations
            .iter()
            .filter(|b| {
                b.kind != RelationKind::Sink
                    && !after
                        .relations
                        .iter()
                        .any(|a| a.oid == b.oid || (a.name == b.name && a.kind == b.kind))
            })
            .collect();
        dropped.sort_by_key(|b| b.oid);
        for b in dropped {
            let name = quote_ident(&b.name);
            undo.push(match (&b.kind, &b.query) {
                (RelationKind::View, Some(q)) => {
                    let columns: Vec<String> =
                        b.columns.iter().map(|c| quote_ident(&c.name)).collect();
                    Undo::Schema(format!(
                        "CREATE VIEW {name} ({}) AS {q}",
                        columns.join(", ")
                    ))
                }
                _ if self.catalog.is_detached(b.oid) => Undo::Reattach(b.oid),
                _ => Undo::Irreversible(format!("DROP {} {name}", keyword(b.kind))),
            });
        }
        // types, functions and extensions: the new ones dropped, an extension dropped made
        // again
        let named = |made: Vec<&String>, gone: Vec<&String>, what: &str, remake: bool| {
            let mut out: Vec<Undo> = made
                .into_iter()
                .map(|n| Undo::Schema(format!("DROP {what} IF EXISTS {}", quote_ident(n))))
                .collect();
            if remake {
                out.extend(gone.into_iter().map(|n| {
                    Undo::Schema(format!("CREATE {what} IF NOT EXISTS {}", quote_ident(n)))
                }));
            }
            out
        };
        undo.extend(named(
            diff(&after.types, &before.types),
            vec![],
            "TYPE",
            false,
        ));
        undo.extend(named(
            diff(&after.functions, &before.functions),
            vec![],
            "FUNCTION",
            false,
        ));
        undo.extend(named(
            diff(&after.extensions, &before.extensions),
            diff(&before.extensions, &after.extensions),
            "EXTENSION",
            true,
        ));
        // a schema dropped is made again before its relations come back; one made is
        // dropped after them
        for s in diff(&before.schemas, &after.schemas) {
            undo.insert(
                0,
                Undo::Schema(format!("CREATE SCHEMA IF NOT EXISTS {}", quote_ident(s))),
            );
        }
        for s in diff(&after.schemas, &before.schemas) {
            undo.push(Undo::Schema(format!(
                "DROP SCHEMA IF EXISTS {} CASCADE",
                quote_ident(s)
            )));
        }
        // the log runs newest first: the statements above run in their order
        undo.reverse();
        undo
    }
}

/// The names in `a` and not in `b`.
fn diff<'a>(a: &'a HashSet<String>, b: &'a HashSet<String>) -> Vec<&'a String> {
    a.difference(b).collect()
}

/// What undoes the changes to one relation (`b` before, `a` after), in the order to run it
/// (the statements name it as it is after). `renaming`: the statement renamed relations (a
/// view's query changed by it follows them, and follows them back).
fn altered(b: &RelationDesc, a: &RelationDesc, renaming: bool) -> Vec<Undo> {
    let mut out = Vec::new();
    let kw = keyword(a.kind);
    let rel = quote_ident(&a.name);
    let alter = |what: String| Undo::Schema(format!("ALTER TABLE {rel} {what}"));
    if matches!(a.kind, RelationKind::View | RelationKind::MaterializedView) {
        // a plain view replaced: its old query back (by CREATE OR REPLACE when the old
        // query has the view's columns first; else dropped and made again); a materialized
        // view's old query is not
        if b.query != a.query && !renaming {
            // (CREATE OR REPLACE keeps the columns there are: the old query must have them
            // first)
            let prefix = a.columns.len() <= b.columns.len()
                && a.columns
                    .iter()
                    .zip(&b.columns)
                    .all(|(n, o)| o.name == n.name && o.ty == n.ty);
            match (a.kind, &b.query) {
                (RelationKind::View, Some(q)) if prefix => {
                    out.push(Undo::Schema(format!("CREATE OR REPLACE VIEW {rel} AS {q}")));
                }
                (RelationKind::View, Some(q)) => {
                    out.push(Undo::Schema(format!(
                        "DROP VIEW {rel}; CREATE VIEW {rel} AS {q}"
                    )));
                }
                _ => out.push(Undo::Irreversible(format!("CREATE OR REPLACE {kw} {rel}"))),
            }
        }
        out.extend(renamed_back(b, a));
        return out;
    }
    // constraints and indexes added
    let old_indexes: HashSet<&str> = b.indexes.iter().map(|i| i.name.as_str()).collect();
    for ix in &a.indexes {
        if !old_indexes.contains(ix.name.as_str()) {
            out.push(if ix.constraint {
                alter(format!("DROP CONSTRAINT {}", quote_ident(&ix.name)))
            } else {
                Undo::Schema(format!("DROP INDEX IF EXISTS {}", quote_ident(&ix.name)))
            });
        }
    }
    if b.primary_key.is_empty() && !a.primary_key.is_empty() {
        out.push(alter(format!(
            "DROP CONSTRAINT {}",
            quote_ident(&a.pkey_name())
        )));
    }
    for (name, _) in &a.checks {
        if !b.checks.iter().any(|(n, _)| n == name) {
            out.push(alter(format!("DROP CONSTRAINT {}", quote_ident(name))));
        }
    }
    for fk in &a.foreign_keys {
        if !b.foreign_keys.iter().any(|f| f.name == fk.name) {
            out.push(alter(format!("DROP CONSTRAINT {}", quote_ident(&fk.name))));
        }
    }
    // indexes and constraints dropped: made again from their definitions (the key and
    // unique ones before the foreign keys that need them); not for a table renamed or
    // whose columns changed in the same statement (the definitions name the old ones)
    let same_columns = b.name == a.name
        && b.columns.len() == a.columns.len()
        && b.columns
            .iter()
            .zip(&a.columns)
            .all(|(o, n)| o.name == n.name);
    let list = |cols: &[String]| {
        cols.iter()
            .map(|c| quote_ident(c))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut remade = Vec::new();
    if !b.primary_key.is_empty() && a.primary_key.is_empty() {
        remade.push(alter(format!(
            "ADD CONSTRAINT {} PRIMARY KEY ({})",
            quote_ident(&b.pkey_name()),
            list(&b.primary_key)
        )));
    }
    let new_index_names: HashSet<&str> = a.indexes.iter().map(|i| i.name.as_str()).collect();
    let old_infos = b.all_indexes();
    for ix in &b.indexes {
        if new_index_names.contains(ix.name.as_str()) {
            continue;
        }
        remade.push(if ix.constraint {
            alter(format!(
                "ADD CONSTRAINT {} UNIQUE ({})",
                quote_ident(&ix.name),
                list(&ix.columns)
            ))
        } else {
            match old_infos.iter().find(|i| i.name == ix.name) {
                Some(info) => Undo::Schema(info.definition(&b.name, true)),
                None => Undo::Irreversible(format!("DROP INDEX {}", quote_ident(&ix.name))),
            }
        });
    }
    for (name, expr) in &b.checks {
        if !a.checks.iter().any(|(n, _)| n == name) {
            remade.push(alter(format!(
                "ADD CONSTRAINT {} CHECK ({expr})",
                quote_ident(name)
            )));
        }
    }
    for fk in &b.foreign_keys {
        if !a.foreign_keys.iter().any(|f| f.name == fk.name) {
            remade.push(alter(format!(
                "ADD CONSTRAINT {} FOREIGN KEY ({}) REFERENCES {} ({}) ON DELETE {} ON UPDATE {}",
                quote_ident(&fk.name),
                list(&fk.columns),
                quote_ident(&fk.ref_table),
                list(&fk.ref_columns),
                fk.on_delete.sql(),
                fk.on_update.sql()
            )));
        }
    }
    if same_columns {
        out.extend(remade);
    } else {
        out.extend(remade.into_iter().map(|u| match u {
            Undo::Schema(sql) => Undo::Irreversible(sql),
            other => other,
        }));
    }
    // columns: renamed (same place, other name), added (past the old ones), dropped
    let old_names: Vec<&str> = b.columns.iter().map(|c| c.name.as_str()).collect();
    let new_names: Vec<&str> = a.columns.iter().map(|c| c.name.as_str()).collect();
    let renamed = old_names.len() == new_names.len()
        && old_names
            .iter()
            .zip(&new_names)
            .filter(|(o, n)| o != n)
            .count()
            == 1;
    let rename_column = renamed
        .then(|| old_names.iter().zip(&new_names).find(|(o, n)| o != n))
        .flatten()
        .map(|(o, n)| {
            alter(format!(
                "RENAME COLUMN {} TO {}",
                quote_ident(n),
                quote_ident(o)
            ))
        });
    if !renamed {
        for c in &a.columns {
            if !old_names.contains(&c.name.as_str()) {
                out.push(alter(format!("DROP COLUMN {}", quote_ident(&c.name))));
            }
        }
        for c in &b.columns {
            if !new_names.contains(&c.name.as_str()) {
                out.push(Undo::Irreversible(format!(
                    "ALTER TABLE {rel} DROP COLUMN {}",
                    quote_ident(&c.name)
                )));
            }
        }
    }
    // a column kept (under its old name, or renamed): its NOT NULL, default and type
    for (i, c) in a.columns.iter().enumerate() {
        let was = if renamed {
            b.columns.get(i)
        } else {
            b.columns.iter().find(|o| o.name == c.name)
        };
        let Some(was) = was else { continue };
        let col = quote_ident(&c.name);
        if was.nullable != c.nullable {
            let to = if was.nullable { "DROP" } else { "SET" };
            out.push(alter(format!("ALTER COLUMN {col} {to} NOT NULL")));
        }
        let (old_default, new_default) = (b.column_default(&was.name), a.column_default(&c.name));
        // (a rename's: the default follows the sequence it draws from, and follows back)
        if old_default != new_default && !renaming && b.identity(&was.name).is_none() {
            out.push(alter(match old_default {
                Some(d) => format!("ALTER COLUMN {col} SET DEFAULT {d}"),
                None => format!("ALTER COLUMN {col} DROP DEFAULT"),
            }));
        }
        if was.ty != c.ty {
            out.push(Undo::Irreversible(format!(
                "ALTER TABLE {rel} ALTER COLUMN {col} TYPE {}",
                c.ty.display_name()
            )));
        }
    }
    // the column's name back after the statements above that name it
    out.extend(rename_column);
    // the relation's name back last (the statements above name it by its new name)
    out.extend(renamed_back(b, a));
    out
}

/// What gives a relation renamed or moved to another schema (`b` before, `a` after) its
/// name back: `RENAME TO` its old bare name, or `SET SCHEMA` its old schema (IF EXISTS: a
/// table's move back takes the sequences it owns along, whose own undo then finds nothing).
fn renamed_back(b: &RelationDesc, a: &RelationDesc) -> Option<Undo> {
    use crate::catalog::schemas::split_relation_name;
    let kw = keyword(a.kind);
    let rel = quote_ident(&a.name);
    let (schema_b, bare_b) = split_relation_name(&b.name);
    let (schema_a, bare_a) = split_relation_name(&a.name);
    if schema_b != schema_a {
        // (ALTER TABLE moves a relation of any kind)
        Some(Undo::Schema(format!(
            "ALTER TABLE IF EXISTS {rel} SET SCHEMA {}",
            quote_ident(schema_b)
        )))
    } else if bare_b != bare_a {
        Some(Undo::Schema(format!(
            "ALTER {kw} {rel} RENAME TO {}",
            quote_ident(bare_b)
        )))
    } else {
        None
    }
}
