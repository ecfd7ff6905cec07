//! `COMMENT ON TABLE | VIEW | MATERIALIZED VIEW | SEQUENCE name IS 'text' | NULL`,
//! `COMMENT ON COLUMN relation.column IS ...`, `COMMENT ON INDEX name` and `COMMENT ON
//! CONSTRAINT name ON table`: kept in the relation's catalog entry (`RelationDesc::comments`,
//! one commit; an index's and a constraint's by name, in the table's entry), shown by
//! `pg_description`, `obj_description`, `col_description` and so psql's `\d+` / `\dt+`; a
//! column's follows RENAME COLUMN and goes with DROP COLUMN, all go with the relation.
//! `COMMENT ON TYPE` (an enum type) is kept with the type.

use crate::catalog::RelationKind;
use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::{CommentOn, DropKind};

impl Engine {
    pub(crate) fn comment_on(&self, session: &Session, c: &CommentOn) -> Result<Output> {
        // an empty comment is no comment, as in Postgres
        let text = c.text.clone().filter(|t| !t.is_empty());
        let role = session.role();
        match c.kind {
            DropKind::Type if self.catalog.domain(&c.relation).is_some() => {
                let d = self
                    .catalog
                    .domain(&c.relation)
                    .ok_or_else(|| crate::catalog::domains::undefined(&c.relation))?;
                if !self.catalog.has_owner_rights(role, d.owner) {
                    return Err(crate::catalog::roles::denied(format!(
                        "must be owner of type {}",
                        d.shown()
                    )));
                }
                self.catalog.alter_domain(&c.relation, |d| {
                    d.comment = text.clone();
                    Ok(())
                })?;
                return Ok(Output::Command("COMMENT".into()));
            }
            DropKind::Type => {
                let t = self
                    .catalog
                    .enum_type(&c.relation)
                    .ok_or_else(|| WeirError::undefined_type(&c.relation))?;
                if !self.catalog.has_owner_rights(role, t.owner) {
                    return Err(crate::catalog::roles::denied(format!(
                        "must be owner of type {}",
                        c.relation
                    )));
                }
                self.catalog.alter_enum_type(&c.relation, |t| {
                    t.comment = text.clone();
                    Ok(())
                })?;
                return Ok(Output::Command("COMMENT".into()));
            }
            DropKind::Index => {
                let (entry, _) = self
                    .catalog
                    .index_by_name(&c.relation)
                    .ok_or_else(|| WeirError::undefined_table(&c.relation))?;
                if !self.catalog.has_owner_rights(role, entry.desc.owner) {
                    return Err(crate::catalog::roles::denied(format!(
                        "must be owner of index {}",
                        c.relation
                    )));
                }
                self.catalog.alter_relation(&entry.desc.name, |d| {
                    set_named(&mut d.comments.indexes, &c.relation, &text);
                    Ok(())
                })?;
                return Ok(Output::Command("COMMENT".into()));
            }
            _ => {}
        }
        let entry = self
            .catalog
            .get(&c.relation)
            .ok_or_else(|| WeirError::undefined_table(&c.relation))?;
        let kind = entry.desc.kind;
        let fits = match c.kind {
            // a column of any relation that has columns
            DropKind::Table if c.column.is_some() => kind != RelationKind::Sequence,
            DropKind::Table => kind.is_table(),
            DropKind::View => kind == RelationKind::View,
            DropKind::MaterializedView => kind == RelationKind::MaterializedView,
            DropKind::Sequence => kind == RelationKind::Sequence,
            _ => false,
        };
        if !fits {
            let noun = match c.kind {
                DropKind::Table => "table",
                DropKind::View => "view",
                DropKind::MaterializedView => "materialized view",
                _ => "sequence",
            };
            return Err(WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("\"{}\" is not a {noun}", c.relation),
            ));
        }
        if let Some(col) = &c.column
            && !entry.desc.columns.iter().any(|x| &x.name == col)
        {
            return Err(WeirError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!(
                    "column \"{col}\" of relation \"{}\" does not exist",
                    c.relation
                ),
            ));
        }
        if let Some(con) = &c.constraint {
            if !entry.desc.constraint_oids().iter().any(|(_, n)| n == con) {
                return Err(WeirError::new(
                    sqlstate::UNDEFINED_OBJECT,
                    format!(
                        "constraint \"{con}\" for table \"{}\" does not exist",
                        c.relation
                    ),
                ));
            }
            self.catalog.alter_relation(&c.relation, |d| {
                set_named(&mut d.comments.constraints, con, &text);
                Ok(())
            })?;
            return Ok(Output::Command("COMMENT".into()));
        }
        self.catalog.alter_relation(&c.relation, |d| {
            match &c.column {
                None => d.comments.relation = text.clone(),
                Some(col) => {
                    d.comments.columns.retain(|(n, _)| n != col);
                    if let Some(t) = &text {
                        d.comments.columns.push((col.clone(), t.clone()));
                    }
                }
            }
            Ok(())
        })?;
        Ok(Output::Command("COMMENT".into()))
    }
}

/// Set (or with None remove) the comment of a named object.
fn set_named(list: &mut Vec<(String, String)>, name: &str, text: &Option<String>) {
    list.retain(|(n, _)| n != name);
    if let Some(t) = text {
        list.push((name.to_owned(), t.clone()));
    }
}
