//! User schemas (`CREATE SCHEMA app`), stored under `N{oid}` as JSON.
//!
//! A relation in a user schema is keyed in the catalog by its qualified name, `app.users`
//! (`sql::parser::relation_name` writes `app.users`, `"app"."users"` and `weir.app.users`
//! so; a relation of `public` is keyed by its bare name). The key is the relation's
//! `RelationDesc::name`; [`split_relation_name`] gives its schema and bare name back for
//! the system tables, and [`quote_relation`] the name as SQL writes it. Because a dotted
//! key always means a schema, a relation of `public` cannot have a `.` in its name
//! ([`Catalog::create`] refuses a dotted name whose schema does not exist; the one whose
//! schema exists is that schema's relation).
//!
//! The schemas `public`, `pg_catalog` and `information_schema` are built in and not
//! listed here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::error::{Result, WeirError, sqlstate};
use crate::state::store::{Durability, Store, WriteBatch};

/// What the catalog persists about a user schema.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SchemaDesc {
    pub oid: u32,
    pub name: String,
    pub owner: u32,
    /// `COMMENT ON SCHEMA`.
    #[serde(default)]
    pub comment: Option<String>,
}

fn key(oid: u32) -> Vec<u8> {
    let mut k = b"N".to_vec();
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

/// A schema's description, put into `wb`.
fn put(wb: &mut WriteBatch, s: &SchemaDesc) -> Result<()> {
    wb.put(
        key(s.oid),
        serde_json::to_vec(s).map_err(|e| WeirError::internal(e.to_string()))?,
    );
    Ok(())
}

/// Store a schema's description (fsynced).
fn persist(store: &dyn Store, s: &SchemaDesc) -> Result<()> {
    let mut wb = WriteBatch::default();
    put(&mut wb, s)?;
    store.commit(wb, Durability::Sync)
}

/// The objects of a map keyed as relations are (enum types, domains: `app.mood`) that are
/// in schema `from`, renamed into schema `to` by `rename` (given the new key): `(key now,
/// object after)`, for `ALTER SCHEMA from RENAME TO to`.
pub(crate) fn moved_to_schema<T: Clone>(
    map: &BTreeMap<String, T>,
    from: &str,
    to: &str,
    rename: impl Fn(&mut T, String),
) -> Vec<(String, T)> {
    map.iter()
        .filter_map(|(k, t)| {
            let (schema, bare) = split_relation_name(k);
            (schema == from).then(|| {
                let mut moved = t.clone();
                rename(&mut moved, crate::sql::parser::relation_key(Some(to), bare));
                (k.clone(), moved)
            })
        })
        .collect()
}

/// Objects moved by [`moved_to_schema`] (once stored) in place of what they were.
pub(crate) fn put_moved<T>(
    map: &mut BTreeMap<String, T>,
    moved: Vec<(String, T)>,
    key: impl Fn(&T) -> String,
) {
    for (old, t) in moved {
        map.remove(&old);
        map.insert(key(&t), t);
    }
}

#[derive(Default)]
pub struct Schemas {
    by_name: parking_lot::RwLock<BTreeMap<String, SchemaDesc>>,
}

impl Schemas {
    pub fn load(store: &dyn Store) -> Result<Schemas> {
        let by_name = crate::catalog::load_json::<SchemaDesc>(store, b"N", "schema")?
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect();
        Ok(Schemas {
            by_name: parking_lot::RwLock::new(by_name),
        })
    }

    pub fn max_oid(&self) -> Option<u32> {
        self.by_name.read().values().map(|s| s.oid).max()
    }
}

/// A catalog key's schema and bare name: `app.users` is (`app`, `users`), `users` is
/// (`public`, `users`).
pub fn split_relation_name(key: &str) -> (&str, &str) {
    key.split_once('.').unwrap_or(("public", key))
}

/// A catalog key as SQL writes it: `users`, `app.users`, `"My App"."Users"`.
pub fn quote_relation(key: &str) -> String {
    use crate::sql::pg_text::quote_ident;
    match key.split_once('.') {
        Some((s, r)) => format!("{}.{}", quote_ident(s), quote_ident(r)),
        None => quote_ident(key),
    }
}

/// The schemas of a `search_path` value that exist, in its order (`public` among them
/// where it is named); `"$user"` is the schema named as the session's user, if one is.
pub fn path_schemas(catalog: &Catalog, path: &str, user: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for part in path.split(',') {
        let parts = crate::catalog::pg_catalog::name_parts(part);
        let [name] = parts.as_slice() else { continue };
        let name = if name == "$user" { user } else { name.as_str() };
        let known = name == "public" || catalog.user_schema(name).is_some();
        if known && !out.iter().any(|s| s == name) {
            out.push(name.to_owned());
        }
    }
    out
}

/// What applies a session's `search_path` to the names of a statement being parsed
/// (`sql/search_path.rs`); None when the path holds no user schema (names are public's).
pub fn path_resolver(
    catalog: &std::sync::Arc<Catalog>,
    path: &str,
    user: &str,
) -> Option<crate::sql::search_path::PathResolver> {
    let schemas = path_schemas(catalog, path, user);
    if !schemas.is_empty() && schemas.iter().all(|s| s == "public") {
        return None;
    }
    // (no schema of the path exists: nothing is created by an unqualified name; pg_dump's
    // `search_path = ''` qualifies every name it creates)
    let nowhere = schemas.is_empty();
    let create_in = schemas.first().filter(|s| *s != "public").cloned();
    let c = catalog.clone();
    Some(crate::sql::search_path::PathResolver {
        find: Box::new(move |n| {
            for s in &schemas {
                let key = crate::sql::parser::relation_key(Some(s), n);
                if c.name_in_use(&key) || c.user_type_exists(&key) {
                    return Some(key);
                }
            }
            // a relation or type of public when public is off the path: not found (42P01,
            // 42704), as in Postgres
            (c.name_in_use(n) || c.user_type_exists(n))
                .then(|| crate::sql::search_path::off_path_key(n))
        }),
        create_in,
        nowhere,
    })
}

/// Whether the search path (`path`, the schemas of it that exist) finds the object keyed
/// `key` by its bare name: its schema is the first of the path that has an object of that
/// name (`exists` says which keys are taken, relations or types). What decides how
/// `regclass` and `format_type` print a name and what `pg_table_is_visible` answers.
pub fn visible_on_path(key: &str, path: &[String], exists: impl Fn(&str) -> bool) -> bool {
    let (schema, bare) = split_relation_name(key);
    path.iter()
        .find(|s| exists(&crate::sql::parser::relation_key(Some(s), bare)))
        .is_some_and(|s| s == schema)
}

/// A catalog key as a search path shows it: bare (quoted where needed) when the path finds
/// it by that name, else qualified (`app.t`).
pub fn shown_on_path(key: &str, path: &[String], exists: impl Fn(&str) -> bool) -> String {
    match visible_on_path(key, path, exists) {
        true => crate::sql::pg_text::quote_ident(split_relation_name(key).1),
        false => qualified_relation(key),
    }
}

/// A catalog key with its schema always written: `public.users`, `app.users`.
pub fn qualified_relation(key: &str) -> String {
    use crate::sql::pg_text::quote_ident;
    let (s, r) = split_relation_name(key);
    format!("{}.{}", quote_ident(s), quote_ident(r))
}

impl Catalog {
    /// The user schemas, by name.
    pub fn user_schemas(&self) -> Vec<SchemaDesc> {
        self.schemas.by_name.read().values().cloned().collect()
    }

    pub fn user_schema(&self, name: &str) -> Option<SchemaDesc> {
        self.schemas.by_name.read().get(name).cloned()
    }

    /// `pg_namespace.oid` of a relation by its catalog key.
    pub fn namespace_of_relation(&self, key: &str) -> u32 {
        match key.split_once('.') {
            Some((s, _)) => self
                .user_schema(s)
                .map(|s| s.oid)
                .unwrap_or(crate::catalog::PUBLIC_NAMESPACE_OID),
            None => crate::catalog::PUBLIC_NAMESPACE_OID,
        }
    }

    /// A namespace's OID by name: the built-in ones and the user schemas.
    pub fn namespace_oid(&self, name: &str) -> Option<u32> {
        crate::catalog::pg_catalog::namespace_oid_of_name(name)
            .or_else(|| self.user_schema(name).map(|s| s.oid))
    }

    /// A namespace's name by OID: the built-in ones and the user schemas.
    pub fn namespace_name(&self, oid: u32) -> Option<String> {
        crate::catalog::pg_catalog::namespace_name_of_oid(oid)
            .map(str::to_owned)
            .or_else(|| {
                self.schemas
                    .by_name
                    .read()
                    .values()
                    .find(|s| s.oid == oid)
                    .map(|s| s.name.clone())
            })
    }

    /// A schema's description: `COMMENT ON SCHEMA`'s, public's as Postgres describes it.
    pub fn schema_comment(&self, oid: u32) -> Option<String> {
        if oid == crate::catalog::PUBLIC_NAMESPACE_OID {
            return Some("standard public schema".into());
        }
        self.user_schemas()
            .into_iter()
            .find(|s| s.oid == oid)
            .and_then(|s| s.comment)
    }

    /// Create a user schema (persisted, fsynced). The caller checked the name is free.
    pub fn create_schema(&self, name: &str, owner: u32) -> Result<()> {
        let mut schemas = self.schemas.by_name.write();
        if schemas.contains_key(name)
            || crate::catalog::pg_catalog::namespace_oid_of_name(name).is_some()
        {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_SCHEMA,
                format!("schema \"{name}\" already exists"),
            ));
        }
        let s = SchemaDesc {
            oid: self.reserve_oid(),
            name: name.to_owned(),
            owner,
            comment: None,
        };
        persist(self.store.as_ref(), &s)?;
        schemas.insert(name.to_owned(), s);
        drop(schemas);
        self.bump_version();
        Ok(())
    }

    /// Drop a user schema the caller emptied. False when it does not exist.
    pub fn drop_schema(&self, name: &str) -> Result<bool> {
        let mut schemas = self.schemas.by_name.write();
        let Some(s) = schemas.get(name) else {
            return Ok(false);
        };
        if let Some(e) = self
            .entries()
            .into_iter()
            .find(|e| split_relation_name(&e.desc.name).0 == name)
        {
            return Err(WeirError::internal(format!(
                "schema \"{name}\" still holds \"{}\"",
                e.desc.name
            )));
        }
        let mut wb = WriteBatch::default();
        wb.delete(key(s.oid));
        self.store.commit(wb, Durability::Sync)?;
        schemas.remove(name);
        drop(schemas);
        self.bump_version();
        Ok(true)
    }

    /// Give a user schema another owner.
    pub fn set_schema_owner(&self, name: &str, owner: u32) -> Result<()> {
        self.alter_schema(name, |s| s.owner = owner)
    }

    /// Set or clear a user schema's comment.
    pub fn set_schema_comment(&self, name: &str, comment: Option<&str>) -> Result<()> {
        self.alter_schema(name, |s| s.comment = comment.map(str::to_owned))
    }

    /// Change a user schema's description (persisted, fsynced).
    fn alter_schema(&self, name: &str, change: impl FnOnce(&mut SchemaDesc)) -> Result<()> {
        let mut schemas = self.schemas.by_name.write();
        let Some(s) = schemas.get_mut(name) else {
            return Err(WeirError::new(
                sqlstate::INVALID_SCHEMA_NAME,
                format!("schema \"{name}\" does not exist"),
            ));
        };
        let mut changed = s.clone();
        change(&mut changed);
        persist(self.store.as_ref(), &changed)?;
        *s = changed;
        drop(schemas);
        self.bump_version();
        Ok(())
    }

    /// Rename a user schema, its relations (`renamed`: their keys now and descriptions
    /// under the new schema, with `others`, what follows them: see
    /// `Engine::follow_renames`), its enum types and domains, in one commit. The columns of
    /// its enum types (anywhere) carry the type's new name.
    pub fn rename_schema(
        &self,
        from: &str,
        to: &str,
        renamed: Vec<(String, crate::catalog::RelationDesc)>,
        others: Vec<crate::catalog::RelationDesc>,
    ) -> Result<()> {
        let mut schemas = self.schemas.by_name.write();
        if schemas.contains_key(to)
            || crate::catalog::pg_catalog::namespace_oid_of_name(to).is_some()
        {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_SCHEMA,
                format!("schema \"{to}\" already exists"),
            ));
        }
        let Some(mut s) = schemas.get(from).cloned() else {
            return Err(WeirError::new(
                sqlstate::INVALID_SCHEMA_NAME,
                format!("schema \"{from}\" does not exist"),
            ));
        };
        s.name = to.to_owned();
        let mut wb = WriteBatch::default();
        put(&mut wb, &s)?;
        let types = self.enum_types_moved(from, to, &mut wb)?;
        let domains = self.domains_moved(from, to, &mut wb)?;
        // columns of the schema's enum types: of relations renamed, following, or else
        let mut renamed = renamed;
        let mut others = others;
        let retype = |d: &mut crate::catalog::RelationDesc| -> bool {
            let mut changed = false;
            for (_, t) in &types {
                if let Some(r) = crate::catalog::user_types::retyped(d, t.oid, &t.sql_type()) {
                    *d = r;
                    changed = true;
                }
            }
            changed
        };
        let mut retyped: Vec<String> = Vec::new();
        for d in renamed.iter_mut().map(|(_, d)| d).chain(others.iter_mut()) {
            if retype(d) {
                retyped.push(d.name.clone());
            }
        }
        for e in self.entries() {
            let listed = renamed.iter().any(|(o, _)| *o == e.desc.name)
                || others.iter().any(|d| d.name == e.desc.name);
            let mut d = e.desc.clone();
            if !listed && retype(&mut d) {
                retyped.push(d.name.clone());
                others.push(d);
            }
        }
        self.rename_relations(renamed, others, wb)?;
        for name in retyped {
            if let Some(e) = self.get(&name)
                && let Some(t) = &e.table
            {
                t.set_column_types(e.desc.columns.iter().map(|c| c.ty.clone()).collect());
            }
        }
        self.install_moved_enum_types(types);
        self.install_moved_domains(domains);
        schemas.remove(from);
        schemas.insert(to.to_owned(), s);
        drop(schemas);
        self.bump_version();
        Ok(())
    }

    /// The key of user type `key` moved to `schema` (`ALTER TYPE | DOMAIN ... SET SCHEMA`):
    /// 3F000 if the schema does not exist; the key it has when it is there already.
    pub fn type_in_schema(&self, key: &str, schema: &str) -> Result<String> {
        let to = crate::sql::parser::relation_key(Some(schema), split_relation_name(key).1);
        self.check_schema_of(&to)?;
        Ok(to)
    }

    /// 3F000 unless a relation key's schema (if it names one) exists.
    pub(crate) fn check_schema_of(&self, key: &str) -> Result<()> {
        match key.split_once('.') {
            Some((s, _)) if self.user_schema(s).is_none() => Err(WeirError::new(
                sqlstate::INVALID_SCHEMA_NAME,
                format!("schema \"{s}\" does not exist"),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_and_quote() {
        assert_eq!(split_relation_name("users"), ("public", "users"));
        assert_eq!(split_relation_name("app.users"), ("app", "users"));
        assert_eq!(quote_relation("app.users"), "app.users");
        assert_eq!(quote_relation("My App.Users"), "\"My App\".\"Users\"");
        assert_eq!(quote_relation("users"), "users");
    }
}
