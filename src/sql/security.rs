//! Statements about who may do what: roles (`CREATE/ALTER/DROP ROLE`, `CREATE USER`),
//! privileges (`GRANT`/`REVOKE` on tables, on schema public, and of roles), `SET ROLE`,
//! `SET SESSION AUTHORIZATION`, ownership (`ALTER ... OWNER TO`) and secrets
//! (`CREATE/ALTER/DROP SECRET`). Parsed here word by word in Postgres' grammar; executed
//! by `engine/security.rs`.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::catalog::roles::Privilege;
use crate::error::{Result, WeirError};
use crate::sql::parser::{
    DropKind, normalize_ident, parse_word, relation_name, rewind, syntax_near,
};

#[derive(Debug, Clone, PartialEq)]
pub enum RoleOption {
    Superuser(bool),
    Login(bool),
    CreateRole(bool),
    CreateDb(bool),
    Inherit(bool),
    /// `PASSWORD 'x'` (clear text or a SCRAM verifier) or `PASSWORD NULL`.
    Password(Option<String>),
    /// `IN ROLE a, b`: the new role becomes a member of these.
    InRole(Vec<String>),
    /// `ROLE a, b`: these become members of the new role.
    Role(Vec<String>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Grantee {
    Public,
    Role(String),
    /// `CURRENT_USER` / `CURRENT_ROLE` / `SESSION_USER`.
    CurrentUser,
    SessionUser,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TableTarget {
    Names(Vec<String>),
    /// `ALL TABLES IN SCHEMA s`.
    AllInSchema(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum SecurityStmt {
    CreateRole {
        name: String,
        options: Vec<RoleOption>,
        /// `CREATE USER`: LOGIN unless NOLOGIN is given.
        user: bool,
    },
    AlterRole {
        name: String,
        options: Vec<RoleOption>,
    },
    RenameRole {
        name: String,
        to: String,
    },
    DropRole {
        names: Vec<String>,
        if_exists: bool,
    },
    /// GRANT / REVOKE on tables; `privileges` None is ALL [PRIVILEGES].
    TablePrivileges {
        grant: bool,
        privileges: Option<Vec<Privilege>>,
        target: TableTarget,
        grantees: Vec<Grantee>,
    },
    /// GRANT / REVOKE CREATE (and USAGE, always granted) ON SCHEMA s.
    SchemaPrivileges {
        schema: String,
        grant: bool,
        create: bool,
        grantees: Vec<Grantee>,
    },
    /// GRANT role TO member / REVOKE role FROM member.
    Membership {
        grant: bool,
        roles: Vec<String>,
        members: Vec<Grantee>,
        admin: bool,
    },
    /// `SET ROLE name` (None: `SET ROLE NONE` / `RESET ROLE`).
    SetRole(Option<String>),
    /// `SET SESSION AUTHORIZATION name` (None: DEFAULT / RESET).
    SetSessionAuthorization(Option<String>),
    AlterOwner {
        kind: DropKind,
        if_exists: bool,
        name: String,
        owner: Grantee,
    },
    CreateSecret {
        name: String,
        value: String,
        if_not_exists: bool,
    },
    AlterSecret {
        name: String,
        value: String,
    },
    DropSecret {
        names: Vec<String>,
        if_exists: bool,
    },
}

impl SecurityStmt {
    /// The statement's name when it changes the catalog (refused in a read-only
    /// transaction); None for SET ROLE / SET SESSION AUTHORIZATION.
    pub fn write_kind(&self) -> Option<&'static str> {
        Some(match self {
            SecurityStmt::CreateRole { .. } => "CREATE ROLE",
            SecurityStmt::AlterRole { .. } | SecurityStmt::RenameRole { .. } => "ALTER ROLE",
            SecurityStmt::DropRole { .. } => "DROP ROLE",
            SecurityStmt::TablePrivileges { grant: true, .. }
            | SecurityStmt::SchemaPrivileges { grant: true, .. }
            | SecurityStmt::Membership { grant: true, .. } => "GRANT",
            SecurityStmt::TablePrivileges { .. }
            | SecurityStmt::SchemaPrivileges { .. }
            | SecurityStmt::Membership { .. } => "REVOKE",
            SecurityStmt::AlterOwner { .. } => "ALTER ... OWNER TO",
            SecurityStmt::CreateSecret { .. } => "CREATE SECRET",
            SecurityStmt::AlterSecret { .. } => "ALTER SECRET",
            SecurityStmt::DropSecret { .. } => "DROP SECRET",
            SecurityStmt::SetRole(_) | SecurityStmt::SetSessionAuthorization(_) => return None,
        })
    }
}

fn ident(p: &mut Parser) -> Result<String> {
    Ok(normalize_ident(&p.parse_identifier()?))
}

fn at_end(p: &Parser) -> bool {
    matches!(p.peek_token().token, Token::EOF | Token::SemiColon)
}

fn string(p: &mut Parser) -> Result<String> {
    Ok(p.parse_literal_string()?)
}

fn role_list(p: &mut Parser) -> Result<Vec<String>> {
    let mut out = vec![ident(p)?];
    while p.consume_token(&Token::Comma) {
        out.push(ident(p)?);
    }
    Ok(out)
}

fn grantee(p: &mut Parser) -> Result<Grantee> {
    let _ = parse_word(p, "GROUP");
    if parse_word(p, "PUBLIC") {
        return Ok(Grantee::Public);
    }
    if parse_word(p, "CURRENT_USER") || parse_word(p, "CURRENT_ROLE") {
        return Ok(Grantee::CurrentUser);
    }
    if parse_word(p, "SESSION_USER") {
        return Ok(Grantee::SessionUser);
    }
    Ok(Grantee::Role(ident(p)?))
}

fn grantees(p: &mut Parser) -> Result<Vec<Grantee>> {
    let mut out = vec![grantee(p)?];
    while p.consume_token(&Token::Comma) {
        out.push(grantee(p)?);
    }
    Ok(out)
}

/// Role options after `CREATE ROLE name [WITH]` / `ALTER ROLE name [WITH]`.
fn role_options(p: &mut Parser, create: bool) -> Result<Vec<RoleOption>> {
    let _ = p.parse_keyword(Keyword::WITH);
    let mut out = Vec::new();
    while !at_end(p) {
        let t = p.next_token();
        let Token::Word(w) = &t.token else {
            return Err(syntax_near(&t));
        };
        let word = w.value.to_ascii_uppercase();
        let opt = match word.as_str() {
            "SUPERUSER" => RoleOption::Superuser(true),
            "NOSUPERUSER" => RoleOption::Superuser(false),
            "LOGIN" => RoleOption::Login(true),
            "NOLOGIN" => RoleOption::Login(false),
            "CREATEROLE" => RoleOption::CreateRole(true),
            "NOCREATEROLE" => RoleOption::CreateRole(false),
            "CREATEDB" => RoleOption::CreateDb(true),
            "NOCREATEDB" => RoleOption::CreateDb(false),
            "INHERIT" => RoleOption::Inherit(true),
            "NOINHERIT" => RoleOption::Inherit(false),
            // attributes Weir has no use for; accepted as Postgres does, kept false
            "NOREPLICATION" | "NOBYPASSRLS" => continue,
            "ENCRYPTED" | "PASSWORD" => {
                if word == "ENCRYPTED" && !parse_word(p, "PASSWORD") {
                    return Err(syntax_near(&p.peek_token()));
                }
                if p.parse_keyword(Keyword::NULL) {
                    RoleOption::Password(None)
                } else {
                    RoleOption::Password(Some(string(p)?))
                }
            }
            "IN" if create => {
                if !(parse_word(p, "ROLE") || parse_word(p, "GROUP")) {
                    return Err(syntax_near(&p.peek_token()));
                }
                RoleOption::InRole(role_list(p)?)
            }
            "ROLE" | "USER" if create => RoleOption::Role(role_list(p)?),
            "REPLICATION" | "BYPASSRLS" | "CONNECTION" | "VALID" | "ADMIN" | "SYSID" => {
                return Err(WeirError::not_supported(format!(
                    "role option {word} is not supported"
                )));
            }
            _ => return Err(syntax_near(&t)),
        };
        out.push(opt);
    }
    Ok(out)
}

/// `CREATE ROLE|USER|SECRET ...`, after CREATE.
pub fn parse_create(p: &mut Parser) -> Result<SecurityStmt> {
    if parse_word(p, "SECRET") {
        let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let name = ident(p)?;
        p.expect_keyword_is(Keyword::AS)?;
        let value = string(p)?;
        return Ok(SecurityStmt::CreateSecret {
            name,
            value,
            if_not_exists,
        });
    }
    let user = parse_word(p, "USER");
    if !user && !parse_word(p, "ROLE") && !parse_word(p, "GROUP") {
        return Err(syntax_near(&p.peek_token()));
    }
    let name = ident(p)?;
    Ok(SecurityStmt::CreateRole {
        name,
        options: role_options(p, true)?,
        user,
    })
}

/// `ALTER ROLE|USER|SECRET ...` and `ALTER <relation kind> name OWNER TO role`, after
/// ALTER; None when it is another ALTER.
pub fn parse_alter(p: &mut Parser) -> Result<Option<SecurityStmt>> {
    if parse_word(p, "SECRET") {
        let name = ident(p)?;
        p.expect_keyword_is(Keyword::AS)?;
        let value = string(p)?;
        return Ok(Some(SecurityStmt::AlterSecret { name, value }));
    }
    if parse_word(p, "ROLE") || parse_word(p, "USER") || parse_word(p, "GROUP") {
        let name = ident(p)?;
        if p.parse_keyword(Keyword::RENAME) {
            p.expect_keyword_is(Keyword::TO)?;
            let to = ident(p)?;
            return Ok(Some(SecurityStmt::RenameRole { name, to }));
        }
        if matches!(&p.peek_token().token, Token::Word(w) if w.keyword == Keyword::SET || w.keyword == Keyword::RESET)
        {
            return Err(WeirError::not_supported(
                "ALTER ROLE ... SET / RESET (per-role settings) is not supported",
            ));
        }
        return Ok(Some(SecurityStmt::AlterRole {
            name,
            options: role_options(p, false)?,
        }));
    }
    // ALTER TABLE|VIEW|SEQUENCE|SOURCE|MATERIALIZED VIEW|SINK [IF EXISTS] [ONLY] name
    // OWNER TO role (pg_dump writes `ALTER TABLE name OWNER TO` for views and sequences too)
    let start = p.index();
    let kind = if p.parse_keyword(Keyword::TABLE) {
        DropKind::Table
    } else if p.parse_keyword(Keyword::SOURCE) {
        DropKind::Source
    } else if p.parse_keywords(&[Keyword::MATERIALIZED, Keyword::VIEW]) {
        DropKind::MaterializedView
    } else if p.parse_keyword(Keyword::VIEW) {
        DropKind::View
    } else if p.parse_keyword(Keyword::SEQUENCE) {
        DropKind::Sequence
    } else if parse_word(p, "SINK") {
        DropKind::Sink
    } else {
        return Ok(None);
    };
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let _ = kind == DropKind::Table && p.parse_keyword(Keyword::ONLY);
    let Ok(name) = p.parse_object_name(false) else {
        rewind(p, start);
        return Ok(None);
    };
    if !p.parse_keyword(Keyword::OWNER) {
        rewind(p, start);
        return Ok(None);
    }
    p.expect_keyword_is(Keyword::TO)?;
    Ok(Some(SecurityStmt::AlterOwner {
        kind,
        if_exists,
        name: relation_name(&name)?,
        owner: grantee(p)?,
    }))
}

/// `DROP ROLE|USER|SECRET [IF EXISTS] names`, after DROP; None when it is another DROP.
pub fn parse_drop(p: &mut Parser) -> Result<Option<SecurityStmt>> {
    let secret = parse_word(p, "SECRET");
    if !(secret || parse_word(p, "ROLE") || parse_word(p, "USER") || parse_word(p, "GROUP")) {
        return Ok(None);
    }
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let names = role_list(p)?;
    Ok(Some(if secret {
        SecurityStmt::DropSecret { names, if_exists }
    } else {
        SecurityStmt::DropRole { names, if_exists }
    }))
}

/// `GRANT ...` / `REVOKE ...`, after the first word.
pub fn parse_grant(p: &mut Parser, grant: bool) -> Result<SecurityStmt> {
    if !grant && parse_word(p, "GRANT") {
        return Err(WeirError::not_supported(
            "REVOKE GRANT OPTION FOR is not supported: Weir has no grant options",
        ));
    }
    let admin_option_for = !grant && parse_word(p, "ADMIN");
    if admin_option_for {
        return Err(WeirError::not_supported(
            "REVOKE ADMIN OPTION FOR is not supported",
        ));
    }
    // privileges or role names, up to ON (privileges) or TO/FROM (roles)
    let mut words: Vec<String> = Vec::new();
    let mut all = false;
    loop {
        let t = p.next_token();
        match &t.token {
            Token::Word(w) if w.quote_style.is_none() && w.keyword == Keyword::ALL => {
                all = true;
                let _ = parse_word(p, "PRIVILEGES");
            }
            Token::Word(w) => {
                words.push(normalize_ident(&datafusion::sql::sqlparser::ast::Ident {
                    value: w.value.clone(),
                    quote_style: w.quote_style,
                    span: t.span,
                }))
            }
            _ => return Err(syntax_near(&t)),
        }
        if p.consume_token(&Token::LParen) {
            return Err(WeirError::not_supported(
                "column privileges are not supported: grant on the whole table",
            ));
        }
        if !p.consume_token(&Token::Comma) {
            break;
        }
    }
    let to_word = if grant { Keyword::TO } else { Keyword::FROM };
    if p.parse_keyword(Keyword::ON) {
        // object privileges
        if parse_word(p, "SCHEMA") {
            let schema = ident(p)?;
            let mut create = all;
            for w in &words {
                match w.as_str() {
                    "create" => create = true,
                    "usage" => {}
                    _ => {
                        return Err(WeirError::new(
                            crate::error::sqlstate::INVALID_GRANT_OPERATION,
                            format!("invalid privilege type {} for schema", w.to_uppercase()),
                        ));
                    }
                }
            }
            p.expect_keyword_is(to_word)?;
            let grantees = grantees(p)?;
            finish(p, grant)?;
            return Ok(SecurityStmt::SchemaPrivileges {
                schema,
                grant,
                create,
                grantees,
            });
        }
        if parse_word(p, "DATABASE") || parse_word(p, "FUNCTION") || parse_word(p, "SEQUENCE") {
            return Err(WeirError::not_supported(
                "GRANT is supported on tables, sources, materialized views and schema public",
            ));
        }
        let target = if p.parse_keyword(Keyword::ALL) {
            if !parse_word(p, "TABLES") {
                return Err(syntax_near(&p.peek_token()));
            }
            p.expect_keyword_is(Keyword::IN)?;
            if !parse_word(p, "SCHEMA") {
                return Err(syntax_near(&p.peek_token()));
            }
            TableTarget::AllInSchema(ident(p)?)
        } else {
            let _ = p.parse_keyword(Keyword::TABLE)
                || p.parse_keywords(&[Keyword::MATERIALIZED, Keyword::VIEW])
                || p.parse_keyword(Keyword::SOURCE);
            let names = p
                .parse_comma_separated(|p| p.parse_object_name(false))?
                .iter()
                .map(relation_name)
                .collect::<Result<Vec<_>>>()?;
            TableTarget::Names(names)
        };
        let privileges = if all {
            None
        } else {
            Some(
                words
                    .iter()
                    .map(|w| {
                        Privilege::from_keyword(w).ok_or_else(|| {
                            WeirError::new(
                                crate::error::sqlstate::INVALID_GRANT_OPERATION,
                                format!("invalid privilege type {} for relation", w.to_uppercase()),
                            )
                        })
                    })
                    .collect::<Result<Vec<_>>>()?,
            )
        };
        p.expect_keyword_is(to_word)?;
        let grantees = grantees(p)?;
        finish(p, grant)?;
        return Ok(SecurityStmt::TablePrivileges {
            grant,
            privileges,
            target,
            grantees,
        });
    }
    // GRANT role [, ...] TO role [, ...] [WITH ADMIN OPTION]
    if all {
        return Err(syntax_near(&p.peek_token()));
    }
    p.expect_keyword_is(to_word)?;
    let members = grantees(p)?;
    let admin = grant && p.parse_keyword(Keyword::WITH) && {
        if !parse_word(p, "ADMIN") || !parse_word(p, "OPTION") {
            return Err(syntax_near(&p.peek_token()));
        }
        true
    };
    finish(p, grant)?;
    Ok(SecurityStmt::Membership {
        grant,
        roles: words,
        members,
        admin,
    })
}

/// The tail of GRANT/REVOKE: `GRANTED BY`, `WITH GRANT OPTION` (refused), CASCADE/RESTRICT.
fn finish(p: &mut Parser, grant: bool) -> Result<()> {
    if grant && p.parse_keyword(Keyword::WITH) {
        return Err(WeirError::not_supported(
            "WITH GRANT OPTION is not supported: only owners and superusers grant",
        ));
    }
    if parse_word(p, "GRANTED") {
        return Err(WeirError::not_supported("GRANTED BY is not supported"));
    }
    if !grant {
        let _ = p.parse_keyword(Keyword::CASCADE) || p.parse_keyword(Keyword::RESTRICT);
    }
    Ok(())
}

/// `SET ROLE ...` / `SET SESSION AUTHORIZATION ...`, after SET [SESSION]; None when it is
/// another SET.
pub fn parse_set(p: &mut Parser) -> Result<Option<SecurityStmt>> {
    let start = p.index();
    if parse_word(p, "ROLE")
        && !matches!(p.peek_token().token, Token::Eq)
        && !p.peek_keyword(Keyword::TO)
    {
        if parse_word(p, "NONE") {
            return Ok(Some(SecurityStmt::SetRole(None)));
        }
        let name = role_value(p)?;
        return Ok(Some(SecurityStmt::SetRole(Some(name))));
    }
    rewind(p, start);
    if parse_word(p, "AUTHORIZATION") {
        if parse_word(p, "DEFAULT") {
            return Ok(Some(SecurityStmt::SetSessionAuthorization(None)));
        }
        let name = role_value(p)?;
        return Ok(Some(SecurityStmt::SetSessionAuthorization(Some(name))));
    }
    rewind(p, start);
    Ok(None)
}

/// A role name given as an identifier or a string (`SET ROLE 'x'`).
fn role_value(p: &mut Parser) -> Result<String> {
    if let Token::SingleQuotedString(s) = &p.peek_token().token {
        let s = s.clone();
        p.next_token();
        return Ok(s);
    }
    ident(p)
}

/// Statement text as it may be logged: text that may carry a password or a secret's value
/// (`CREATE ROLE ... PASSWORD '...'`, `CREATE SECRET ... AS '...'`) is replaced by its
/// first words.
pub fn loggable(text: &str) -> std::borrow::Cow<'_, str> {
    let lower = text.to_ascii_lowercase();
    if lower.contains("password") || lower.contains("secret") {
        let head: Vec<&str> = text.split_whitespace().take(3).collect();
        std::borrow::Cow::Owned(format!(
            "{} ... (not logged: may hold a password or secret)",
            head.join(" ")
        ))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}
