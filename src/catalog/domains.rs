//! Domains (`CREATE DOMAIN posint AS integer [DEFAULT e] [NOT NULL] [CONSTRAINT c] CHECK
//! (VALUE > 0)`), stored under `D{oid}` as JSON: a named base type with constraints.
//!
//! A column of a domain has the base type (its values, its wire type: Postgres too sends a
//! domain column's base type in RowDescription) and is linked to the domain by
//! [`RelationDesc::domains`](crate::catalog::RelationDesc::domains), so `pg_attribute`,
//! `format_type` and `\d` name the domain, and every row an INSERT, UPDATE, upsert or COPY
//! writes meets the domain's constraints as they are when it is written
//! ([`check_values`], from `engine/checks.rs`). A cast to the domain (`'5'::posint`) is the
//! cast to the base type followed by the same check (`catalog::pg_semantics`, through the
//! `weir_domain_check` function). A domain's DEFAULT is the column's when the column has
//! none of its own.
//!
//! Messages are Postgres': `value for domain posint violates check constraint
//! "posint_check"` (23514), `domain posint does not allow null values` (23502).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Field, Schema};
use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::error::{Result, WeirError, sqlstate};
use crate::sql::types::SqlType;
use crate::state::store::{Durability, Store, WriteBatch};

/// A column of a domain type, as its relation keeps it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ColumnDomain {
    pub column: String,
    /// The domain's OID.
    pub oid: u32,
    /// The column's default is the domain's (in `RelationDesc::defaults`, where every write
    /// finds it; not shown as the column's, and changed by `ALTER DOMAIN ... SET DEFAULT`).
    #[serde(default)]
    pub default: bool,
}

/// One CHECK constraint of a domain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DomainCheck {
    pub name: String,
    /// The expression's text, reading the value as `VALUE`.
    pub expr: String,
    /// `pg_constraint.oid`.
    pub oid: u32,
    /// Added `NOT VALID`: the columns' values were not checked when it was added.
    #[serde(default)]
    pub not_valid: bool,
}

/// What the catalog persists about a domain.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DomainDesc {
    pub oid: u32,
    /// The catalog key (`posint`, `app.posint`).
    pub name: String,
    #[serde(deserialize_with = "crate::sql::types::deserialize_stored")]
    pub base: SqlType,
    pub not_null: bool,
    /// `DEFAULT expr`: its SQL text.
    pub default: Option<String>,
    pub checks: Vec<DomainCheck>,
    pub owner: u32,
    /// `COMMENT ON DOMAIN`.
    #[serde(default)]
    pub comment: Option<String>,
}

impl DomainDesc {
    /// `pg_type.oid` of its array type (`_posint`), listed so clients that look it up find it.
    pub fn array_oid(&self) -> u32 {
        self.oid + 1
    }

    /// The name messages and `format_type` give it (`posint`, `app.posint`).
    pub fn shown(&self) -> String {
        crate::catalog::schemas::quote_relation(&self.name)
    }

    /// The name Postgres derives a constraint's from: the bare name.
    fn bare(&self) -> &str {
        crate::catalog::schemas::split_relation_name(&self.name).1
    }

    /// A name for a new CHECK, as Postgres chooses it: `<domain>_check`, then
    /// `<domain>_check1`, ... past the names taken.
    pub fn new_check_name(&self) -> String {
        let base = format!("{}_check", self.bare());
        let taken = |n: &str| self.checks.iter().any(|c| c.name == n);
        if !taken(&base) {
            return base;
        }
        (1..)
            .map(|i| format!("{base}{i}"))
            .find(|n| !taken(n))
            .unwrap_or(base)
    }

    /// `pg_type.typdefault`: the DEFAULT as Postgres deparses it (`'x'::text`).
    pub fn default_shown(&self) -> Option<String> {
        let text = self.default.as_deref()?.trim();
        let ty = crate::catalog::type_without_modifiers(&self.base);
        Some(crate::catalog::default_shown(text, Some(&ty)))
    }
}

fn key(oid: u32) -> Vec<u8> {
    let mut k = b"D".to_vec();
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

fn json<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| WeirError::internal(e.to_string()))
}

pub(crate) fn undefined(name: &str) -> WeirError {
    WeirError::undefined_type(name)
}

#[derive(Default)]
pub struct Domains {
    by_name: parking_lot::RwLock<BTreeMap<String, DomainDesc>>,
}

impl Domains {
    pub fn load(store: &dyn Store) -> Result<Domains> {
        let by_name = crate::catalog::load_json::<DomainDesc>(store, b"D", "domain")?
            .into_iter()
            .map(|d| (d.name.clone(), d))
            .collect();
        Ok(Domains {
            by_name: parking_lot::RwLock::new(by_name),
        })
    }

    /// The largest OID the domains hold (their constraints' included).
    pub fn max_oid(&self) -> Option<u32> {
        self.by_name
            .read()
            .values()
            .flat_map(|d| std::iter::once(d.oid + 1).chain(d.checks.iter().map(|c| c.oid)))
            .max()
    }
}

/// The values of one column checked against a domain's NOT NULL and CHECKs: the first that
/// fails is the statement's error, as Postgres reports it.
pub fn check_values(d: &DomainDesc, values: &ArrayRef) -> Result<()> {
    if values.is_empty() {
        return Ok(());
    }
    if d.not_null && values.null_count() > 0 {
        return Err(WeirError::new(
            sqlstate::NOT_NULL_VIOLATION,
            format!("domain {} does not allow null values", d.shown()),
        ));
    }
    if d.checks.is_empty() {
        return Ok(());
    }
    let schema = Arc::new(Schema::new(vec![Field::new(
        "value",
        values.data_type().clone(),
        true,
    )]));
    let batch = RecordBatch::try_new(schema.clone(), vec![values.clone()])?;
    for c in &d.checks {
        let check = crate::catalog::table_exprs::domain_check_expr(&schema, &c.expr)?;
        let out = check.evaluate(&batch)?.into_array(batch.num_rows())?;
        let Some(ok) = out.as_boolean_opt() else {
            continue;
        };
        if (0..ok.len()).any(|i| ok.is_valid(i) && !ok.value(i)) {
            return Err(WeirError::new(
                crate::error::sqlstate::CHECK_VIOLATION,
                format!(
                    "value for domain {} violates check constraint \"{}\"",
                    d.shown(),
                    c.name
                ),
            ));
        }
    }
    Ok(())
}

/// 42P16-like refusal of a CHECK that does not plan over the base type or is not boolean
/// (Postgres: 42804 `argument of CHECK must be type boolean`).
pub fn validate_check(base: &SqlType, expr: &str) -> Result<()> {
    let schema = Arc::new(Schema::new(vec![base.field("value", true)]));
    crate::catalog::table_exprs::domain_check_expr(&schema, expr).map(|_| ())
}

impl Catalog {
    pub fn domain(&self, name: &str) -> Option<DomainDesc> {
        self.domains.by_name.read().get(name).cloned()
    }

    pub fn domain_by_oid(&self, oid: u32) -> Option<DomainDesc> {
        self.domains
            .by_name
            .read()
            .values()
            .find(|d| d.oid == oid)
            .cloned()
    }

    /// The domain a column type the parser knew only by name is (see
    /// `EnumType::unresolved`).
    pub fn domain_of(&self, t: &SqlType) -> Option<DomainDesc> {
        match t {
            SqlType::Enum(e) if e.oid == 0 => self.domain(&e.name),
            _ => None,
        }
    }

    pub fn all_domains(&self) -> Vec<DomainDesc> {
        self.domains.by_name.read().values().cloned().collect()
    }

    /// The columns (relation, column) of this domain.
    pub fn domain_users(&self, oid: u32) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for e in self.entries() {
            for d in &e.desc.domains {
                if d.oid == oid {
                    out.push((e.desc.name.clone(), d.column.clone()));
                }
            }
        }
        out
    }

    /// A type name taken by a relation's row type, an enum, a domain or a built-in type.
    pub(crate) fn type_name_taken(&self, name: &str) -> bool {
        self.get(name).is_some()
            || self.enum_type(name).is_some()
            || self.domain(name).is_some()
            || crate::catalog::pg_catalog::builtin_type_oid(name).is_some()
    }

    /// `CREATE DOMAIN`: `checks` are (name or None, expression text); the OIDs are handed
    /// out here.
    pub fn create_domain(
        &self,
        name: &str,
        base: SqlType,
        not_null: bool,
        default: Option<String>,
        checks: Vec<(Option<String>, String, bool)>,
        owner: u32,
    ) -> Result<()> {
        self.check_schema_of(name)?;
        if self.type_name_taken(name) {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_OBJECT,
                format!("type \"{name}\" already exists"),
            ));
        }
        // (its array type's OID is the next one: OIDs are handed out OID_STEP apart)
        let mut d = DomainDesc {
            oid: self.reserve_oid(),
            name: name.to_owned(),
            base,
            not_null,
            default,
            checks: vec![],
            owner,
            comment: None,
        };
        for (n, expr, not_valid) in checks {
            validate_check(&d.base, &expr)?;
            let name = match n {
                Some(n) if d.checks.iter().any(|c| c.name == n) => {
                    return Err(WeirError::new(
                        sqlstate::DUPLICATE_OBJECT,
                        format!(
                            "constraint \"{n}\" for domain \"{}\" already exists",
                            d.bare()
                        ),
                    ));
                }
                Some(n) => n,
                None => d.new_check_name(),
            };
            d.checks.push(DomainCheck {
                name,
                expr,
                oid: self.reserve_oid(),
                not_valid,
            });
        }
        let mut domains = self.domains.by_name.write();
        let mut wb = WriteBatch::default();
        wb.put(key(d.oid), json(&d)?);
        self.store().commit(wb, Durability::Sync)?;
        domains.insert(name.to_owned(), d);
        drop(domains);
        self.bump_version();
        Ok(())
    }

    /// `DROP DOMAIN`: refused (2BP01) while a column has it. False when there is none.
    pub fn drop_domain(&self, name: &str) -> Result<bool> {
        let Some(d) = self.domain(name) else {
            return Ok(false);
        };
        let users = self.domain_users(d.oid);
        if !users.is_empty() {
            // (newest first, as Postgres lists them)
            let detail: Vec<String> = users
                .iter()
                .rev()
                .map(|(r, c)| {
                    format!(
                        "column {c} of table {} depends on type {}",
                        crate::catalog::schemas::quote_relation(r),
                        d.shown()
                    )
                })
                .collect();
            return Err(WeirError::new(
                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                format!(
                    "cannot drop type {} because other objects depend on it",
                    d.shown()
                ),
            )
            .with_detail(detail.join("\n"))
            .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
        }
        let mut domains = self.domains.by_name.write();
        let mut wb = WriteBatch::default();
        wb.delete(key(d.oid));
        self.store().commit(wb, Durability::Sync)?;
        domains.remove(name);
        drop(domains);
        self.bump_version();
        Ok(true)
    }

    /// `ALTER DOMAIN`, `COMMENT ON DOMAIN`: the domain changed by `change` and stored; a
    /// rename also renames the name its columns' relations are not keyed by (they keep its
    /// OID).
    pub fn alter_domain(
        &self,
        name: &str,
        change: impl FnOnce(&mut DomainDesc) -> Result<()>,
    ) -> Result<DomainDesc> {
        let mut domains = self.domains.by_name.write();
        let mut d = domains.get(name).cloned().ok_or_else(|| undefined(name))?;
        change(&mut d)?;
        if d.name != name
            && (domains.contains_key(&d.name)
                || self.get(&d.name).is_some()
                || self.enum_type(&d.name).is_some()
                || crate::catalog::pg_catalog::builtin_type_oid(&d.name).is_some())
        {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_OBJECT,
                format!("type \"{}\" already exists", d.name),
            ));
        }
        let mut wb = WriteBatch::default();
        wb.put(key(d.oid), json(&d)?);
        self.store().commit(wb, Durability::Sync)?;
        domains.remove(name);
        domains.insert(d.name.clone(), d.clone());
        drop(domains);
        self.bump_version();
        Ok(d)
    }

    /// The domains of schema `from` as they are in schema `to` (`ALTER SCHEMA from RENAME
    /// TO to`), put into `wb`; in place once it is committed, by
    /// [`Catalog::install_moved_domains`]. Columns name their domain by OID: they stay.
    pub(crate) fn domains_moved(
        &self,
        from: &str,
        to: &str,
        wb: &mut WriteBatch,
    ) -> Result<Vec<(String, DomainDesc)>> {
        let moved = crate::catalog::schemas::moved_to_schema(
            &self.domains.by_name.read(),
            from,
            to,
            |d, name| d.name = name,
        );
        for (_, d) in &moved {
            wb.put(key(d.oid), json(d)?);
        }
        Ok(moved)
    }

    /// Put domains moved by [`Catalog::domains_moved`] (committed) in place.
    pub(crate) fn install_moved_domains(&self, moved: Vec<(String, DomainDesc)>) {
        crate::catalog::schemas::put_moved(&mut self.domains.by_name.write(), moved, |d| {
            d.name.clone()
        });
    }

    /// The domains of a relation's columns, by column position (None: not a domain's).
    pub fn column_domains(&self, desc: &crate::catalog::RelationDesc) -> Vec<Option<DomainDesc>> {
        desc.columns
            .iter()
            .map(|c| {
                desc.domains
                    .iter()
                    .find(|d| d.column == c.name)
                    .and_then(|d| self.domain_by_oid(d.oid))
            })
            .collect()
    }

    /// The domain a column is of, by OID, for `pg_attribute.atttypid` and `format_type`.
    pub fn column_type_oid(
        &self,
        desc: &crate::catalog::RelationDesc,
        column: &str,
    ) -> Option<u32> {
        desc.domains
            .iter()
            .find(|d| d.column == column)
            .map(|d| d.oid)
    }
}
