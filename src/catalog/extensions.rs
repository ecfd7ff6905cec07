//! Extensions (`CREATE EXTENSION`, `DROP EXTENSION`, `pg_extension`,
//! `pg_available_extensions`): the ones whose functions Weir has built in can be created,
//! so schemas and migrations that start with `CREATE EXTENSION IF NOT EXISTS "uuid-ossp"`
//! (TypeORM, Prisma), `pgcrypto` or `plpgsql` (every Rails `schema.rb`) load.
//!
//! - `plpgsql` is installed from the start, as in Postgres (listed in `pg_language` too);
//!   PL/pgSQL itself does not run: `LANGUAGE plpgsql` functions and `DO` blocks are 0A000.
//! - `pgcrypto`: `digest`, `hmac` (md5, sha224–sha512), `gen_random_bytes`,
//!   `gen_random_uuid`; not `crypt`/`gen_salt` nor the PGP functions.
//! - `uuid-ossp`: `uuid_generate_v4`, `uuid_generate_v3`, `uuid_nil`, `uuid_ns_dns`,
//!   `uuid_ns_url`, `uuid_ns_oid`, `uuid_ns_x500`; not v1 or v5.
//!
//! The functions are there whether or not the extension was created (Postgres has them
//! only after); what CREATE EXTENSION records (under `E{name}`) is what `pg_extension` lists.

use std::collections::BTreeSet;

use crate::catalog::Catalog;
use crate::error::{Result, WeirError};
use crate::state::store::{Durability, Store, WriteBatch};

/// An extension Weir can create.
pub struct Available {
    pub name: &'static str,
    pub version: &'static str,
    pub comment: &'static str,
    /// Its `pg_extension` OID (Postgres 15's for plpgsql; fixed ones below 16384 for the
    /// others, which Postgres numbers as they are created).
    pub oid: u32,
    /// Its schema: `pg_catalog` (plpgsql) or `public`.
    pub namespace: u32,
    pub relocatable: bool,
}

pub const AVAILABLE: &[Available] = &[
    Available {
        name: "pgcrypto",
        version: "1.3",
        comment: "cryptographic functions",
        oid: 13601,
        namespace: crate::catalog::PUBLIC_NAMESPACE_OID,
        relocatable: true,
    },
    Available {
        name: "plpgsql",
        version: "1.0",
        comment: "PL/pgSQL procedural language",
        oid: 13559,
        namespace: crate::catalog::PG_CATALOG_NAMESPACE_OID,
        relocatable: false,
    },
    Available {
        name: "uuid-ossp",
        version: "1.1",
        comment: "generate universally unique identifiers (UUIDs)",
        oid: 13602,
        namespace: crate::catalog::PUBLIC_NAMESPACE_OID,
        relocatable: true,
    },
];

/// Installed from the start (and after DROP EXTENSION of anything else).
const PREINSTALLED: &str = "plpgsql";

fn key(name: &str) -> Vec<u8> {
    let mut k = b"E".to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

/// The installed extensions: `plpgsql` unless dropped, and the ones created.
pub struct Extensions {
    installed: parking_lot::RwLock<BTreeSet<String>>,
}

/// What is stored per extension (`E{name}`): whether it is installed (a dropped
/// `plpgsql` is stored as not installed).
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    name: String,
    installed: bool,
}

impl Extensions {
    pub fn load(store: &dyn Store) -> Result<Extensions> {
        let mut installed: BTreeSet<String> = BTreeSet::from([PREINSTALLED.to_owned()]);
        for s in crate::catalog::load_json::<Stored>(store, b"E", "extension")? {
            if s.installed {
                installed.insert(s.name);
            } else {
                installed.remove(&s.name);
            }
        }
        Ok(Extensions {
            installed: parking_lot::RwLock::new(installed),
        })
    }
}

pub fn available(name: &str) -> Option<&'static Available> {
    AVAILABLE.iter().find(|a| a.name == name)
}

fn not_available(name: &str) -> WeirError {
    WeirError::new(
        crate::error::sqlstate::FEATURE_NOT_SUPPORTED,
        format!("extension \"{name}\" is not available"),
    )
    .with_detail(format!(
        "Weir has the extensions {} built in.",
        AVAILABLE
            .iter()
            .map(|a| a.name)
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

impl Catalog {
    /// The installed extensions, by name.
    pub fn installed_extensions(&self) -> Vec<&'static Available> {
        let installed = self.extensions.installed.read();
        AVAILABLE
            .iter()
            .filter(|a| installed.contains(a.name))
            .collect()
    }

    /// `CREATE EXTENSION`: false when it was installed already.
    pub fn create_extension(&self, name: &str) -> Result<bool> {
        if available(name).is_none() {
            return Err(not_available(name));
        }
        self.set_installed(name, true)
    }

    /// `DROP EXTENSION`: false when it was not installed. Its functions stay.
    pub fn drop_extension(&self, name: &str) -> Result<bool> {
        self.set_installed(name, false)
    }

    fn set_installed(&self, name: &str, on: bool) -> Result<bool> {
        let mut installed = self.extensions.installed.write();
        if installed.contains(name) == on {
            return Ok(false);
        }
        let mut wb = WriteBatch::default();
        wb.put(
            key(name),
            serde_json::to_vec(&Stored {
                name: name.to_owned(),
                installed: on,
            })
            .map_err(|e| WeirError::internal(e.to_string()))?,
        );
        self.store().commit(wb, Durability::Sync)?;
        if on {
            installed.insert(name.to_owned());
        } else {
            installed.remove(name);
        }
        Ok(true)
    }
}
