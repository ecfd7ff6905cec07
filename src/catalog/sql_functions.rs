//! SQL-bodied functions (`CREATE [OR REPLACE] FUNCTION f(a int, ...) RETURNS type LANGUAGE
//! sql AS 'SELECT expr'` or `RETURN expr`): stored under `F{name}` as JSON and inlined
//! where they are called (`engine/sql_functions.rs`), so they cost nothing at run time and
//! work in materialized views.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::error::{Result, WeirError};
use crate::state::store::{Durability, Store, WriteBatch};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SqlFunction {
    pub name: String,
    /// (parameter name, SQL type)
    pub params: Vec<(Option<String>, String)>,
    /// SQL type of the result.
    pub returns: String,
    /// The body: one SQL expression over the parameters (by name or `$n`).
    pub body: String,
    pub owner: u32,
}

fn key(name: &str) -> Vec<u8> {
    let mut k = b"F".to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

#[derive(Default)]
pub struct SqlFunctions {
    by_name: parking_lot::RwLock<BTreeMap<String, SqlFunction>>,
}

impl SqlFunctions {
    pub fn load(store: &dyn Store) -> Result<SqlFunctions> {
        let by_name = crate::catalog::load_json::<SqlFunction>(store, b"F", "function")?
            .into_iter()
            .map(|f| (f.name.clone(), f))
            .collect();
        Ok(SqlFunctions {
            by_name: parking_lot::RwLock::new(by_name),
        })
    }
}

impl Catalog {
    pub fn sql_function(&self, name: &str) -> Option<SqlFunction> {
        self.sql_functions.by_name.read().get(name).cloned()
    }

    /// The names of the SQL functions (`CREATE FUNCTION ... LANGUAGE sql`).
    pub fn sql_function_names(&self) -> Vec<String> {
        self.sql_functions.by_name.read().keys().cloned().collect()
    }

    pub fn has_sql_functions(&self) -> bool {
        !self.sql_functions.by_name.read().is_empty()
    }

    pub fn create_sql_function(&self, f: SqlFunction, or_replace: bool) -> Result<()> {
        let mut fs = self.sql_functions.by_name.write();
        if fs.contains_key(&f.name) && !or_replace {
            return Err(WeirError::new(
                "42723",
                format!(
                    "function \"{}\" already exists with same argument types",
                    f.name
                ),
            ));
        }
        let mut wb = WriteBatch::default();
        wb.put(
            key(&f.name),
            serde_json::to_vec(&f).map_err(|e| WeirError::internal(e.to_string()))?,
        );
        self.store().commit(wb, Durability::Sync)?;
        fs.insert(f.name.clone(), f);
        Ok(())
    }

    /// Drop a function; false when there is none of that name.
    pub fn drop_sql_function(&self, name: &str) -> Result<bool> {
        let mut fs = self.sql_functions.by_name.write();
        if !fs.contains_key(name) {
            return Ok(false);
        }
        let mut wb = WriteBatch::default();
        wb.delete(key(name));
        self.store().commit(wb, Durability::Sync)?;
        fs.remove(name);
        Ok(true)
    }
}
