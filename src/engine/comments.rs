//! `COMMENT ON TABLE | VIEW | MATERIALIZED VIEW | SEQUENCE name IS 'text' | NULL` and
//! `COMMENT ON COLUMN relation.column IS ...`: kept in the relation's catalog entry
//! (`RelationDesc::comments`, one commit), shown by `pg_description`, `obj_description`,
//! `col_description` and so psql's `\d+` / `\dt+`; a column's follows RENAME COLUMN and goes
//! with DROP COLUMN, all go with the relation.

use crate::catalog::RelationKind;
use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::sql::parser::{CommentOn, DropKind};

impl Engine {
    pub(crate) fn comment_on(&self, c: &CommentOn) -> Result<Output> {
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
        // an empty comment is no comment, as in Postgres
        let text = c.text.clone().filter(|t| !t.is_empty());
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
