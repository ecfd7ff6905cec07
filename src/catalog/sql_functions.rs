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
    /// `pg_proc.oid` (0 in a store written before functions had one: given one when the
    /// catalog opens).
    #[serde(default)]
    pub oid: u32,
    pub name: String,
    /// (parameter name, SQL type)
    pub params: Vec<(Option<String>, String)>,
    /// SQL type of the result.
    pub returns: String,
    /// The body: one SQL expression over the parameters (by name or `$n`).
    pub body: String,
    /// The body as written in `AS '...'` (`pg_proc.prosrc`); None for `RETURN expr`.
    #[serde(default)]
    pub source: Option<String>,
    /// `pg_proc.provolatile`: `i`, `s` or `v` (None: `v`, Postgres' default).
    #[serde(default)]
    pub volatility: Option<String>,
    /// Each parameter's `DEFAULT` expression (SQL text), in the order of `params` (empty:
    /// none has one). Only trailing parameters have one, as Postgres requires.
    #[serde(default)]
    pub defaults: Vec<Option<String>>,
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

    /// The largest OID a function has.
    pub fn max_oid(&self) -> Option<u32> {
        self.by_name.read().values().map(|f| f.oid).max()
    }
}

impl SqlFunction {
    /// `integer`, as Postgres names a type written in a function's signature (without its
    /// modifiers: `numeric(10,2)` is `numeric` there; as written when Weir has no such
    /// type), and the type's OID (0 then).
    pub fn type_named(written: &str) -> (String, u32) {
        use crate::sql::types::SqlType;
        let dialect = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
        datafusion::sql::sqlparser::parser::Parser::new(&dialect)
            .try_with_sql(written)
            .and_then(|mut p| p.parse_data_type())
            .ok()
            .and_then(|t| SqlType::from_ast(&t).ok())
            .map(|t| match t {
                SqlType::Numeric(_) => SqlType::Numeric(None),
                SqlType::Varchar(_) => SqlType::Varchar(None),
                SqlType::Time(_) => SqlType::Time(None),
                SqlType::Timestamp(_) => SqlType::Timestamp(None),
                SqlType::TimestampTz(_) => SqlType::TimestampTz(None),
                t => t,
            })
            .map(|t| {
                let name = match t {
                    SqlType::Bpchar(_) => "character".to_owned(),
                    ref t => t.display_name(),
                };
                (name, t.oid())
            })
            .unwrap_or_else(|| (written.to_lowercase(), 0))
    }

    /// `pg_get_functiondef`: the CREATE statement as Postgres writes it back.
    pub fn definition(&self) -> String {
        let volatility = match self.volatility.as_deref() {
            Some("i") => " IMMUTABLE\n",
            Some("s") => " STABLE\n",
            _ => "",
        };
        let body = match &self.source {
            Some(src) => format!("AS $function${src}$function$"),
            None => format!("RETURN {}", self.body),
        };
        format!(
            "CREATE OR REPLACE FUNCTION public.{}({})\n RETURNS {}\n LANGUAGE sql\n{volatility}{body}\n",
            crate::sql::pg_text::quote_ident(&self.name),
            self.arguments_text(),
            Self::type_named(&self.returns).0,
        )
    }

    /// `pg_get_function_arguments`: `a integer, b integer DEFAULT 2`.
    pub fn arguments_text(&self) -> String {
        self.signature_text(true)
    }

    /// `pg_get_function_identity_arguments`: the arguments without their defaults.
    pub fn identity_arguments_text(&self) -> String {
        self.signature_text(false)
    }

    fn signature_text(&self, with_defaults: bool) -> String {
        self.params
            .iter()
            .enumerate()
            .map(|(i, (name, ty))| {
                let ty = Self::type_named(ty).0;
                let default = match self.default_shown(i).filter(|_| with_defaults) {
                    Some(d) => format!(" DEFAULT {d}"),
                    None => String::new(),
                };
                match name {
                    Some(n) => format!("{} {ty}{default}", crate::sql::pg_text::quote_ident(n)),
                    None => format!("{ty}{default}"),
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Parameter `i`'s default as Postgres shows it (`crate::catalog::default_shown`:
    /// `'d'::text`).
    pub fn default_shown(&self, i: usize) -> Option<String> {
        let text = self.defaults.get(i)?.as_deref()?;
        let ty = self.params.get(i).map(|(_, ty)| Self::type_named(ty).0);
        Some(crate::catalog::default_shown(text, ty.as_deref()))
    }

    /// How many parameters have a default (`pg_proc.pronargdefaults`).
    pub fn defaults_count(&self) -> usize {
        self.defaults.iter().flatten().count()
    }

    /// A call's arguments in parameter order: the positional ones, then those named
    /// (`name => value`), then the defaults of the rest. None when the call does not fit
    /// (too many arguments, an unknown or repeated name, a positional argument after a
    /// named one, a parameter left without a value).
    pub fn call_arguments(&self, args: &[(Option<String>, String)]) -> Option<Vec<String>> {
        let mut out: Vec<Option<String>> = vec![None; self.params.len()];
        let mut named = false;
        for (k, (name, value)) in args.iter().enumerate() {
            let at = match name {
                None if named => return None,
                None => k,
                Some(n) => {
                    named = true;
                    self.params
                        .iter()
                        .position(|(p, _)| p.as_deref() == Some(n.as_str()))?
                }
            };
            let slot = out.get_mut(at)?;
            if slot.is_some() {
                return None;
            }
            *slot = Some(value.clone());
        }
        out.into_iter()
            .enumerate()
            .map(|(i, v)| v.or_else(|| self.defaults.get(i).cloned().flatten()))
            .collect()
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

    /// The SQL function with this `pg_proc` OID.
    pub fn sql_function_by_oid(&self, oid: u32) -> Option<SqlFunction> {
        self.sql_functions
            .by_name
            .read()
            .values()
            .find(|f| f.oid == oid)
            .cloned()
    }

    /// Every SQL function, by name.
    pub fn sql_functions(&self) -> Vec<SqlFunction> {
        self.sql_functions
            .by_name
            .read()
            .values()
            .cloned()
            .collect()
    }

    /// Give each function of an older store (stored without an OID) one from `next`.
    pub(crate) fn number_sql_functions(&self, mut next: impl FnMut() -> u32) {
        for f in self.sql_functions.by_name.write().values_mut() {
            if f.oid == 0 {
                f.oid = next();
            }
        }
    }

    pub fn create_sql_function(&self, mut f: SqlFunction, or_replace: bool) -> Result<()> {
        let old_oid = self
            .sql_functions
            .by_name
            .read()
            .get(&f.name)
            .map(|o| o.oid);
        f.oid = match old_oid {
            Some(o) if o != 0 => o,
            _ => self.reserve_oid(),
        };
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
