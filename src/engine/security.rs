//! Who may run a statement, and the statements that change who may do what.
//!
//! [`Engine::check_privileges`] runs before every statement, against the session's
//! current role (`SET ROLE`, else the session user), with Postgres' rules: reading a
//! relation needs SELECT on it, changing one INSERT/UPDATE/DELETE (and SELECT when an
//! UPDATE/DELETE reads it in WHERE), COPY and SUBSCRIBE the same as the statement they
//! stand for; creating needs CREATE on schema public; DROP, ALTER and GRANT need
//! ownership. A materialized view runs with its owner's rights: reading it needs SELECT on
//! the view only. System catalogs are readable by everyone.

use datafusion::sql::sqlparser::ast;

use crate::catalog::SUPERUSER_OID;
use crate::catalog::roles::{
    AclItem, Membership, PUBLIC, Privilege, RoleDesc, denied, undefined_role,
};
use crate::catalog::scram::verifier_for;
use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::client_stmts::{Copy, CopySource, CursorQuery};
use crate::sql::parser::{DropKind, Statement, relation_name};
use crate::sql::security::{Grantee, RoleOption, SecurityStmt, TableTarget};

const OBJECT_IN_USE: &str = "55006";

/// The error a role without `p` on a relation gets.
pub fn permission_denied(kind: crate::catalog::RelationKind, name: &str) -> WeirError {
    use crate::catalog::RelationKind as K;
    let noun = match kind {
        K::MaterializedView => "materialized view",
        K::Source => "source",
        K::Sink => "sink",
        K::View => "view",
        K::Sequence => "sequence",
        K::Table | K::AppendOnlyTable => "table",
    };
    denied(format!("permission denied for {noun} {name}"))
}

fn table_factor_name(t: &ast::TableFactor) -> Option<String> {
    match t {
        ast::TableFactor::Table { name, .. } => relation_name(name).ok(),
        _ => None,
    }
}

impl Engine {
    /// A relation's connector options with its secrets resolved.
    pub(crate) fn connector_options(
        &self,
        list: &[(String, String)],
    ) -> Result<crate::connectors::Options> {
        Ok(crate::connectors::options(
            &self.catalog.resolve_secrets(list)?,
        ))
    }

    /// A role may name only secrets it owns in connector options.
    fn require_secrets(&self, role: u32, options: &[(String, String)]) -> Result<()> {
        for name in crate::catalog::secrets::secret_refs(options) {
            self.require_secret_owner(role, &name)?;
        }
        Ok(())
    }

    fn require(&self, role: u32, name: &str, p: Privilege) -> Result<()> {
        // names that are not relations (CTEs, system catalogs) are planned or refused later
        let Some(entry) = self.catalog.get(name) else {
            return Ok(());
        };
        if self.catalog.has_privilege(role, &entry.desc, p) {
            Ok(())
        } else {
            Err(permission_denied(entry.desc.kind, name))
        }
    }

    fn require_select_all(&self, role: u32, stmt: &ast::Statement) -> Result<()> {
        for name in super::referenced_relations(stmt) {
            self.require(role, &name, Privilege::Select)?;
        }
        Ok(())
    }

    fn require_select_query(&self, role: u32, q: &ast::Query) -> Result<()> {
        self.require_select_all(role, &ast::Statement::Query(Box::new(q.clone())))
    }

    fn require_owner(&self, role: u32, name: &str) -> Result<()> {
        let Some(entry) = self.catalog.get(name) else {
            return Ok(());
        };
        if self.catalog.has_owner_rights(role, entry.desc.owner) {
            Ok(())
        } else {
            Err(denied(format!(
                "must be owner of {} {name}",
                entry.desc.kind.noun()
            )))
        }
    }

    /// May `role` create relation `key`: in public as [`Self::require_create`] says; in a
    /// user schema when it owns the schema.
    fn require_create_of(&self, role: u32, key: &str) -> Result<()> {
        match key.split_once('.') {
            None => self.require_create(role),
            Some((schema, _)) => match self.catalog.user_schema(schema) {
                Some(s) if s.owner != role => {
                    Err(denied(format!("permission denied for schema {schema}")))
                }
                _ => Ok(()),
            },
        }
    }

    fn require_create(&self, role: u32) -> Result<()> {
        if self.catalog.may_create(role) {
            Ok(())
        } else {
            Err(denied("permission denied for schema public")
                .with_hint("A superuser can allow it: GRANT CREATE ON SCHEMA public TO role."))
        }
    }

    /// Refuse a statement the session's current role may not run (42501).
    pub(crate) fn check_privileges(&self, session: &Session, stmt: &Statement) -> Result<()> {
        let role = session.role();
        if self.catalog.is_superuser(role) {
            return Ok(());
        }
        match stmt {
            Statement::Query(q) => self.require_select_all(role, q),
            Statement::Dml(q) => {
                let (target, privilege, reads_target) = match q.as_ref() {
                    ast::Statement::Insert(i) => match &i.table {
                        ast::TableObject::TableName(n) => {
                            (relation_name(n).ok(), Privilege::Insert, false)
                        }
                        _ => (None, Privilege::Insert, false),
                    },
                    ast::Statement::Update(u) => (
                        table_factor_name(&u.table.relation),
                        Privilege::Update,
                        u.selection.is_some() || u.returning.is_some(),
                    ),
                    ast::Statement::Delete(d) => {
                        let (ast::FromTable::WithFromKeyword(from)
                        | ast::FromTable::WithoutKeyword(from)) = &d.from;
                        (
                            from.first().and_then(|t| table_factor_name(&t.relation)),
                            Privilege::Delete,
                            d.selection.is_some() || d.returning.is_some(),
                        )
                    }
                    _ => (None, Privilege::Select, false),
                };
                if let Some(t) = &target {
                    self.require(role, t, privilege)?;
                    if reads_target {
                        self.require(role, t, Privilege::Select)?;
                    }
                }
                for name in super::referenced_relations(q) {
                    if Some(&name) != target.as_ref() {
                        self.require(role, &name, Privilege::Select)?;
                    }
                }
                Ok(())
            }
            Statement::Merge(m) => {
                // each action's privilege on the target, SELECT on it (the join reads it)
                // and on what the source reads
                let target = table_factor_name(&m.table);
                if let Some(t) = &target {
                    self.require(role, t, Privilege::Select)?;
                    for c in &m.clauses {
                        let p = match &c.action {
                            ast::MergeAction::Insert(_) => Privilege::Insert,
                            // (DO NOTHING arrives as an assignment to a marker)
                            ast::MergeAction::Update(u)
                                if u.assignments.iter().any(|a| {
                                    a.target.to_string() == crate::sql::parser::MERGE_DO_NOTHING
                                }) =>
                            {
                                continue;
                            }
                            ast::MergeAction::Update(_) => Privilege::Update,
                            ast::MergeAction::Delete { .. } => Privilege::Delete,
                        };
                        self.require(role, t, p)?;
                    }
                }
                let whole = ast::Statement::Merge(m.as_ref().clone());
                for name in super::referenced_relations(&whole) {
                    if Some(&name) != target.as_ref() {
                        self.require(role, &name, Privilege::Select)?;
                    }
                }
                Ok(())
            }
            Statement::BulkInsert(scan) => self.require(role, &scan.table, Privilege::Insert),
            Statement::Comment(c) => self.require_owner(role, &c.relation),
            Statement::Truncate(tables, ..) => tables
                .iter()
                .try_for_each(|t| self.require(role, t, Privilege::Truncate)),
            // Postgres: SELECT for ACCESS SHARE, else UPDATE, DELETE or TRUNCATE
            Statement::Lock(l) => l.tables.iter().try_for_each(|t| {
                if l.read_only {
                    self.require(role, t, Privilege::Select)
                } else {
                    self.require(role, t, Privilege::Update)
                        .or_else(|_| self.require(role, t, Privilege::Delete))
                        .or_else(|_| self.require(role, t, Privilege::Truncate))
                }
            }),
            Statement::CreateTable(ct) => {
                self.require_create_of(role, &ct.name)?;
                for fk in &ct.foreign_keys {
                    self.require(role, &fk.ref_table, Privilege::References)?;
                }
                self.require_secrets(role, &ct.with_options)
            }
            Statement::CreateSource(cs) => {
                self.require_create(role)?;
                self.require_secrets(role, &cs.with_options)
            }
            Statement::CreateView(cv) => {
                self.require_create_of(role, &cv.name)?;
                self.require_select_query(role, &cv.query)
            }
            Statement::CreateSequence(_)
            | Statement::CreateFunction(_)
            | Statement::CreateEnumType { .. } => self.require_create(role),
            Statement::CreateDomain(d) => self.require_create_of(role, &d.name),
            // (Postgres: the extensions Weir has are trusted ones, created by whoever may
            // create in the database; dropping one is its owner's, the superuser's)
            Statement::CreateExtension { .. } => self.require_create(role),
            Statement::DropExtension { names, .. } => Err(denied(format!(
                "must be owner of extension {}",
                names.first().map(String::as_str).unwrap_or_default()
            ))),
            Statement::Refresh(name) => {
                if self.catalog.get(name).is_some() {
                    self.require_owner(role, name)?;
                }
                Ok(())
            }
            Statement::AddIdentity(a) => {
                if self.catalog.get(&a.table).is_some() {
                    self.require_owner(role, &a.table)?;
                }
                self.require_create(role)
            }
            Statement::AlterIdentity(a) => {
                if self.catalog.get(&a.table).is_some() {
                    self.require_owner(role, &a.table)?;
                }
                Ok(())
            }
            Statement::AlterSequence(a) => {
                if self.catalog.get(&a.name).is_some() {
                    self.require_owner(role, &a.name)?;
                }
                if let Some(Some((t, _))) = &a.options.owned_by
                    && self.catalog.get(t).is_some()
                {
                    self.require_owner(role, t)?;
                }
                Ok(())
            }
            Statement::DropFunction(d) => {
                for fd in &d.func_desc {
                    if let Ok(n) = relation_name(&fd.name)
                        && let Some(f) = self.catalog.sql_function(&n)
                        && f.owner != role
                        && !self.catalog.is_superuser(role)
                    {
                        return Err(denied(format!("must be owner of function {n}")));
                    }
                }
                Ok(())
            }
            Statement::RenameRelation { name, .. } => {
                if self.catalog.get(name).is_some() {
                    self.require_owner(role, name)?;
                } else if let Some((entry, _)) = self.catalog.index_by_name(name) {
                    self.require_owner(role, &entry.desc.name)?;
                }
                self.require_create(role)
            }
            Statement::AlterColumnSetting { table, .. } => self.require_owner(role, table),
            Statement::StorageParameters { relation, kind, .. } if *kind != "INDEX" => {
                self.require_owner(role, relation)
            }
            Statement::StorageParameters { relation, .. } => {
                match self.catalog.index_by_name(relation) {
                    Some((entry, _)) => self.require_owner(role, &entry.desc.name),
                    None => Ok(()),
                }
            }
            Statement::AlterTable(a) => {
                let name = relation_name(&a.name)?;
                if self.catalog.get(&name).is_some() {
                    self.require_owner(role, &name)?;
                }
                // a foreign key needs REFERENCES on the table it references
                for op in &a.operations {
                    if let datafusion::sql::sqlparser::ast::AlterTableOperation::AddConstraint {
                        constraint: datafusion::sql::sqlparser::ast::TableConstraint::ForeignKey(fk),
                        ..
                    } = op
                    {
                        self.require(
                            role,
                            &relation_name(&fk.foreign_table)?,
                            Privilege::References,
                        )?;
                    }
                }
                Ok(())
            }
            Statement::CreatePlainView(v) => {
                self.require_create(role)?;
                if self.catalog.get(&v.name).is_some() {
                    self.require_owner(role, &v.name)?;
                }
                self.require_select_query(role, &v.query)
            }
            Statement::ExplainView(cv) => self.require_select_query(role, &cv.query),
            Statement::ExplainAnalyzeView(name) => self.require(role, name, Privilege::Select),
            Statement::CreateSink(cs) => {
                self.require_create(role)?;
                self.require_secrets(role, &cs.with_options)?;
                if let Some(from) = &cs.from {
                    self.require(role, from, Privilege::Select)?;
                }
                if let Some(q) = &cs.query {
                    self.require_select_query(role, q)?;
                }
                Ok(())
            }
            Statement::Drop(d) if d.kind == DropKind::Index => {
                for name in &d.names {
                    if let Some((table, _)) = self.catalog.index_by_name(name) {
                        self.require_owner(role, &table.desc.name)?;
                    }
                }
                Ok(())
            }
            Statement::Drop(d) => {
                for name in &d.names {
                    self.require_owner(role, name)?;
                }
                Ok(())
            }
            Statement::CreateIndex(ci) => {
                if self.catalog.get(&ci.table).is_some() {
                    self.require_owner(role, &ci.table)?;
                }
                Ok(())
            }
            Statement::Subscribe(s) => self.require(role, &s.view, Privilege::Select),
            Statement::Declare(d) => match &d.query {
                CursorQuery::Query(q) => self.require_select_all(role, q),
                CursorQuery::Subscribe(s) => self.require(role, &s.view, Privilege::Select),
            },
            Statement::Copy(c) => match c.as_ref() {
                Copy::From { table, .. } => self.require(role, table, Privilege::Insert),
                Copy::To { source, .. } => match source {
                    CopySource::Table(t) => self.require(role, t, Privilege::Select),
                    CopySource::Query(q) => self.require_select_all(role, q),
                    CopySource::Subscribe(s) => self.require(role, &s.view, Privilege::Select),
                },
            },
            Statement::Checkpoint
                if self
                    .catalog
                    .has_owner_rights(role, crate::catalog::roles::PG_CHECKPOINT) =>
            {
                Ok(())
            }
            Statement::Checkpoint => Err(denied(
                "must be superuser or have privileges of pg_checkpoint to do CHECKPOINT",
            )),
            // (Postgres: CREATE on the database, which only its owner has by default; the
            // owner of a schema alters and drops it, checked as they run)
            Statement::CreateSchema { .. } => Err(denied(format!(
                "permission denied for database {}",
                crate::catalog::DATABASE_NAME
            ))),
            // security statements check their own rules as they run
            _ => Ok(()),
        }
    }

    /// 3F000 unless `schema` is `public` or a user schema.
    fn known_schema(&self, schema: &str) -> Result<()> {
        if schema == "public" || self.catalog.user_schema(schema).is_some() {
            Ok(())
        } else {
            Err(WeirError::new(
                sqlstate::INVALID_SCHEMA_NAME,
                format!("schema \"{schema}\" does not exist"),
            ))
        }
    }

    fn role_oid(&self, name: &str) -> Result<u32> {
        self.catalog
            .role(name)
            .map(|r| r.oid)
            .ok_or_else(|| undefined_role(name))
    }

    fn grantee_oid(&self, session: &Session, g: &Grantee) -> Result<u32> {
        match g {
            Grantee::Public => Ok(PUBLIC),
            Grantee::Role(n) => self.role_oid(n),
            Grantee::CurrentUser => Ok(session.role()),
            Grantee::SessionUser => Ok(session.identity.read().session_user),
        }
    }

    /// May `role` create, alter or drop `target` (None: a new role with these options)?
    fn may_manage_role(&self, role: u32, target_superuser: bool, what: &str) -> Result<()> {
        let me = self.catalog.role_by_oid(role);
        let superuser = me.as_ref().is_some_and(|r| r.superuser);
        let createrole = me.as_ref().is_some_and(|r| r.createrole);
        if superuser || (createrole && !target_superuser) {
            return Ok(());
        }
        Err(denied(if target_superuser {
            format!("permission denied to {what}: only superusers can {what} superusers")
        } else {
            format!("permission denied to {what}: it needs the CREATEROLE attribute")
        }))
    }

    pub(crate) async fn security(
        &self,
        session: &mut Session,
        stmt: &SecurityStmt,
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        let role = session.role();
        match stmt {
            SecurityStmt::CreateRole {
                name,
                options,
                user,
            } => {
                let wants_super = options.contains(&RoleOption::Superuser(true));
                self.may_manage_role(role, wants_super, "create role")?;
                if name.starts_with("pg_") {
                    return Err(crate::catalog::roles::reserved_role_name(
                        name,
                        "Role names starting with \"pg_\" are reserved.",
                    ));
                }
                let mut desc = RoleDesc {
                    oid: 0,
                    name: name.clone(),
                    superuser: false,
                    login: *user,
                    createrole: false,
                    createdb: false,
                    inherit: true,
                    password: None,
                    member_of: Vec::new(),
                };
                let mut in_roles = Vec::new();
                let mut members = Vec::new();
                for o in options {
                    match o {
                        RoleOption::InRole(r) => {
                            for n in r {
                                in_roles.push(self.role_oid(n)?);
                            }
                        }
                        RoleOption::Role(r) => {
                            for n in r {
                                members.push(self.role_oid(n)?);
                            }
                        }
                        other => apply_option(&mut desc, other)?,
                    }
                }
                for r in &in_roles {
                    desc.member_of.push(Membership {
                        role: *r,
                        grantor: role,
                        admin: false,
                    });
                }
                let oid = self.catalog.create_role(desc)?;
                for m in members {
                    self.catalog.alter_role(m, |d| {
                        d.member_of.push(Membership {
                            role: oid,
                            grantor: role,
                            admin: false,
                        });
                        Ok(())
                    })?;
                }
                Ok(Output::Command("CREATE ROLE".into()))
            }
            SecurityStmt::AlterRole { name, options } => {
                let target = self
                    .catalog
                    .role(name)
                    .ok_or_else(|| undefined_role(name))?;
                if crate::catalog::roles::is_predefined(target.oid) {
                    return Err(crate::catalog::roles::reserved_role_name(
                        name,
                        "Cannot alter reserved roles.",
                    ));
                }
                let only_password = options.iter().all(|o| matches!(o, RoleOption::Password(_)));
                // everyone may change their own password
                if !(only_password && target.oid == role) {
                    let touches_super = target.superuser
                        || options
                            .iter()
                            .any(|o| matches!(o, RoleOption::Superuser(_)));
                    self.may_manage_role(role, touches_super, "alter role")?;
                }
                let mut changed = target.clone();
                for o in options {
                    apply_option(&mut changed, o)?;
                }
                if target.oid == SUPERUSER_OID && !changed.superuser {
                    return Err(denied(format!(
                        "permission denied to alter role: \"{name}\" is the bootstrap superuser and must stay one"
                    )));
                }
                self.catalog.alter_role(target.oid, |d| {
                    *d = changed;
                    Ok(())
                })?;
                Ok(Output::Command("ALTER ROLE".into()))
            }
            SecurityStmt::RenameRole { name, to } => {
                let target = self
                    .catalog
                    .role(name)
                    .ok_or_else(|| undefined_role(name))?;
                if target.oid == session.identity.read().session_user {
                    return Err(WeirError::new(
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        "session user cannot be renamed",
                    ));
                }
                if target.oid == role {
                    return Err(WeirError::new(
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        "current user cannot be renamed",
                    ));
                }
                self.may_manage_role(role, target.superuser, "rename role")?;
                // (a predefined role keeps its name; a new name may not look like one)
                let reserved = if crate::catalog::roles::is_predefined(target.oid) {
                    Some(name)
                } else {
                    Some(to).filter(|t| t.starts_with("pg_"))
                };
                if let Some(n) = reserved {
                    return Err(crate::catalog::roles::reserved_role_name(
                        n,
                        "Role names starting with \"pg_\" are reserved.",
                    ));
                }
                self.catalog.alter_role(target.oid, |d| {
                    d.name = to.clone();
                    Ok(())
                })?;
                Ok(Output::Command("ALTER ROLE".into()))
            }
            SecurityStmt::DropRole { names, if_exists } => {
                for name in names {
                    let Some(target) = self.catalog.role(name) else {
                        if *if_exists {
                            continue;
                        }
                        return Err(undefined_role(name));
                    };
                    if target.oid == role || target.oid == session.identity.read().session_user {
                        return Err(WeirError::new(
                            OBJECT_IN_USE,
                            "current user cannot be dropped",
                        ));
                    }
                    if target.oid == SUPERUSER_OID
                        || crate::catalog::roles::is_predefined(target.oid)
                    {
                        return Err(WeirError::new(
                            sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                            format!(
                                "cannot drop role {name} because it is required by the database system"
                            ),
                        ));
                    }
                    self.may_manage_role(role, target.superuser, "drop role")?;
                    self.catalog.drop_role(target.oid)?;
                }
                Ok(Output::Command("DROP ROLE".into()))
            }
            SecurityStmt::Membership {
                grant,
                roles,
                members,
                admin,
            } => {
                for r in roles {
                    let granted = self.catalog.role(r).ok_or_else(|| undefined_role(r))?;
                    // superusers, CREATEROLE roles (for non-superuser roles) and admins of it
                    let me = self.catalog.role_by_oid(role);
                    let is_admin = me.as_ref().is_some_and(|m| {
                        m.member_of.iter().any(|x| x.role == granted.oid && x.admin)
                    });
                    if !is_admin {
                        self.may_manage_role(role, granted.superuser, "grant role")
                            .map_err(|_| {
                                denied(format!(
                                    "permission denied to {} role \"{r}\"",
                                    if *grant { "grant" } else { "revoke" }
                                ))
                            })?;
                    }
                    for m in members {
                        let member = self.grantee_oid(session, m)?;
                        if member == PUBLIC {
                            return Err(WeirError::new(
                                sqlstate::INVALID_GRANT_OPERATION,
                                "role membership cannot be granted to PUBLIC",
                            ));
                        }
                        if *grant {
                            if member == granted.oid
                                || self.catalog.is_member_of_strict(granted.oid, member)
                            {
                                return Err(WeirError::new(
                                    sqlstate::INVALID_GRANT_OPERATION,
                                    format!(
                                        "role \"{}\" is a member of role \"{}\"",
                                        r,
                                        self.catalog.role_name(member).unwrap_or_default()
                                    ),
                                ));
                            }
                            self.catalog.alter_role(member, |d| {
                                match d.member_of.iter_mut().find(|x| x.role == granted.oid) {
                                    Some(x) => x.admin |= *admin,
                                    None => d.member_of.push(Membership {
                                        role: granted.oid,
                                        grantor: role,
                                        admin: *admin,
                                    }),
                                }
                                Ok(())
                            })?;
                        } else {
                            self.catalog.alter_role(member, |d| {
                                d.member_of.retain(|x| x.role != granted.oid);
                                Ok(())
                            })?;
                        }
                    }
                }
                Ok(Output::Command(
                    if *grant { "GRANT ROLE" } else { "REVOKE ROLE" }.into(),
                ))
            }
            SecurityStmt::TablePrivileges {
                grant,
                privileges,
                target,
                grantees,
            } => {
                let names: Vec<String> = match target {
                    TableTarget::Names(n) => n.clone(),
                    TableTarget::AllInSchema(schema) => {
                        self.known_schema(schema)?;
                        self.catalog
                            .entries()
                            .iter()
                            .filter(|e| e.desc.kind != crate::catalog::RelationKind::Sink)
                            .filter(|e| {
                                crate::catalog::schemas::split_relation_name(&e.desc.name).0
                                    == schema
                            })
                            .map(|e| e.desc.name.clone())
                            .collect()
                    }
                };
                let bits = match privileges {
                    None => Privilege::all_bits(),
                    Some(p) => Privilege::bits(p),
                };
                let grantee_oids = grantees
                    .iter()
                    .map(|g| self.grantee_oid(session, g))
                    .collect::<Result<Vec<_>>>()?;
                for name in &names {
                    let entry = self
                        .catalog
                        .get(name)
                        .ok_or_else(|| WeirError::undefined_table(name))?;
                    if entry.desc.kind == crate::catalog::RelationKind::Sink {
                        return Err(WeirError::new(
                            sqlstate::WRONG_OBJECT_TYPE,
                            format!(
                                "\"{name}\" is a sink: privileges are granted on relations clients read or write"
                            ),
                        ));
                    }
                    if !self.catalog.has_owner_rights(role, entry.desc.owner) {
                        return Err(permission_denied(entry.desc.kind, name));
                    }
                    let owner = entry.desc.owner;
                    self.catalog.alter_relation(name, |d| {
                        let acl = d.acl.get_or_insert_with(|| {
                            vec![AclItem {
                                grantee: owner,
                                grantor: owner,
                                privileges: Privilege::all_bits(),
                            }]
                        });
                        for g in &grantee_oids {
                            match acl.iter_mut().find(|i| i.grantee == *g) {
                                Some(i) if *grant => i.privileges |= bits,
                                Some(i) => i.privileges &= !bits,
                                None if *grant => acl.push(AclItem {
                                    grantee: *g,
                                    grantor: owner,
                                    privileges: bits,
                                }),
                                None => {}
                            }
                        }
                        acl.retain(|i| i.privileges != 0);
                        Ok(())
                    })?;
                }
                Ok(Output::Command(
                    if *grant { "GRANT" } else { "REVOKE" }.into(),
                ))
            }
            SecurityStmt::SchemaPrivileges {
                schema,
                grant,
                create,
                grantees,
            } if schema != "public" => {
                // USAGE of a user schema is everyone's, as public's is; CREATE in one is its
                // owner's (and superusers') alone
                self.known_schema(schema)?;
                for g in grantees {
                    self.grantee_oid(session, g)?;
                }
                if *create {
                    return Err(WeirError::not_supported(format!(
                        "GRANT CREATE ON SCHEMA {schema}: only its owner and superusers create in a schema other than public"
                    )));
                }
                Ok(Output::Command(
                    if *grant { "GRANT" } else { "REVOKE" }.into(),
                ))
            }
            SecurityStmt::SchemaPrivileges {
                grant,
                create,
                grantees,
                ..
            } => {
                if !self.catalog.is_superuser(role) {
                    return Err(denied("permission denied for schema public")
                        .with_detail("Only superusers grant privileges on schema public."));
                }
                let oids = grantees
                    .iter()
                    .map(|g| self.grantee_oid(session, g))
                    .collect::<Result<Vec<_>>>()?;
                if *create {
                    self.catalog.alter_schema_acl(|acl| {
                        for o in oids {
                            if *grant {
                                if !acl.create.contains(&o) {
                                    acl.create.push(o);
                                }
                            } else {
                                acl.create.retain(|x| *x != o);
                            }
                        }
                    })?;
                }
                Ok(Output::Command(
                    if *grant { "GRANT" } else { "REVOKE" }.into(),
                ))
            }
            SecurityStmt::SetRole(target) => {
                let session_user = session.identity.read().session_user;
                let new = match target {
                    None => None,
                    Some(n) => {
                        let oid = self.catalog.role(n).map(|r| r.oid).ok_or_else(|| {
                            WeirError::invalid_parameter(format!("role \"{n}\" does not exist"))
                        })?;
                        if !self.catalog.is_member_of(session_user, oid) {
                            return Err(denied(format!("permission denied to set role \"{n}\"")));
                        }
                        Some(oid)
                    }
                };
                session.identity.write().role = new;
                let shown = match new {
                    None => "none".to_owned(),
                    Some(o) => self.catalog.role_name(o).unwrap_or_default(),
                };
                session.set_identity("role", &shown);
                Ok(Output::Command("SET".into()))
            }
            SecurityStmt::SetSessionAuthorization(target) => {
                let authenticated = session.identity.read().authenticated;
                let new = match target {
                    None => authenticated,
                    Some(n) => {
                        let oid = self.catalog.role(n).map(|r| r.oid).ok_or_else(|| {
                            WeirError::invalid_parameter(format!("role \"{n}\" does not exist"))
                        })?;
                        if oid != authenticated && !self.catalog.is_superuser(authenticated) {
                            return Err(denied("permission denied to set session authorization"));
                        }
                        oid
                    }
                };
                let mut id = session.identity.write();
                id.session_user = new;
                id.role = None;
                drop(id);
                let name = self.catalog.role_name(new).unwrap_or_default();
                session.set_identity("session_authorization", &name);
                session.set_identity("role", "none");
                Ok(Output::SetVariable {
                    name: "session_authorization".into(),
                    value: name,
                })
            }
            SecurityStmt::AlterOwner {
                kind,
                if_exists,
                name,
                owner,
            } => {
                let tag = match kind {
                    DropKind::Table => "ALTER TABLE",
                    DropKind::Source => "ALTER SOURCE",
                    DropKind::MaterializedView => "ALTER MATERIALIZED VIEW",
                    DropKind::Sink => "ALTER SINK",
                    DropKind::View => "ALTER VIEW",
                    DropKind::Sequence => "ALTER SEQUENCE",
                    DropKind::Index => "ALTER INDEX",
                    DropKind::Type => "ALTER TYPE",
                };
                let Some(entry) = self.catalog.get(name) else {
                    return crate::engine::missing_relation(name, *if_exists, notices, tag);
                };
                // as in Postgres, ALTER TABLE takes any relation but a sink
                let fits = match kind {
                    DropKind::Table => entry.desc.kind != crate::catalog::RelationKind::Sink,
                    DropKind::Source => entry.desc.kind == crate::catalog::RelationKind::Source,
                    DropKind::MaterializedView => {
                        entry.desc.kind == crate::catalog::RelationKind::MaterializedView
                    }
                    DropKind::Sink => entry.desc.kind == crate::catalog::RelationKind::Sink,
                    DropKind::View => entry.desc.kind == crate::catalog::RelationKind::View,
                    DropKind::Sequence => entry.desc.kind == crate::catalog::RelationKind::Sequence,
                    DropKind::Index | DropKind::Type => false,
                };
                if !fits {
                    return Err(WeirError::new(
                        sqlstate::WRONG_OBJECT_TYPE,
                        format!(
                            "\"{name}\" is not a {}",
                            match kind {
                                DropKind::Table => "table",
                                DropKind::Source => "source",
                                DropKind::MaterializedView => "materialized view",
                                DropKind::Sink => "sink",
                                DropKind::View => "view",
                                DropKind::Sequence => "sequence",
                                DropKind::Index => "index",
                                DropKind::Type => "type",
                            }
                        ),
                    ));
                }
                let new_owner = self.grantee_oid(session, owner)?;
                if new_owner == PUBLIC {
                    return Err(undefined_role("public"));
                }
                if !self.catalog.is_superuser(role) {
                    self.require_owner(role, name)?;
                    if !self.catalog.is_member_of(role, new_owner) {
                        return Err(denied(format!(
                            "must be able to SET ROLE \"{}\"",
                            self.catalog.role_name(new_owner).unwrap_or_default()
                        )));
                    }
                }
                let old_owner = entry.desc.owner;
                self.catalog.alter_relation(name, |d| {
                    d.owner = new_owner;
                    if let Some(acl) = &mut d.acl {
                        for i in acl.iter_mut() {
                            if i.grantee == old_owner {
                                i.grantee = new_owner;
                            }
                            if i.grantor == old_owner {
                                i.grantor = new_owner;
                            }
                        }
                    }
                    Ok(())
                })?;
                Ok(Output::Command(tag.into()))
            }
            SecurityStmt::CreateSecret {
                name,
                value,
                if_not_exists,
            } => {
                self.require_create(role)?;
                self.catalog
                    .create_secret(name, value, role, *if_not_exists)?;
                Ok(Output::Command("CREATE SECRET".into()))
            }
            SecurityStmt::AlterSecret { name, value } => {
                self.require_secret_owner(role, name)?;
                self.catalog.alter_secret(name, value)?;
                Ok(Output::Command("ALTER SECRET".into()))
            }
            SecurityStmt::DropSecret { names, if_exists } => {
                for name in names {
                    if self.catalog.secret(name).is_none() {
                        if *if_exists {
                            continue;
                        }
                        return Err(WeirError::new(
                            sqlstate::UNDEFINED_OBJECT,
                            format!("secret \"{name}\" does not exist"),
                        ));
                    }
                    self.require_secret_owner(role, name)?;
                    let users: Vec<String> = self
                        .catalog
                        .entries()
                        .iter()
                        .filter(|e| {
                            crate::catalog::secrets::secret_refs(&e.desc.options)
                                .iter()
                                .any(|s| s == name)
                        })
                        .map(|e| e.desc.name.clone())
                        .collect();
                    if !users.is_empty() {
                        return Err(WeirError::new(
                            sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                            format!("cannot drop secret {name} because other objects depend on it"),
                        )
                        .with_detail(
                            users
                                .iter()
                                .map(|u| format!("{u} uses it"))
                                .collect::<Vec<_>>()
                                .join("\n"),
                        ));
                    }
                    self.catalog.drop_secret(name)?;
                }
                Ok(Output::Command("DROP SECRET".into()))
            }
        }
    }

    /// Only a secret's owner (or a superuser) may change, drop or use it.
    pub(crate) fn require_secret_owner(&self, role: u32, name: &str) -> Result<()> {
        let Some(s) = self.catalog.secret(name) else {
            return Err(WeirError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!("secret \"{name}\" does not exist"),
            ));
        };
        if self.catalog.has_owner_rights(role, s.owner) {
            Ok(())
        } else {
            Err(denied(format!("permission denied for secret {name}")))
        }
    }
}

/// Apply one role attribute.
fn apply_option(d: &mut RoleDesc, o: &RoleOption) -> Result<()> {
    match o {
        RoleOption::Superuser(b) => d.superuser = *b,
        RoleOption::Login(b) => d.login = *b,
        RoleOption::CreateRole(b) => d.createrole = *b,
        RoleOption::CreateDb(b) => d.createdb = *b,
        RoleOption::Inherit(b) => d.inherit = *b,
        RoleOption::Password(None) => d.password = None,
        RoleOption::Password(Some(p)) => {
            if p.is_empty() {
                // Postgres: an empty password is no password
                d.password = None;
            } else {
                d.password = Some(
                    verifier_for(p)
                        .map_err(WeirError::invalid_parameter)?
                        .to_string(),
                );
            }
        }
        RoleOption::InRole(_) | RoleOption::Role(_) => {}
    }
    Ok(())
}
