//! Roles, memberships and privileges: who may log in, with which password verifier, and
//! what each role may do to each relation.
//!
//! Persisted in the store beside the relations: a role under `A{oid}` (JSON, its SCRAM
//! verifier included, never a clear-text password), the ACL of schema `public` under
//! `S{2200}`. A relation's owner and ACL are part of its [`RelationDesc`]. Role OIDs come
//! from the catalog's OID counter, so they never collide with relations'. The bootstrap
//! superuser has OID 10, as in Postgres.
//!
//! Privileges follow Postgres: a superuser passes every check; a relation without an
//! explicit ACL (`relacl` NULL) grants everything to its owner only; once granted or
//! revoked, the ACL lists every grant, the owner's included; a role has the privileges of
//! every role it is a member of (transitively, through roles with INHERIT), and of PUBLIC.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::catalog::{Catalog, Entry, OID_STEP, RelationDesc, SUPERUSER_OID, catalog_key};
use crate::error::{Result, WeirError, sqlstate};
use crate::state::store::{Durability, WriteBatch};

/// The OID that stands for PUBLIC in ACLs (as Postgres' `ACL_ID_PUBLIC`).
pub const PUBLIC: u32 = 0;

/// `pg_monitor`: a member of the three roles after it (what monitoring agents are granted).
pub const PG_MONITOR: u32 = 3373;
/// `pg_signal_backend`: may cancel and terminate other roles' (not superusers') sessions.
pub const PG_SIGNAL_BACKEND: u32 = 4200;
/// `pg_checkpoint`: may run CHECKPOINT.
pub const PG_CHECKPOINT: u32 = 4544;
/// `pg_database_owner`: the database's owner, implicitly; owner of schema public.
pub const PG_DATABASE_OWNER: u32 = 6171;
/// `pg_read_all_data`: SELECT on every table, view and sequence.
pub const PG_READ_ALL_DATA: u32 = 6181;
/// `pg_write_all_data`: INSERT, UPDATE and DELETE on every table, view and sequence.
pub const PG_WRITE_ALL_DATA: u32 = 6182;

/// Postgres 15's predefined roles with their OIDs: NOLOGIN roles, there in every data
/// directory, that give what their names say to the roles granted them (a role is not
/// stored until it changes: a membership granted to one is). Names starting with `pg_` are
/// reserved for them (42939).
pub const PREDEFINED: [(u32, &str); 12] = [
    (PG_MONITOR, "pg_monitor"),
    (3374, "pg_read_all_settings"),
    (3375, "pg_read_all_stats"),
    (3377, "pg_stat_scan_tables"),
    (PG_SIGNAL_BACKEND, "pg_signal_backend"),
    (PG_CHECKPOINT, "pg_checkpoint"),
    (4569, "pg_read_server_files"),
    (4570, "pg_write_server_files"),
    (4571, "pg_execute_server_program"),
    (PG_DATABASE_OWNER, "pg_database_owner"),
    (PG_READ_ALL_DATA, "pg_read_all_data"),
    (PG_WRITE_ALL_DATA, "pg_write_all_data"),
];

/// Whether a role is one of Postgres' predefined roles.
pub fn is_predefined(oid: u32) -> bool {
    PREDEFINED.iter().any(|(o, _)| *o == oid)
}

/// 42939 for a role name starting with `pg_` (`detail`: why, in Postgres' words).
pub fn reserved_role_name(name: &str, detail: &str) -> WeirError {
    WeirError::new("42939", format!("role name \"{name}\" is reserved")).with_detail(detail)
}
/// The name of the bootstrap superuser (OID [`SUPERUSER_OID`]).
pub const DEFAULT_SUPERUSER: &str = "weir";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RoleDesc {
    pub oid: u32,
    pub name: String,
    pub superuser: bool,
    pub login: bool,
    pub createrole: bool,
    pub createdb: bool,
    #[serde(default = "yes")]
    pub inherit: bool,
    /// SCRAM-SHA-256 verifier in Postgres' text form (see `scram.rs`).
    #[serde(default)]
    pub password: Option<String>,
    /// Roles this role is a member of.
    #[serde(default)]
    pub member_of: Vec<Membership>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Membership {
    pub role: u32,
    pub grantor: u32,
    pub admin: bool,
}

/// Table privileges, in Postgres' ACL letter order (`arwdDxt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    Insert,
    Select,
    Update,
    Delete,
    Truncate,
    References,
    Trigger,
}

impl Privilege {
    pub const ALL: [Privilege; 7] = [
        Privilege::Insert,
        Privilege::Select,
        Privilege::Update,
        Privilege::Delete,
        Privilege::Truncate,
        Privilege::References,
        Privilege::Trigger,
    ];

    fn bit(self) -> u8 {
        1 << (self as u8)
    }

    fn letter(self) -> char {
        match self {
            Privilege::Insert => 'a',
            Privilege::Select => 'r',
            Privilege::Update => 'w',
            Privilege::Delete => 'd',
            Privilege::Truncate => 'D',
            Privilege::References => 'x',
            Privilege::Trigger => 't',
        }
    }

    pub fn keyword(self) -> &'static str {
        match self {
            Privilege::Insert => "INSERT",
            Privilege::Select => "SELECT",
            Privilege::Update => "UPDATE",
            Privilege::Delete => "DELETE",
            Privilege::Truncate => "TRUNCATE",
            Privilege::References => "REFERENCES",
            Privilege::Trigger => "TRIGGER",
        }
    }

    pub fn from_keyword(w: &str) -> Option<Privilege> {
        Privilege::ALL
            .into_iter()
            .find(|p| p.keyword().eq_ignore_ascii_case(w))
    }

    pub fn all_bits() -> u8 {
        Privilege::ALL.iter().fold(0, |b, p| b | p.bit())
    }

    pub fn bits(privs: &[Privilege]) -> u8 {
        privs.iter().fold(0, |b, p| b | p.bit())
    }
}

/// One ACL entry: `grantee=privileges/grantor`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AclItem {
    /// [`PUBLIC`] for everyone.
    pub grantee: u32,
    pub grantor: u32,
    pub privileges: u8,
}

/// Schema-level privileges of `public` (the only schema).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SchemaAcl {
    /// Roles granted CREATE (PUBLIC included as [`PUBLIC`]).
    pub create: Vec<u32>,
}

pub(crate) fn role_key(oid: u32) -> Vec<u8> {
    let mut k = b"A".to_vec();
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

const SCHEMA_ACL_KEY: &[u8] = b"S\x00\x00\x08\x98";

pub(crate) fn json<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| WeirError::internal(e.to_string()))
}

pub fn undefined_role(name: &str) -> WeirError {
    WeirError::new(
        sqlstate::UNDEFINED_OBJECT,
        format!("role \"{name}\" does not exist"),
    )
}

pub fn denied(message: impl Into<String>) -> WeirError {
    WeirError::new(sqlstate::INSUFFICIENT_PRIVILEGE, message)
}

/// What the catalog keeps about roles (inside its state lock).
#[derive(Debug, Default)]
pub(crate) struct Roles {
    pub by_oid: std::collections::BTreeMap<u32, RoleDesc>,
    pub schema: SchemaAcl,
    /// The roles were created by this process (a new data directory): the bootstrap
    /// superuser's name and password flags apply.
    pub fresh: bool,
}

impl Roles {
    /// Load roles from the store; a store without any gets the bootstrap superuser.
    pub(crate) fn load(store: &dyn crate::state::store::Store) -> Result<Roles> {
        let mut roles = Roles::default();
        store.scan_prefix(b"A", &mut |_, v| {
            let r: RoleDesc = serde_json::from_slice(v)
                .map_err(|e| WeirError::internal(format!("corrupt role entry: {e}")))?;
            roles.by_oid.insert(r.oid, r);
            Ok(())
        })?;
        if let Some(v) = store.get(SCHEMA_ACL_KEY)? {
            roles.schema = serde_json::from_slice(&v)
                .map_err(|e| WeirError::internal(format!("corrupt schema ACL: {e}")))?;
        }
        if roles.by_oid.is_empty() {
            let boot = RoleDesc {
                oid: SUPERUSER_OID,
                name: DEFAULT_SUPERUSER.to_owned(),
                superuser: true,
                login: true,
                createrole: true,
                createdb: true,
                inherit: true,
                password: None,
                member_of: Vec::new(),
            };
            let mut wb = WriteBatch::default();
            wb.put(role_key(boot.oid), json(&boot)?);
            store.commit(wb, Durability::Sync)?;
            roles.by_oid.insert(boot.oid, boot);
            roles.fresh = true;
        }
        // the predefined roles (stored only once changed: those kept their memberships)
        for (oid, name) in PREDEFINED {
            if roles.by_oid.contains_key(&oid) || roles.by_name(name).is_some() {
                continue;
            }
            let member_of = match oid {
                PG_MONITOR => [3374, 3375, 3377]
                    .into_iter()
                    .map(|role| Membership {
                        role,
                        grantor: SUPERUSER_OID,
                        admin: false,
                    })
                    .collect(),
                _ => Vec::new(),
            };
            roles.by_oid.insert(
                oid,
                RoleDesc {
                    oid,
                    name: name.to_owned(),
                    superuser: false,
                    login: false,
                    createrole: false,
                    createdb: false,
                    inherit: true,
                    password: None,
                    member_of,
                },
            );
        }
        Ok(roles)
    }

    fn by_name(&self, name: &str) -> Option<&RoleDesc> {
        self.by_oid.values().find(|r| r.name == name)
    }

    /// `role` and every role whose privileges it has (memberships through INHERIT roles).
    fn effective(&self, role: u32) -> BTreeSet<u32> {
        let mut out = BTreeSet::from([role]);
        let mut todo = vec![role];
        while let Some(r) = todo.pop() {
            let Some(desc) = self.by_oid.get(&r) else {
                continue;
            };
            if !desc.inherit {
                continue;
            }
            for m in &desc.member_of {
                if out.insert(m.role) {
                    todo.push(m.role);
                }
            }
        }
        out
    }

    /// `role` and every role it is a member of, whatever INHERIT says (SET ROLE).
    fn memberships(&self, role: u32) -> BTreeSet<u32> {
        let mut out = BTreeSet::from([role]);
        let mut todo = vec![role];
        while let Some(r) = todo.pop() {
            for m in self
                .by_oid
                .get(&r)
                .map(|d| d.member_of.as_slice())
                .unwrap_or(&[])
            {
                if out.insert(m.role) {
                    todo.push(m.role);
                }
            }
        }
        out
    }

    fn is_superuser(&self, role: u32) -> bool {
        self.by_oid.get(&role).is_some_and(|r| r.superuser)
    }
}

/// The effective privileges of a role on a relation, as a bit set.
fn relation_bits(roles: &Roles, role: u32, desc: &RelationDesc) -> u8 {
    if roles.is_superuser(role) {
        return Privilege::all_bits();
    }
    let mine = roles.effective(role);
    let granted = match &desc.acl {
        None => {
            if mine.contains(&desc.owner) {
                Privilege::all_bits()
            } else {
                0
            }
        }
        Some(items) => items
            .iter()
            .filter(|i| i.grantee == PUBLIC || mine.contains(&i.grantee))
            .fold(0, |b, i| b | i.privileges),
    };
    // what the predefined roles give on every relation
    let mut all = 0;
    if mine.contains(&PG_READ_ALL_DATA) {
        all |= Privilege::Select.bit();
    }
    if mine.contains(&PG_WRITE_ALL_DATA) {
        all |= Privilege::bits(&[Privilege::Insert, Privilege::Update, Privilege::Delete]);
    }
    granted | all
}

impl Catalog {
    pub fn roles(&self) -> Vec<RoleDesc> {
        self.state.read().roles.by_oid.values().cloned().collect()
    }

    pub fn role(&self, name: &str) -> Option<RoleDesc> {
        self.state.read().roles.by_name(name).cloned()
    }

    pub fn role_by_oid(&self, oid: u32) -> Option<RoleDesc> {
        self.state.read().roles.by_oid.get(&oid).cloned()
    }

    pub fn role_name(&self, oid: u32) -> Option<String> {
        if oid == PUBLIC {
            return Some("PUBLIC".into());
        }
        self.state
            .read()
            .roles
            .by_oid
            .get(&oid)
            .map(|r| r.name.clone())
    }

    pub fn superuser_name(&self) -> String {
        self.role_name(SUPERUSER_OID)
            .unwrap_or_else(|| DEFAULT_SUPERUSER.to_owned())
    }

    pub fn is_superuser(&self, role: u32) -> bool {
        self.state.read().roles.is_superuser(role)
    }

    /// Whether `role` may act as `target` (SET ROLE): a superuser, or a member of it.
    pub fn is_member_of(&self, role: u32, target: u32) -> bool {
        let st = self.state.read();
        st.roles.is_superuser(role) || st.roles.memberships(role).contains(&target)
    }

    /// Whether `role` is a member of `of`, directly or through other roles (no superuser
    /// shortcut: for refusing circular memberships).
    pub fn is_member_of_strict(&self, role: u32, of: u32) -> bool {
        self.state.read().roles.memberships(role).contains(&of)
    }

    /// Whether `role` has the privileges of `owner` (owns, or inherits from the owner).
    pub fn has_owner_rights(&self, role: u32, owner: u32) -> bool {
        let st = self.state.read();
        st.roles.is_superuser(role) || st.roles.effective(role).contains(&owner)
    }

    pub fn has_privilege(&self, role: u32, desc: &RelationDesc, p: Privilege) -> bool {
        relation_bits(&self.state.read().roles, role, desc) & p.bit() != 0
    }

    /// Whether `role` may create relations in schema public.
    pub fn may_create(&self, role: u32) -> bool {
        let st = self.state.read();
        if st.roles.is_superuser(role) {
            return true;
        }
        let mine = st.roles.effective(role);
        st.roles
            .schema
            .create
            .iter()
            .any(|g| *g == PUBLIC || mine.contains(g))
    }

    /// `nspacl` of schema public, Postgres' text form.
    pub fn schema_acl(&self) -> Vec<String> {
        // (its owner is pg_database_owner, as in Postgres 15: USAGE is everyone's, CREATE
        // the owner's and its grantees')
        let st = self.state.read();
        let owner = "pg_database_owner";
        let mut out = vec![format!("{owner}=UC/{owner}")];
        let public_create = st.roles.schema.create.contains(&PUBLIC);
        out.push(format!(
            "={}/{owner}",
            if public_create { "UC" } else { "U" }
        ));
        for g in st.roles.schema.create.iter().filter(|g| **g != PUBLIC) {
            let name = st
                .roles
                .by_oid
                .get(g)
                .map(|r| r.name.clone())
                .unwrap_or_default();
            out.push(format!("{name}=C/{owner}"));
        }
        out
    }

    /// `relacl` of a relation, Postgres' text form (None: the default ACL).
    pub fn relation_acl(&self, desc: &RelationDesc) -> Option<Vec<String>> {
        let items = desc.acl.as_ref()?;
        let st = self.state.read();
        let name = |oid: u32| {
            if oid == PUBLIC {
                String::new()
            } else {
                st.roles
                    .by_oid
                    .get(&oid)
                    .map(|r| r.name.clone())
                    .unwrap_or_else(|| oid.to_string())
            }
        };
        Some(
            items
                .iter()
                .filter(|i| i.privileges != 0)
                .map(|i| {
                    let letters: String = Privilege::ALL
                        .iter()
                        .filter(|p| i.privileges & p.bit() != 0)
                        .map(|p| p.letter())
                        .collect();
                    format!("{}={}/{}", name(i.grantee), letters, name(i.grantor))
                })
                .collect(),
        )
    }

    fn persist_role(&self, wb: &mut WriteBatch, r: &RoleDesc) -> Result<()> {
        wb.put(role_key(r.oid), json(r)?);
        Ok(())
    }

    /// Create a role; its OID comes from the catalog's counter.
    pub fn create_role(&self, mut desc: RoleDesc) -> Result<u32> {
        let mut st = self.state.write();
        if st.roles.by_name(&desc.name).is_some() {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_OBJECT,
                format!("role \"{}\" already exists", desc.name),
            ));
        }
        desc.oid = st.next_oid;
        let mut wb = WriteBatch::default();
        self.persist_role(&mut wb, &desc)?;
        self.store.commit(wb, Durability::Sync)?;
        st.next_oid += OID_STEP;
        st.version += 1;
        let oid = desc.oid;
        st.roles.by_oid.insert(oid, desc);
        Ok(oid)
    }

    /// Change a role (attributes, password, name, memberships) and persist it.
    pub fn alter_role(
        &self,
        oid: u32,
        change: impl FnOnce(&mut RoleDesc) -> Result<()>,
    ) -> Result<()> {
        let mut st = self.state.write();
        let Some(mut desc) = st.roles.by_oid.get(&oid).cloned() else {
            return Err(undefined_role(&oid.to_string()));
        };
        let old_name = desc.name.clone();
        change(&mut desc)?;
        if desc.name != old_name && st.roles.by_name(&desc.name).is_some() {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_OBJECT,
                format!("role \"{}\" already exists", desc.name),
            ));
        }
        let mut wb = WriteBatch::default();
        self.persist_role(&mut wb, &desc)?;
        self.store.commit(wb, Durability::Sync)?;
        st.version += 1;
        st.roles.by_oid.insert(oid, desc);
        Ok(())
    }

    /// Drop a role: refused (2BP01) while it owns relations or holds privileges on them.
    pub fn drop_role(&self, oid: u32) -> Result<()> {
        let mut st = self.state.write();
        let Some(desc) = st.roles.by_oid.get(&oid).cloned() else {
            return Err(undefined_role(&oid.to_string()));
        };
        let mut owned = Vec::new();
        let mut granted = Vec::new();
        for e in st.by_name.values() {
            if e.desc.owner == oid {
                owned.push(format!("owner of {} {}", e.desc.kind.noun(), e.desc.name));
            }
            if e.desc
                .acl
                .as_ref()
                .is_some_and(|a| a.iter().any(|i| i.grantee == oid || i.grantor == oid))
            {
                granted.push(format!(
                    "privileges for {} {}",
                    e.desc.kind.noun(),
                    e.desc.name
                ));
            }
        }
        if st.roles.schema.create.contains(&oid) {
            granted.push("privileges for schema public".into());
        }
        if !owned.is_empty() || !granted.is_empty() {
            owned.extend(granted);
            return Err(WeirError::new(
                sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                format!(
                    "role \"{}\" cannot be dropped because some objects depend on it",
                    desc.name
                ),
            )
            .with_detail(owned.join("\n")));
        }
        let mut wb = WriteBatch::default();
        wb.delete(role_key(oid));
        // memberships in the dropped role go with it
        let mut changed = Vec::new();
        for r in st.roles.by_oid.values() {
            if r.member_of
                .iter()
                .any(|m| m.role == oid || m.grantor == oid)
            {
                let mut r = r.clone();
                r.member_of.retain(|m| m.role != oid);
                for m in &mut r.member_of {
                    if m.grantor == oid {
                        m.grantor = SUPERUSER_OID;
                    }
                }
                self.persist_role(&mut wb, &r)?;
                changed.push(r);
            }
        }
        self.store.commit(wb, Durability::Sync)?;
        st.roles.by_oid.remove(&oid);
        for r in changed {
            st.roles.by_oid.insert(r.oid, r);
        }
        st.version += 1;
        Ok(())
    }

    /// Set the CREATE grantees of schema public.
    pub fn alter_schema_acl(&self, change: impl FnOnce(&mut SchemaAcl)) -> Result<()> {
        let mut st = self.state.write();
        let mut acl = st.roles.schema.clone();
        change(&mut acl);
        let mut wb = WriteBatch::default();
        wb.put(SCHEMA_ACL_KEY.to_vec(), json(&acl)?);
        self.store.commit(wb, Durability::Sync)?;
        st.roles.schema = acl;
        st.version += 1;
        Ok(())
    }

    /// Change a relation's description (owner, ACL) and persist it.
    pub fn alter_relation(
        &self,
        name: &str,
        change: impl FnOnce(&mut RelationDesc) -> Result<()>,
    ) -> Result<()> {
        let mut st = self.state.write();
        let Some(entry) = st.by_name.get(name).cloned() else {
            return Err(WeirError::undefined_table(name));
        };
        let mut desc = entry.desc.clone();
        change(&mut desc)?;
        let mut wb = WriteBatch::default();
        wb.put(catalog_key(desc.oid), json(&desc)?);
        self.store.commit(wb, Durability::Sync)?;
        st.version += 1;
        st.by_name.insert(
            name.to_owned(),
            Arc::new(Entry {
                desc,
                table: entry.table.clone(),
            }),
        );
        Ok(())
    }

    /// The bootstrap superuser at first start: `--superuser NAME` and its password. On a
    /// data directory that has roles already, the flags change nothing (logged).
    pub fn bootstrap_superuser(&self, name: Option<&str>, password: Option<&str>) -> Result<()> {
        let fresh = self.state.read().roles.fresh;
        if !fresh {
            let current = self.superuser_name();
            if name.is_some_and(|n| n != current) {
                tracing::warn!(superuser = %current, "--superuser applies at the first start of a data directory only; its superuser stays");
            }
            if password.is_some() {
                tracing::info!(superuser = %current, "the superuser password given applies at the first start only; change it with ALTER ROLE ... PASSWORD");
            }
            return Ok(());
        }
        if name.is_none() && password.is_none() {
            return Ok(());
        }
        let verifier = password
            .map(crate::catalog::scram::verifier_for)
            .transpose()
            .map_err(|e| WeirError::invalid_parameter(e.to_owned()))?;
        self.alter_role(SUPERUSER_OID, |r| {
            if let Some(n) = name {
                r.name = n.to_owned();
            }
            if let Some(v) = verifier {
                r.password = Some(v.to_string());
            }
            Ok(())
        })
    }
}
