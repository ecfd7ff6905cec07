//! `CREATE SCHEMA` and `DROP SCHEMA`. Weir has the schemas `public` (every relation),
//! `pg_catalog` and `information_schema`, and no others yet: creating one of those with IF
//! NOT EXISTS is what migration tools do first and answers as Postgres does (a notice,
//! nothing changes); creating another, or dropping one of those, is refused with 0A000;
//! dropping a schema that does not exist is Postgres' 3F000, or its notice with IF EXISTS.

use crate::catalog::pg_catalog::namespace_name_of_oid;
use crate::catalog::{
    INFORMATION_SCHEMA_NAMESPACE_OID, PG_CATALOG_NAMESPACE_OID, PUBLIC_NAMESPACE_OID,
};
use crate::engine::Output;
use crate::error::{Result, WeirError, sqlstate};

type Notices = tokio::sync::mpsc::UnboundedSender<String>;

fn exists(name: &str) -> bool {
    [
        PUBLIC_NAMESPACE_OID,
        PG_CATALOG_NAMESPACE_OID,
        INFORMATION_SCHEMA_NAMESPACE_OID,
    ]
    .iter()
    .any(|o| namespace_name_of_oid(*o) == Some(name))
}

pub(crate) fn create_schema(
    name: &str,
    if_not_exists: bool,
    notices: Option<&Notices>,
) -> Result<Output> {
    if name.starts_with("pg_") {
        return Err(WeirError::new(
            sqlstate::RESERVED_NAME,
            format!("unacceptable schema name \"{name}\""),
        )
        .with_detail("The prefix \"pg_\" is reserved for system schemas."));
    }
    if !exists(name) {
        return Err(WeirError::not_supported(format!(
            "CREATE SCHEMA {name} is not supported: relations live in schema \"public\" only"
        )));
    }
    if !if_not_exists {
        return Err(WeirError::new(
            sqlstate::DUPLICATE_SCHEMA,
            format!("schema \"{name}\" already exists"),
        ));
    }
    if let Some(n) = notices {
        let _ = n.send(format!("schema \"{name}\" already exists, skipping"));
    }
    Ok(Output::Command("CREATE SCHEMA".into()))
}

pub(crate) fn drop_schema(
    names: &[String],
    if_exists: bool,
    notices: Option<&Notices>,
) -> Result<Output> {
    // the whole statement is refused before anything is said about the rest
    if let Some(name) = names.iter().find(|n| exists(n)) {
        return Err(WeirError::not_supported(format!(
            "DROP SCHEMA {name} is not supported: schema \"{name}\" cannot be dropped here"
        )));
    }
    if !if_exists && let Some(name) = names.first() {
        return Err(WeirError::new(
            sqlstate::INVALID_SCHEMA_NAME,
            format!("schema \"{name}\" does not exist"),
        ));
    }
    if let Some(n) = notices {
        for name in names {
            let _ = n.send(format!("schema \"{name}\" does not exist, skipping"));
        }
    }
    Ok(Output::Command("DROP SCHEMA".into()))
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
