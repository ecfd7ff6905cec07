//! Enum types: `CREATE TYPE name AS ENUM (...)`, `ALTER TYPE name ADD VALUE | RENAME VALUE
//! | RENAME TO | OWNER TO`, `DROP TYPE [IF EXISTS] names [CASCADE | RESTRICT]` (the catalog
//! side is `catalog/user_types.rs`).
//!
//! A materialized view over a column of the type has the labels' order in its plan (and its
//! checkpoint's fingerprint): `ADD VALUE` and `RENAME TO` stop such views, change the type,
//! and rebuild them from their inputs, as ALTER TABLE does.
//!
//! Values are stored as their label's text, so renaming a label would mean rewriting every
//! row that holds it: `RENAME VALUE` is refused (0A000) while a column has the type, and
//! `DROP TYPE ... CASCADE` does not drop the columns that use the type (refused as
//! RESTRICT is, 2BP01) — both said in docs/sql.md.

use crate::catalog::user_types::TypeDesc;
use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::AlterTypeOp;

type Notices<'a> = Option<&'a tokio::sync::mpsc::UnboundedSender<String>>;

impl Engine {
    pub(crate) fn create_enum_type(
        &self,
        session: &Session,
        name: &str,
        labels: &[String],
    ) -> Result<Output> {
        self.catalog
            .create_enum_type(name, labels, session.role())?;
        Ok(Output::Command("CREATE TYPE".into()))
    }

    /// The type, if the role may change it (its owner, a member of the owner, a superuser).
    fn owned_type(&self, session: &Session, name: &str) -> Result<TypeDesc> {
        let t = self
            .catalog
            .enum_type(name)
            .ok_or_else(|| WeirError::undefined_type(name))?;
        if !self.catalog.has_owner_rights(session.role(), t.owner) {
            return Err(crate::catalog::roles::denied(format!(
                "must be owner of type {name}"
            )));
        }
        Ok(t)
    }

    /// `DROP TYPE | DOMAIN ... CASCADE`: the columns of the type (`users`: relation,
    /// column) dropped first, as `ALTER TABLE ... DROP COLUMN` does it (2BP01 where a view
    /// reads one), told in one NOTICE as Postgres does; a column of a view is not dropped
    /// (0A000: Postgres would drop the view).
    pub(crate) async fn drop_columns_of_type(
        &self,
        session: &Session,
        users: &[(String, String)],
        notices: Notices<'_>,
    ) -> Result<()> {
        use crate::catalog::schemas::quote_relation;
        use crate::sql::pg_text::quote_ident;
        // (Postgres lists a table's columns newest first)
        let users: Vec<&(String, String)> = users.iter().rev().collect();
        for (rel, col) in &users {
            if !self
                .catalog
                .get(rel)
                .is_some_and(|e| e.desc.kind.is_table())
            {
                return Err(WeirError::not_supported(format!(
                    "dropping the type would drop column {col} of {}, which is not a table's: drop the view first",
                    quote_relation(rel)
                )));
            }
        }
        crate::engine::cascade_notice(
            notices,
            users
                .iter()
                .map(|(rel, col)| {
                    format!(
                        "drop cascades to column {col} of table {}",
                        quote_relation(rel)
                    )
                })
                .collect(),
        );
        // one ALTER TABLE per table (its rows are rewritten once)
        let mut tables: Vec<(&str, Vec<String>)> = Vec::new();
        for (rel, col) in users {
            let drop = format!("DROP COLUMN {}", quote_ident(col));
            match tables.iter_mut().find(|(t, _)| t == rel) {
                Some((_, drops)) => drops.push(drop),
                None => tables.push((rel, vec![drop])),
            }
        }
        for (rel, drops) in tables {
            let sql = format!("ALTER TABLE {} {}", quote_relation(rel), drops.join(", "));
            for parsed in crate::sql::parser::parse(&sql)? {
                if let crate::sql::parser::Statement::AlterTable(a) = &parsed.stmt {
                    Box::pin(self.alter_table(session, a, None)).await?;
                }
            }
        }
        Ok(())
    }

    pub(crate) async fn alter_type(
        &self,
        session: &Session,
        name: &str,
        op: &AlterTypeOp,
        notices: Notices<'_>,
    ) -> Result<Output> {
        let t = self.owned_type(session, name)?;
        if let AlterTypeOp::SetSchema(schema) = op
            && self.catalog.type_in_schema(name, schema)? == name
        {
            // (in that schema already: nothing to do, as in Postgres)
            return Ok(Output::Command("ALTER TYPE".into()));
        }
        // the materialized views whose plans hold the type: over a relation with a column of
        // it (directly or through other views)
        let views: Vec<std::sync::Arc<crate::catalog::Entry>> = if matches!(
            op,
            AlterTypeOp::AddValue { .. } | AlterTypeOp::Rename(_) | AlterTypeOp::SetSchema(_)
        ) {
            let mut views = Vec::new();
            for (relation, _) in self.catalog.enum_type_users(t.oid) {
                if let Some(e) = self.catalog.get(&relation) {
                    for v in self.views_over(e.desc.oid) {
                        if !views
                            .iter()
                            .any(|x: &std::sync::Arc<crate::catalog::Entry>| {
                                x.desc.oid == v.desc.oid
                            })
                        {
                            views.push(v);
                        }
                    }
                }
            }
            views
        } else {
            Vec::new()
        };
        self.stop_views(&views).await?;
        let changed = self.change_type(&t, name, op, notices);
        let oids: Vec<u32> = views.iter().map(|v| v.desc.oid).collect();
        let rebuilt = self.rebuild_views(&oids, notices).await;
        changed?;
        rebuilt?;
        Ok(Output::Command("ALTER TYPE".into()))
    }

    fn change_type(
        &self,
        t: &TypeDesc,
        name: &str,
        op: &AlterTypeOp,
        notices: Notices<'_>,
    ) -> Result<()> {
        match op {
            AlterTypeOp::AddValue {
                label,
                if_not_exists,
                position,
            } => {
                if !self
                    .catalog
                    .add_enum_label(name, label, position, *if_not_exists)?
                    && let Some(n) = notices
                {
                    let _ = n.send(format!("enum label \"{label}\" already exists, skipping"));
                }
            }
            AlterTypeOp::RenameValue { from, to } => {
                if !t.labels.iter().any(|l| &l.label == from) {
                    return Err(WeirError::invalid_parameter(format!(
                        "\"{from}\" is not an existing enum label"
                    )));
                }
                if t.labels.iter().any(|l| &l.label == to) {
                    return Err(WeirError::new(
                        sqlstate::DUPLICATE_OBJECT,
                        format!("enum label \"{to}\" already exists"),
                    ));
                }
                if let Some((rel, col)) = self.catalog.enum_type_users(t.oid).first() {
                    return Err(WeirError::not_supported(format!(
                        "cannot rename a value of enum {name} while column {col} of {rel} has the type: values are stored as their label"
                    )));
                }
                self.catalog.alter_enum_type(name, |t| {
                    for l in &mut t.labels {
                        if &l.label == from {
                            l.label = to.clone();
                        }
                    }
                    Ok(())
                })?;
            }
            AlterTypeOp::Rename(to) => {
                // (it stays in its schema)
                let to = crate::sql::parser::sibling_key(name, to);
                self.catalog.alter_enum_type(name, |t| {
                    t.name = to;
                    Ok(())
                })?;
            }
            AlterTypeOp::SetSchema(schema) => {
                let to = self.catalog.type_in_schema(name, schema)?;
                self.catalog.alter_enum_type(name, |t| {
                    t.name = to;
                    Ok(())
                })?;
            }
            AlterTypeOp::Owner(role) => {
                let owner = self
                    .catalog
                    .role(role)
                    .ok_or_else(|| crate::catalog::roles::undefined_role(role))?
                    .oid;
                self.catalog.alter_enum_type(name, |t| {
                    t.owner = owner;
                    Ok(())
                })?;
            }
        }
        Ok(())
    }

    pub(crate) async fn drop_types(
        &self,
        session: &Session,
        names: &[String],
        if_exists: bool,
        cascade: bool,
        notices: Notices<'_>,
    ) -> Result<Output> {
        for name in names {
            // (DROP TYPE drops a domain too)
            if self.catalog.domain(name).is_some() {
                self.drop_one_domain(session, name, cascade, notices)
                    .await?;
                continue;
            }
            if self.catalog.enum_type(name).is_none() && if_exists {
                if let Some(n) = notices {
                    let name = crate::sql::search_path::written(name);
                    let _ = n.send(format!("type \"{name}\" does not exist, skipping"));
                }
                continue;
            }
            let t = self.owned_type(session, name)?;
            if cascade {
                let users = self.catalog.enum_type_users(t.oid);
                self.drop_columns_of_type(session, &users, notices).await?;
            }
            self.catalog.drop_enum_type(name)?;
        }
        Ok(Output::Command("DROP TYPE".into()))
    }
}
