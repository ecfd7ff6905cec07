//! `CREATE SCHEMA`, `DROP SCHEMA` and `ALTER SCHEMA`. Besides the built-in schemas `public`,
//! `pg_catalog` and `information_schema`, user schemas hold relations (`catalog/schemas.rs`:
//! a relation of schema `app` is keyed `app.name`). `DROP SCHEMA` refuses a schema that
//! holds relations (2BP01) unless CASCADE, which drops them with it; the built-in schemas
//! cannot be dropped (0A000).

use crate::catalog::RelationKind;
use crate::catalog::pg_catalog::namespace_oid_of_name;
use crate::catalog::schemas::{quote_relation, split_relation_name};
use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::{DropKind, relation_key};

type Notices = tokio::sync::mpsc::UnboundedSender<String>;

fn exists(name: &str) -> bool {
    namespace_oid_of_name(name).is_some()
}

/// A name a schema may be given: not `pg_`-prefixed (42939, Postgres' answer), without a
/// `.` (a relation of schema `app` is keyed `app.t`: 0A000).
fn check_new_name(name: &str) -> Result<()> {
    if name.starts_with("pg_") {
        return Err(WeirError::new(
            sqlstate::RESERVED_NAME,
            format!("unacceptable schema name \"{name}\""),
        )
        .with_detail("The prefix \"pg_\" is reserved for system schemas."));
    }
    if name.contains('.') {
        return Err(WeirError::not_supported(format!(
            "schema names containing \".\" are not supported: \"{name}\""
        )));
    }
    Ok(())
}

impl Engine {
    pub(crate) fn create_schema(
        &self,
        session: &Session,
        name: &str,
        if_not_exists: bool,
        owner: Option<&str>,
        notices: Option<&Notices>,
    ) -> Result<Output> {
        check_new_name(name)?;
        if exists(name) || self.catalog.user_schema(name).is_some() {
            if !if_not_exists {
                return Err(WeirError::new(
                    sqlstate::DUPLICATE_SCHEMA,
                    format!("schema \"{name}\" already exists"),
                ));
            }
            if let Some(n) = notices {
                let _ = n.send(format!("schema \"{name}\" already exists, skipping"));
            }
            return Ok(Output::Command("CREATE SCHEMA".into()));
        }
        let owner = match owner {
            Some(r) => {
                self.catalog
                    .role(r)
                    .ok_or_else(|| {
                        WeirError::new(
                            sqlstate::UNDEFINED_OBJECT,
                            format!("role \"{r}\" does not exist"),
                        )
                    })?
                    .oid
            }
            None => session.role(),
        };
        self.catalog.create_schema(name, owner)?;
        Ok(Output::Command("CREATE SCHEMA".into()))
    }

    /// A user schema the session's role may change (its owner, a superuser): 0A000 for a
    /// built-in one, 3F000 for none, 42501 for another's.
    fn schema_to_change(
        &self,
        session: &Session,
        name: &str,
        what: &str,
    ) -> Result<crate::catalog::schemas::SchemaDesc> {
        if exists(name) {
            return Err(WeirError::not_supported(format!(
                "{what} {name} is not supported: schema \"{name}\" is built in"
            )));
        }
        let Some(s) = self.catalog.user_schema(name) else {
            return Err(WeirError::new(
                sqlstate::INVALID_SCHEMA_NAME,
                format!("schema \"{name}\" does not exist"),
            ));
        };
        let role = session.role();
        if s.owner != role && !self.catalog.is_superuser(role) {
            return Err(WeirError::new(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                format!("must be owner of schema {name}"),
            ));
        }
        Ok(s)
    }

    /// `ALTER SCHEMA name RENAME TO new` (its relations and types with it) or `OWNER TO
    /// role`.
    pub(crate) fn alter_schema(
        &self,
        session: &Session,
        name: &str,
        to: &std::result::Result<String, String>,
    ) -> Result<Output> {
        self.schema_to_change(session, name, "ALTER SCHEMA")?;
        match to {
            Ok(new) => {
                check_new_name(new)?;
                // its relations are keyed anew, and what reads them follows
                let renames: Vec<(String, String)> = self
                    .catalog
                    .entries()
                    .iter()
                    .filter(|e| split_relation_name(&e.desc.name).0 == name)
                    .map(|e| {
                        let bare = split_relation_name(&e.desc.name).1;
                        (e.desc.name.clone(), relation_key(Some(new), bare))
                    })
                    .collect();
                let (renamed, others) = self.follow_renames(&renames)?;
                self.catalog.rename_schema(name, new, renamed, others)?;
            }
            Err(owner) => {
                let owner = self
                    .catalog
                    .role(owner)
                    .ok_or_else(|| {
                        WeirError::new(
                            sqlstate::UNDEFINED_OBJECT,
                            format!("role \"{owner}\" does not exist"),
                        )
                    })?
                    .oid;
                self.catalog.set_schema_owner(name, owner)?;
            }
        }
        Ok(Output::Command("ALTER SCHEMA".into()))
    }

    /// `COMMENT ON SCHEMA name IS 'text' | NULL` of a user schema (its owner's).
    pub(crate) fn comment_on_schema(
        &self,
        session: &Session,
        name: &str,
        text: Option<&str>,
    ) -> Result<Output> {
        self.schema_to_change(session, name, "COMMENT ON SCHEMA")?;
        // (an empty comment is no comment, as in Postgres)
        self.catalog
            .set_schema_comment(name, text.filter(|t| !t.is_empty()))?;
        Ok(Output::Command("COMMENT".into()))
    }

    /// `DROP SCHEMA [IF EXISTS] name [, ...] [CASCADE]`: all named schemas or none.
    pub(crate) async fn drop_schemas(
        &self,
        session: &Session,
        names: &[String],
        if_exists: bool,
        cascade: bool,
        notices: Option<&Notices>,
    ) -> Result<Output> {
        // the whole statement is refused before anything is dropped
        if let Some(name) = names.iter().find(|n| exists(n)) {
            return Err(WeirError::not_supported(format!(
                "DROP SCHEMA {name} is not supported: schema \"{name}\" cannot be dropped here"
            )));
        }
        let mut present = Vec::new();
        for name in names {
            if if_exists && self.catalog.user_schema(name).is_none() {
                if let Some(n) = notices {
                    let _ = n.send(format!("schema \"{name}\" does not exist, skipping"));
                }
                continue;
            }
            self.schema_to_change(session, name, "DROP SCHEMA")?;
            present.push(name.clone());
        }
        // what the schemas hold, in the order it was made
        let mut held: Vec<_> = self
            .catalog
            .entries()
            .into_iter()
            .filter(|e| {
                present
                    .iter()
                    .any(|s| split_relation_name(&e.desc.name).0 == s)
            })
            .collect();
        held.sort_by_key(|e| e.desc.oid);
        // enum types and domains of the schemas (dropped after its relations, which may use
        // them): (OID, name)
        let in_schemas = |n: &str| present.iter().any(|s| split_relation_name(n).0 == s);
        let types: Vec<(u32, String)> = self
            .catalog
            .user_types()
            .into_iter()
            .map(|(n, oid)| (oid, n))
            .filter(|(_, n)| in_schemas(n))
            .collect();
        // the columns elsewhere of one of them go with it (as `DROP TYPE ... CASCADE`)
        let outside: Vec<(String, String)> = types
            .iter()
            .flat_map(|(oid, _)| self.catalog.user_type_users(*oid))
            .filter(|(r, _)| !in_schemas(r))
            .collect();
        // a serial column's sequence is part of its table, not listed beside it
        let owned: Vec<String> = held
            .iter()
            .flat_map(|e| {
                e.desc
                    .options
                    .iter()
                    .filter(|(k, _)| k == "weir.owned_sequence")
                    .map(|(_, v)| v.clone())
            })
            .collect();
        // what the schemas hold as Postgres lists it: in the order it was made
        let mut listed: Vec<(u32, String, String)> = types
            .iter()
            .map(|(oid, name)| (*oid, name.clone(), format!("type {}", quote_relation(name))))
            .chain(
                held.iter()
                    .filter(|e| !owned.contains(&e.desc.name))
                    .map(|e| {
                        (
                            e.desc.oid,
                            e.desc.name.clone(),
                            format!("{} {}", e.desc.kind.noun(), quote_relation(&e.desc.name)),
                        )
                    }),
            )
            .collect();
        // the foreign keys of tables elsewhere that reference its tables (dropped with them,
        // listed by their tables' age), and the columns of its types
        if cascade {
            for (rel, col) in &outside {
                let oid = self.catalog.get(rel).map_or(u32::MAX, |e| e.desc.oid);
                listed.push((
                    oid,
                    rel.clone(),
                    format!("column {col} of table {}", quote_relation(rel)),
                ));
            }
            for e in self.catalog.entries() {
                if in_schemas(&e.desc.name) {
                    continue;
                }
                for fk in &e.desc.foreign_keys {
                    if in_schemas(&fk.ref_table) {
                        listed.push((
                            e.desc.oid,
                            e.desc.name.clone(),
                            format!(
                                "constraint {} on table {}",
                                fk.name,
                                quote_relation(&e.desc.name)
                            ),
                        ));
                    }
                }
            }
        }
        listed.sort_by_key(|(oid, _, _)| *oid);
        if let Some((_, first, _)) = listed.first()
            && !cascade
        {
            let schema = split_relation_name(first).0.to_owned();
            let detail: Vec<String> = listed
                .iter()
                .filter(|(_, key, _)| split_relation_name(key).0 == schema)
                .map(|(_, _, what)| format!("{what} depends on schema {schema}"))
                .collect();
            return Err(WeirError::new(
                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                format!("cannot drop schema {schema} because other objects depend on it"),
            )
            .with_detail(detail.join("\n"))
            .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
        }
        crate::engine::cascade_notice(
            notices,
            listed
                .iter()
                .map(|(_, _, what)| format!("drop cascades to {what}"))
                .collect(),
        );
        self.drop_columns_of_type(session, &outside, None).await?;
        // what reads the others first: sinks, views, then what holds rows
        let in_block = session.in_transaction || session.implicit_transaction;
        for (kind, of) in [
            (DropKind::Sink, &[RelationKind::Sink][..]),
            (
                DropKind::MaterializedView,
                &[RelationKind::MaterializedView],
            ),
            (DropKind::View, &[RelationKind::View]),
            (
                DropKind::Table,
                &[RelationKind::Table, RelationKind::AppendOnlyTable],
            ),
            (DropKind::Source, &[RelationKind::Source]),
            (DropKind::Sequence, &[RelationKind::Sequence]),
        ] {
            let names: Vec<String> = held
                .iter()
                .filter(|e| of.contains(&e.desc.kind))
                .map(|e| e.desc.name.clone())
                .collect();
            if !names.is_empty() {
                self.drop_relations(&names, kind, true, true, None, in_block)
                    .await?;
            }
        }
        if !types.is_empty() {
            let names: Vec<String> = types.into_iter().map(|(_, n)| n).collect();
            self.drop_types(session, &names, true, false, None).await?;
        }
        for name in &present {
            self.catalog.drop_schema(name)?;
        }
        Ok(Output::Command("DROP SCHEMA".into()))
    }
}

/// `CREATE EXTENSION [IF NOT EXISTS] name [SCHEMA s] [VERSION v]`: one Weir has built in
/// (`catalog/extensions.rs`), in its own schema at its one version.
pub(crate) fn create_extension(
    catalog: &crate::catalog::Catalog,
    name: &str,
    if_not_exists: bool,
    schema: Option<&str>,
    version: Option<&str>,
    notices: Option<&Notices>,
) -> Result<Output> {
    let installed = catalog
        .installed_extensions()
        .iter()
        .any(|a| a.name == name);
    if installed {
        if !if_not_exists {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_OBJECT,
                format!("extension \"{name}\" already exists"),
            ));
        }
        if let Some(n) = notices {
            let _ = n.send(format!("extension \"{name}\" already exists, skipping"));
        }
        return Ok(Output::Command("CREATE EXTENSION".into()));
    }
    if let Some(s) = schema
        && !exists(s)
    {
        return Err(WeirError::new(
            sqlstate::INVALID_SCHEMA_NAME,
            format!("schema \"{s}\" does not exist"),
        ));
    }
    if let (Some(a), Some(v)) = (crate::catalog::extensions::available(name), version)
        && v != a.version
    {
        return Err(WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            format!(
                "extension \"{name}\" has no installation script nor update path for version \"{v}\""
            ),
        ));
    }
    catalog.create_extension(name)?;
    Ok(Output::Command("CREATE EXTENSION".into()))
}

/// `DROP EXTENSION [IF EXISTS] name [, ...]`: all or none (a name not installed fails the
/// statement before anything is dropped, unless IF EXISTS).
pub(crate) fn drop_extension(
    catalog: &crate::catalog::Catalog,
    names: &[String],
    if_exists: bool,
    notices: Option<&Notices>,
) -> Result<Output> {
    let installed = catalog.installed_extensions();
    for name in names {
        if installed.iter().any(|a| a.name == name) {
            continue;
        }
        if !if_exists {
            return Err(WeirError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!("extension \"{name}\" does not exist"),
            ));
        }
        if let Some(n) = notices {
            let _ = n.send(format!("extension \"{name}\" does not exist, skipping"));
        }
    }
    for name in names {
        catalog.drop_extension(name)?;
    }
    Ok(Output::Command("DROP EXTENSION".into()))
}
