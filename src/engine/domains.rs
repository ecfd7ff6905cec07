//! Domains: `CREATE DOMAIN`, `ALTER DOMAIN`, `DROP DOMAIN` (the catalog side, and what a
//! domain means for the values written, is `catalog/domains.rs`).
//!
//! `ALTER DOMAIN ... ADD CONSTRAINT` and `SET NOT NULL` check the values the domain's
//! columns hold first, as Postgres does (unless `NOT VALID`); `DROP DOMAIN ... CASCADE` does
//! not drop the columns of the domain (refused as RESTRICT is, 2BP01, as `DROP TYPE` of an
//! enum is).

use datafusion::arrow::array::RecordBatch;

use crate::catalog::domains::{DomainCheck, DomainDesc};
use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::{AlterDomainOp, CreateDomain};
use crate::sql::pg_text::quote_ident;

type Notices<'a> = Option<&'a tokio::sync::mpsc::UnboundedSender<String>>;

impl Engine {
    pub(crate) fn create_domain(&self, session: &Session, d: &CreateDomain) -> Result<Output> {
        let base = self.catalog.resolve_type(&d.base).map_err(|e| {
            // a domain over a domain: Postgres has them, Weir not yet
            match &d.base {
                datafusion::sql::sqlparser::ast::DataType::Custom(n, _)
                    if self
                        .catalog
                        .domain(&crate::catalog::user_types::user_type_name(n))
                        .is_some() =>
                {
                    WeirError::not_supported(format!(
                        "a domain over another domain ({}) is not supported",
                        d.base
                    ))
                }
                _ => e,
            }
        })?;
        if let Some(default) = &d.default {
            crate::catalog::table_exprs::domain_default_check(&base, default)?;
        }
        self.catalog.create_domain(
            &d.name,
            base,
            d.not_null,
            d.default.clone(),
            d.checks.clone(),
            session.role(),
        )?;
        Ok(Output::Command("CREATE DOMAIN".into()))
    }

    /// The domain, if the role may change it (its owner, a member of the owner, a superuser);
    /// 42809 for a type that is not a domain (named as Postgres' ALTER, `mood`, or DROP,
    /// `"mood"`, names it).
    fn owned_domain(&self, session: &Session, name: &str, altering: bool) -> Result<DomainDesc> {
        let Some(d) = self.catalog.domain(name) else {
            if self.catalog.enum_type(name).is_some() {
                return Err(WeirError::new(
                    sqlstate::WRONG_OBJECT_TYPE,
                    match altering {
                        true => format!("{name} is not a domain"),
                        false => format!("\"{name}\" is not a domain"),
                    },
                ));
            }
            return Err(crate::catalog::domains::undefined(name));
        };
        if !self.catalog.has_owner_rights(session.role(), d.owner) {
            return Err(crate::catalog::roles::denied(format!(
                "must be owner of type {}",
                d.shown()
            )));
        }
        Ok(d)
    }

    /// Every stored value of the domain's columns against one new constraint of it (NOT
    /// NULL: None; a CHECK), before the constraint is added: Postgres' error for a column
    /// whose values do not pass.
    async fn check_domain_columns(
        &self,
        session: &Session,
        d: &DomainDesc,
        check: Option<DomainCheck>,
    ) -> Result<()> {
        let not_null = check.is_none();
        let failing = |column: &str, table: &str| match not_null {
            true => WeirError::new(
                sqlstate::NOT_NULL_VIOLATION,
                format!("column \"{column}\" of table \"{table}\" contains null values"),
            ),
            false => WeirError::new(
                sqlstate::CHECK_VIOLATION,
                format!(
                    "column \"{column}\" of table \"{table}\" contains values that violate the new constraint"
                ),
            ),
        };
        let d = &DomainDesc {
            not_null,
            checks: check.into_iter().collect(),
            ..d.clone()
        };
        for (relation, column) in self.catalog.domain_users(d.oid) {
            let q = format!(
                "SELECT {} FROM {}",
                quote_ident(&column),
                quote_ident(&relation)
            );
            let batches: Vec<RecordBatch> = session.ctx.sql(&q).await?.collect().await?;
            for b in &batches {
                if crate::catalog::domains::check_values(d, b.column(0)).is_err() {
                    let table = crate::sql::parser::bare_relation_name(&relation);
                    return Err(failing(&column, table));
                }
            }
        }
        Ok(())
    }

    pub(crate) async fn alter_domain(
        &self,
        session: &Session,
        name: &str,
        op: &AlterDomainOp,
        notices: Notices<'_>,
    ) -> Result<Output> {
        let d = self.owned_domain(session, name, true)?;
        let bare = crate::sql::parser::bare_relation_name(&d.name).to_owned();
        let missing_constraint = |c: &str| {
            WeirError::new(
                sqlstate::UNDEFINED_OBJECT,
                format!("constraint \"{c}\" of domain \"{bare}\" does not exist"),
            )
        };
        match op {
            AlterDomainOp::Default(default) => {
                if let Some(e) = default {
                    crate::catalog::table_exprs::domain_default_check(&d.base, e)?;
                }
                let changed = self.catalog.alter_domain(name, |d| {
                    d.default = default.clone();
                    Ok(())
                })?;
                // the columns whose default is the domain's (or that have none) follow it
                for (relation, column) in self.catalog.domain_users(changed.oid) {
                    self.catalog.alter_relation(&relation, |r| {
                        let own = r.defaults.iter().any(|(c, _)| *c == column)
                            && !r.domains.iter().any(|d| d.column == column && d.default);
                        if own {
                            return Ok(());
                        }
                        r.defaults.retain(|(c, _)| *c != column);
                        if let Some(e) = default {
                            r.defaults.push((column.clone(), e.clone()));
                        }
                        for d in r.domains.iter_mut().filter(|d| d.column == column) {
                            d.default = default.is_some();
                        }
                        Ok(())
                    })?;
                }
            }
            AlterDomainOp::NotNull(on) => {
                if *on && !d.not_null {
                    self.check_domain_columns(session, &d, None).await?;
                }
                self.catalog.alter_domain(name, |d| {
                    d.not_null = *on;
                    Ok(())
                })?;
            }
            AlterDomainOp::AddCheck {
                name: cname,
                expr,
                not_valid,
            } => {
                crate::catalog::domains::validate_check(&d.base, expr)?;
                let cname = match cname {
                    Some(c) if d.checks.iter().any(|x| &x.name == c) => {
                        return Err(WeirError::new(
                            sqlstate::DUPLICATE_OBJECT,
                            format!("constraint \"{c}\" for domain \"{bare}\" already exists"),
                        ));
                    }
                    Some(c) => c.clone(),
                    None => d.new_check_name(),
                };
                let check = DomainCheck {
                    name: cname,
                    expr: expr.clone(),
                    oid: self.catalog.reserve_oid(),
                    not_valid: *not_valid,
                };
                if !*not_valid {
                    self.check_domain_columns(session, &d, Some(check.clone()))
                        .await?;
                }
                self.catalog.alter_domain(name, |d| {
                    d.checks.push(check);
                    Ok(())
                })?;
            }
            AlterDomainOp::DropConstraint { name: c, if_exists } => {
                if !d.checks.iter().any(|x| &x.name == c) {
                    if *if_exists {
                        if let Some(n) = notices {
                            let _ = n.send(format!(
                                "constraint \"{c}\" of domain \"{bare}\" does not exist, skipping"
                            ));
                        }
                        return Ok(Output::Command("ALTER DOMAIN".into()));
                    }
                    return Err(missing_constraint(c));
                }
                self.catalog.alter_domain(name, |d| {
                    d.checks.retain(|x| &x.name != c);
                    Ok(())
                })?;
            }
            AlterDomainOp::RenameConstraint { from, to } => {
                if !d.checks.iter().any(|x| &x.name == from) {
                    return Err(missing_constraint(from));
                }
                if d.checks.iter().any(|x| &x.name == to) {
                    return Err(WeirError::new(
                        sqlstate::DUPLICATE_OBJECT,
                        format!("constraint \"{to}\" for domain \"{bare}\" already exists"),
                    ));
                }
                self.catalog.alter_domain(name, |d| {
                    for x in &mut d.checks {
                        if &x.name == from {
                            x.name = to.clone();
                        }
                    }
                    Ok(())
                })?;
            }
            AlterDomainOp::ValidateConstraint(c) => {
                let Some(check) = d.checks.iter().find(|x| &x.name == c).cloned() else {
                    return Err(missing_constraint(c));
                };
                if check.not_valid {
                    self.check_domain_columns(session, &d, Some(check)).await?;
                    self.catalog.alter_domain(name, |d| {
                        for x in &mut d.checks {
                            if &x.name == c {
                                x.not_valid = false;
                            }
                        }
                        Ok(())
                    })?;
                }
            }
            AlterDomainOp::SetSchema(schema) => {
                let to = self.catalog.type_in_schema(name, schema)?;
                if to == name {
                    return Ok(Output::Command("ALTER DOMAIN".into()));
                }
                self.catalog.alter_domain(name, |d| {
                    d.name = to;
                    Ok(())
                })?;
            }
            AlterDomainOp::Rename(to) => {
                let to = crate::sql::parser::sibling_key(&d.name, to);
                self.catalog.alter_domain(name, |d| {
                    d.name = to.clone();
                    Ok(())
                })?;
            }
            AlterDomainOp::Owner(role) => {
                let owner = self
                    .catalog
                    .role(role)
                    .ok_or_else(|| crate::catalog::roles::undefined_role(role))?
                    .oid;
                self.catalog.alter_domain(name, |d| {
                    d.owner = owner;
                    Ok(())
                })?;
            }
        }
        Ok(Output::Command("ALTER DOMAIN".into()))
    }

    /// `DROP DOMAIN` (and `DROP TYPE` of a domain).
    pub(crate) async fn drop_domains(
        &self,
        session: &Session,
        names: &[String],
        if_exists: bool,
        cascade: bool,
        notices: Notices<'_>,
    ) -> Result<Output> {
        for name in names {
            if self.catalog.domain(name).is_none() && if_exists {
                if let Some(n) = notices {
                    let name = crate::sql::search_path::written(name);
                    let _ = n.send(format!("type \"{name}\" does not exist, skipping"));
                }
                continue;
            }
            self.drop_one_domain(session, name, cascade, notices)
                .await?;
        }
        Ok(Output::Command("DROP DOMAIN".into()))
    }

    pub(crate) async fn drop_one_domain(
        &self,
        session: &Session,
        name: &str,
        cascade: bool,
        notices: Notices<'_>,
    ) -> Result<()> {
        let d = self.owned_domain(session, name, false)?;
        if cascade {
            let users = self.catalog.domain_users(d.oid);
            self.drop_columns_of_type(session, &users, notices).await?;
        }
        self.catalog.drop_domain(name)?;
        Ok(())
    }
}
