//! User-defined types: enum types (`CREATE TYPE name AS ENUM ('a', 'b')`), stored under
//! `Y{oid}` as JSON. A column of an enum type carries the whole type in its
//! [`SqlType::Enum`] (labels included), so a table checks values and a query sorts them
//! without asking the catalog; `ALTER TYPE ... ADD VALUE` therefore rewrites the
//! descriptions of the relations that use the type, in the commit that adds the label.
//!
//! `pg_type` lists each type (`typtype 'e'`) and `pg_enum` its labels with Postgres' sort
//! orders (1, 2, 3 at creation; a label added BEFORE/AFTER another takes the midpoint).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::catalog::{Catalog, Entry, RelationDesc, catalog_key, roles};
use crate::error::{Result, WeirError, sqlstate};
use crate::sql::types::{EnumType, SqlType};
use crate::state::store::{Durability, Store, WriteBatch};

/// Postgres' NAMEDATALEN - 1: the longest label, in bytes.
const MAX_LABEL_BYTES: usize = 63;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EnumLabel {
    pub label: String,
    /// `pg_enum.enumsortorder`.
    pub sort_order: f32,
    /// `pg_enum.oid`.
    pub oid: u32,
}

/// What the catalog persists about an enum type.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TypeDesc {
    pub oid: u32,
    pub name: String,
    /// In sort order.
    pub labels: Vec<EnumLabel>,
    pub owner: u32,
    /// `COMMENT ON TYPE`.
    #[serde(default)]
    pub comment: Option<String>,
}

impl TypeDesc {
    /// The column type of this enum.
    pub fn sql_type(&self) -> SqlType {
        SqlType::Enum(EnumType {
            oid: self.oid,
            name: self.name.clone(),
            labels: self.labels.iter().map(|l| l.label.clone()).collect(),
        })
    }

    /// `pg_type.oid` of its array type (`_mood`), listed so clients that look it up find it.
    pub fn array_oid(&self) -> u32 {
        self.oid + 1
    }
}

/// Where an `ALTER TYPE ... ADD VALUE` puts the new label.
#[derive(Debug, Clone, PartialEq)]
pub enum LabelPosition {
    Last,
    Before(String),
    After(String),
}

fn key(oid: u32) -> Vec<u8> {
    let mut k = b"Y".to_vec();
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

fn check_label(label: &str) -> Result<()> {
    if label.len() > MAX_LABEL_BYTES {
        return Err(
            WeirError::new("42602", format!("invalid enum label \"{label}\""))
                .with_detail(format!("Labels must be {MAX_LABEL_BYTES} bytes or less.")),
        );
    }
    Ok(())
}

fn undefined_type(name: &str) -> WeirError {
    WeirError::undefined_type(name)
}

#[derive(Default)]
pub struct UserTypes {
    by_name: parking_lot::RwLock<BTreeMap<String, TypeDesc>>,
}

impl UserTypes {
    pub fn load(store: &dyn Store) -> Result<UserTypes> {
        let by_name = crate::catalog::load_json::<TypeDesc>(store, b"Y", "type")?
            .into_iter()
            .map(|t| (t.name.clone(), t))
            .collect();
        Ok(UserTypes {
            by_name: parking_lot::RwLock::new(by_name),
        })
    }

    /// The largest OID the types hold (labels included), for the OID counter.
    pub fn max_oid(&self) -> Option<u32> {
        self.by_name
            .read()
            .values()
            .flat_map(|t| std::iter::once(t.oid).chain(t.labels.iter().map(|l| l.oid)))
            .max()
    }
}

/// Every column type of a relation that is this enum (by OID) replaced by `to`.
pub(crate) fn retyped(desc: &RelationDesc, oid: u32, to: &SqlType) -> Option<RelationDesc> {
    let uses = |t: &SqlType| matches!(t, SqlType::Enum(e) if e.oid == oid);
    if !desc.columns.iter().any(|c| uses(&c.ty)) {
        return None;
    }
    let mut d = desc.clone();
    for c in &mut d.columns {
        if uses(&c.ty) {
            c.ty = to.clone();
        }
    }
    Some(d)
}

impl Catalog {
    /// The enum types of schema `from` as they are in schema `to` (`ALTER SCHEMA from
    /// RENAME TO to`), their descriptions put into `wb`; in place once it is committed, by
    /// [`Catalog::install_moved_enum_types`].
    pub(crate) fn enum_types_moved(
        &self,
        from: &str,
        to: &str,
        wb: &mut WriteBatch,
    ) -> Result<Vec<(String, TypeDesc)>> {
        let moved = crate::catalog::schemas::moved_to_schema(
            &self.user_types.by_name.read(),
            from,
            to,
            |t, name| t.name = name,
        );
        for (_, t) in &moved {
            wb.put(key(t.oid), roles::json(t)?);
        }
        Ok(moved)
    }

    /// Put enum types moved by [`Catalog::enum_types_moved`] (committed) in place.
    pub(crate) fn install_moved_enum_types(&self, moved: Vec<(String, TypeDesc)>) {
        crate::catalog::schemas::put_moved(&mut self.user_types.by_name.write(), moved, |t| {
            t.name.clone()
        });
    }

    pub fn enum_type(&self, name: &str) -> Option<TypeDesc> {
        self.user_types.by_name.read().get(name).cloned()
    }

    /// `format_type` / `::regtype` of a user type's OID (or its array type's).
    pub fn user_type_shown(&self, oid: u32) -> Option<String> {
        self.user_type_shown_on(oid, &["public".to_owned()])
    }

    /// [`user_type_shown`](Self::user_type_shown) under a search path (`schemas`, those
    /// of it that exist): a type the path finds by its bare name is shown bare, as
    /// Postgres' `format_type` does, others qualified.
    pub fn user_type_shown_on(&self, oid: u32, schemas: &[String]) -> Option<String> {
        let (key, t) = self
            .user_types()
            .into_iter()
            .find(|(_, t)| *t == oid || t + 1 == oid)?;
        let name =
            crate::catalog::schemas::shown_on_path(&key, schemas, |k| self.user_type_exists(k));
        Some(if t != oid { format!("{name}[]") } else { name })
    }

    /// Every user type, enum types and domains: (catalog key, OID); its array type's OID
    /// is the next one.
    pub fn user_types(&self) -> Vec<(String, u32)> {
        self.user_types
            .by_name
            .read()
            .values()
            .map(|t| (t.name.clone(), t.oid))
            .chain(self.all_domains().into_iter().map(|d| (d.name, d.oid)))
            .collect()
    }

    /// Whether an enum type or a domain has this catalog key.
    pub fn user_type_exists(&self, key: &str) -> bool {
        self.enum_type(key).is_some() || self.domain(key).is_some()
    }

    /// The columns (relation, column) of a user type (an enum's or a domain's).
    pub fn user_type_users(&self, oid: u32) -> Vec<(String, String)> {
        let mut out = self.enum_type_users(oid);
        out.extend(self.domain_users(oid));
        out
    }

    /// The OID of a user type by name (`mood`, `public.mood`, `mood[]`).
    pub fn user_type_oid(&self, name: &str) -> Option<u32> {
        let n = name.trim_start_matches("public.");
        let (n, array) = match n.strip_suffix("[]") {
            Some(e) => (e, true),
            None => (n, false),
        };
        let n = n.trim_matches('"');
        if let Some(d) = self.domain(n) {
            return Some(if array { d.array_oid() } else { d.oid });
        }
        let t = self.enum_type(n)?;
        Some(if array { t.array_oid() } else { t.oid })
    }

    pub fn enum_types(&self) -> Vec<TypeDesc> {
        self.user_types.by_name.read().values().cloned().collect()
    }

    /// The columns (relation, column) whose type is this enum.
    pub fn enum_type_users(&self, oid: u32) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for e in self.entries() {
            for c in &e.desc.columns {
                if matches!(&c.ty, SqlType::Enum(t) if t.oid == oid) {
                    out.push((e.desc.name.clone(), c.name.clone()));
                }
            }
        }
        out
    }

    /// A column type as a statement names it: the built-in types, and enum types by name
    /// (`mood`, `public.mood`).
    pub fn resolve_type(&self, dt: &datafusion::sql::sqlparser::ast::DataType) -> Result<SqlType> {
        use datafusion::sql::sqlparser::ast;
        match dt {
            ast::DataType::Custom(name, args) if args.is_empty() => {
                if let Some(t) = self.enum_type(&user_type_name(name)) {
                    return Ok(t.sql_type());
                }
                // (a domain's values are its base type's)
                if let Some(d) = self.domain(&user_type_name(name)) {
                    return Ok(d.base);
                }
            }
            ast::DataType::Array(
                ast::ArrayElemTypeDef::SquareBracket(inner, _)
                | ast::ArrayElemTypeDef::AngleBracket(inner)
                | ast::ArrayElemTypeDef::Parenthesis(inner),
            ) if matches!(self.resolve_type(inner), Ok(SqlType::Enum(_))) => {
                return Err(WeirError::not_supported(format!(
                    "arrays of enum types ({dt}) are not supported"
                )));
            }
            _ => {}
        }
        SqlType::from_ast(dt)
    }

    /// A type the parser knew only by name (see `EnumType::unresolved`) looked up.
    pub fn resolve_sql_type(&self, t: &mut SqlType) -> Result<()> {
        if let SqlType::Array(inner) = t
            && let SqlType::Enum(e) = inner.as_ref()
        {
            if self.domain_of(inner).is_some() {
                return Err(WeirError::not_supported(format!(
                    "arrays of domains ({}[]) are not supported",
                    e.name
                )));
            }
            self.enum_type(&e.name)
                .ok_or_else(|| undefined_type(&format!("{}[]", e.name)))?;
            return Err(WeirError::not_supported(format!(
                "arrays of enum types ({}[]) are not supported",
                e.name
            )));
        }
        if let Some(d) = self.domain_of(t) {
            *t = d.base;
            return Ok(());
        }
        if let SqlType::Enum(e) = t
            && e.oid == 0
        {
            let found = self
                .enum_type(&e.name)
                .ok_or_else(|| undefined_type(&e.name))?;
            *t = found.sql_type();
        }
        Ok(())
    }

    pub fn create_enum_type(&self, name: &str, labels: &[String], owner: u32) -> Result<()> {
        self.check_schema_of(name)?;
        for (i, l) in labels.iter().enumerate() {
            check_label(l)?;
            if labels[..i].contains(l) {
                // (Postgres' answer: its pg_enum unique index refuses the second)
                return Err(WeirError::new(
                    sqlstate::UNIQUE_VIOLATION,
                    "duplicate key value violates unique constraint \"pg_enum_typid_label_index\"",
                ));
            }
        }
        let exists = || {
            WeirError::new(
                sqlstate::DUPLICATE_OBJECT,
                format!("type \"{name}\" already exists"),
            )
        };
        if self.get(name).is_some() || crate::catalog::pg_catalog::builtin_type_oid(name).is_some()
        {
            return Err(exists());
        }
        let mut types = self.user_types.by_name.write();
        if types.contains_key(name) {
            return Err(exists());
        }
        // the type, its array type, then one OID per label
        let oid = self.reserve_oid();
        let labels = labels
            .iter()
            .enumerate()
            .map(|(i, l)| EnumLabel {
                label: l.clone(),
                sort_order: (i + 1) as f32,
                oid: self.reserve_oid(),
            })
            .collect();
        let t = TypeDesc {
            oid,
            name: name.to_owned(),
            labels,
            owner,
            comment: None,
        };
        let mut wb = WriteBatch::default();
        wb.put(key(oid), roles::json(&t)?);
        self.store().commit(wb, Durability::Sync)?;
        types.insert(name.to_owned(), t);
        self.bump_version();
        Ok(())
    }

    /// `DROP TYPE`: refused (2BP01) while a column has the type. False when there is none.
    pub fn drop_enum_type(&self, name: &str) -> Result<bool> {
        let mut types = self.user_types.by_name.write();
        let Some(t) = types.get(name) else {
            return Ok(false);
        };
        let users = self.enum_type_users(t.oid);
        if !users.is_empty() {
            let detail: Vec<String> = users
                .iter()
                .rev()
                .map(|(r, c)| format!("column {c} of table {r} depends on type {name}"))
                .collect();
            return Err(WeirError::new(
                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                format!("cannot drop type {name} because other objects depend on it"),
            )
            .with_detail(detail.join("\n"))
            .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
        }
        let mut wb = WriteBatch::default();
        wb.delete(key(t.oid));
        self.store().commit(wb, Durability::Sync)?;
        types.remove(name);
        self.bump_version();
        Ok(true)
    }

    /// `ALTER TYPE name ADD VALUE [IF NOT EXISTS] 'label' [BEFORE | AFTER 'other']`: the
    /// type and every relation with a column of it change in one commit. False when
    /// IF NOT EXISTS found the label there.
    pub fn add_enum_label(
        &self,
        name: &str,
        label: &str,
        position: &LabelPosition,
        if_not_exists: bool,
    ) -> Result<bool> {
        check_label(label)?;
        let mut types = self.user_types.by_name.write();
        let mut t = types
            .get(name)
            .cloned()
            .ok_or_else(|| undefined_type(name))?;
        if t.labels.iter().any(|l| l.label == label) {
            if if_not_exists {
                return Ok(false);
            }
            return Err(WeirError::new(
                sqlstate::DUPLICATE_OBJECT,
                format!("enum label \"{label}\" already exists"),
            ));
        }
        let at = |other: &str| {
            t.labels
                .iter()
                .position(|l| l.label == other)
                .ok_or_else(|| {
                    WeirError::invalid_parameter(format!(
                        "\"{other}\" is not an existing enum label"
                    ))
                })
        };
        let (index, sort_order) = match position {
            LabelPosition::Last => (
                t.labels.len(),
                t.labels.last().map_or(1.0, |l| l.sort_order + 1.0),
            ),
            LabelPosition::Before(other) => {
                let i = at(other)?;
                let next = t.labels[i].sort_order;
                let prev = if i == 0 {
                    next - 1.0
                } else {
                    t.labels[i - 1].sort_order
                };
                (i, (prev + next) / 2.0)
            }
            LabelPosition::After(other) => {
                let i = at(other)?;
                let prev = t.labels[i].sort_order;
                let next = t.labels.get(i + 1).map_or(prev + 2.0, |l| l.sort_order);
                (i + 1, (prev + next) / 2.0)
            }
        };
        t.labels.insert(
            index,
            EnumLabel {
                label: label.to_owned(),
                sort_order,
                oid: self.reserve_oid(),
            },
        );
        self.replace_enum_type(&mut types, name, t)?;
        Ok(true)
    }

    /// `ALTER TYPE name RENAME TO new` / `RENAME VALUE 'a' TO 'b'` / `OWNER TO role`.
    pub fn alter_enum_type(
        &self,
        name: &str,
        change: impl FnOnce(&mut TypeDesc) -> Result<()>,
    ) -> Result<()> {
        let mut types = self.user_types.by_name.write();
        let mut t = types
            .get(name)
            .cloned()
            .ok_or_else(|| undefined_type(name))?;
        change(&mut t)?;
        if t.name != name
            && (types.contains_key(&t.name)
                || self.get(&t.name).is_some()
                || crate::catalog::pg_catalog::builtin_type_oid(&t.name).is_some())
        {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_OBJECT,
                format!("type \"{}\" already exists", t.name),
            ));
        }
        self.replace_enum_type(&mut types, name, t)
    }

    /// Persist a changed type and the relations using it (their column types carry it),
    /// in one commit; tables then check values against the new labels.
    fn replace_enum_type(
        &self,
        types: &mut BTreeMap<String, TypeDesc>,
        old_name: &str,
        t: TypeDesc,
    ) -> Result<()> {
        let new_type = t.sql_type();
        let mut st = self.state.write();
        let changed: Vec<(Arc<Entry>, RelationDesc)> = st
            .by_name
            .values()
            .filter_map(|e| retyped(&e.desc, t.oid, &new_type).map(|d| (e.clone(), d)))
            .collect();
        let mut wb = WriteBatch::default();
        wb.put(key(t.oid), roles::json(&t)?);
        for (_, d) in &changed {
            wb.put(catalog_key(d.oid), roles::json(d)?);
        }
        self.store().commit(wb, Durability::Sync)?;
        for (e, d) in changed {
            if let Some(table) = &e.table {
                table.set_column_types(d.columns.iter().map(|c| c.ty.clone()).collect());
            }
            st.by_name.insert(
                d.name.clone(),
                Arc::new(Entry {
                    desc: d,
                    table: e.table.clone(),
                }),
            );
        }
        st.version += 1;
        types.remove(old_name);
        types.insert(t.name.clone(), t);
        Ok(())
    }
}

/// A type name as written (`mood`, `public.mood`, `"Mood"`), as the catalog keys it.
pub fn user_type_name(name: &datafusion::sql::sqlparser::ast::ObjectName) -> String {
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident())
        .map(crate::sql::parser::normalize_ident)
        .collect();
    match parts.as_slice() {
        // (the session's search_path, when it holds a user schema)
        [n] => crate::sql::search_path::resolve(n).unwrap_or_else(|| n.clone()),
        // (a type of a user schema is keyed `app.mood`, as its relations are)
        [schema, n] | [_, schema, n] => crate::sql::parser::relation_key(Some(schema), n),
        _ => name.to_string(),
    }
}
