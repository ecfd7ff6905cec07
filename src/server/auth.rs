//! Who may connect, and how they prove it: `pg_hba.conf`-style rules and the login
//! exchange (trust, SCRAM-SHA-256, clear-text password when a rule asks for it, client
//! certificates, reject).
//!
//! Rules come from `--hba-file` (Postgres' `pg_hba.conf` syntax: `host|hostssl|hostnossl
//! database user address method`) or `--hba` flags (one rule each). Without any, the
//! default is friendly where it is safe: trust from loopback while the bootstrap superuser
//! has no password, SCRAM from everywhere once it has one (`\password`), and a non-loopback
//! listener refuses to start without either (`--insecure` overrides).
//!
//! Every failure is answered alike, so a client cannot tell a wrong password from an
//! unknown role (`28P01 password authentication failed for user "x"`, after a SCRAM
//! exchange that runs to its end for unknown roles too), is logged without the password,
//! and is answered only after [`FAILED_LOGIN_DELAY`], so guessing over the network is slow.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use ipnet::IpNet;

use crate::catalog::Catalog;
use crate::error::{Result, WeirError};

/// How long a failed login waits before it is answered.
pub const FAILED_LOGIN_DELAY: Duration = Duration::from_millis(500);

/// Failed logins per client address: each waits [`FAILED_LOGIN_DELAY`] in turn, so one
/// address gets at most two answers to wrong passwords a second however many connections
/// it opens. An address's entry goes when its last failure is answered.
#[derive(Default)]
pub struct FailedLogins {
    by_address: parking_lot::Mutex<
        std::collections::HashMap<IpAddr, std::sync::Arc<tokio::sync::Mutex<()>>>,
    >,
}

impl FailedLogins {
    /// The lock a failure from `addr` waits on.
    pub fn turn(&self, addr: IpAddr) -> std::sync::Arc<tokio::sync::Mutex<()>> {
        self.by_address.lock().entry(addr).or_default().clone()
    }

    /// A failure from `addr` was answered.
    pub fn done(&self, addr: IpAddr, turn: std::sync::Arc<tokio::sync::Mutex<()>>) {
        let mut map = self.by_address.lock();
        drop(turn);
        if map
            .get(&addr)
            .is_some_and(|t| std::sync::Arc::strong_count(t) == 1)
        {
            map.remove(&addr);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnType {
    /// `host`: TLS or not.
    Host,
    /// `hostssl`: TLS only.
    HostSsl,
    /// `hostnossl`: plain only.
    HostNoSsl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Trust,
    Reject,
    ScramSha256,
    /// Clear-text password (only where a rule asks for it, best over TLS).
    Password,
    /// A client certificate signed by `--tls-client-ca` whose CN is the role's name.
    Cert,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Trust => "trust",
            Method::Reject => "reject",
            Method::ScramSha256 => "scram-sha-256",
            Method::Password => "password",
            Method::Cert => "cert",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Names {
    All,
    /// Names; `+role` entries match members of that role.
    List(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Address {
    All,
    Nets(Vec<IpNet>),
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    conn: ConnType,
    databases: Names,
    users: Names,
    address: Address,
    pub method: Method,
    /// Where it came from (`file:line` or `--hba`), for the log.
    pub origin: String,
}

fn names(field: &str) -> Names {
    if field == "all" {
        return Names::All;
    }
    Names::List(
        field
            .split(',')
            .map(|s| s.trim_matches('"').to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

/// Parse one rule line (comments and blank lines give None).
pub fn parse_rule(line: &str, origin: &str) -> Result<Option<Rule>> {
    let line = line.split('#').next().unwrap_or("").trim();
    if line.is_empty() {
        return Ok(None);
    }
    let bad = |why: String| WeirError::invalid_parameter(format!("{origin}: {why}: {line}"));
    let fields: Vec<&str> = line.split_whitespace().collect();
    let conn = match fields[0] {
        "host" => ConnType::Host,
        "hostssl" => ConnType::HostSsl,
        "hostnossl" => ConnType::HostNoSsl,
        "local" => {
            return Err(bad(
                "\"local\" rules need Unix sockets, which Weir does not listen on".into(),
            ));
        }
        "hostgssenc" | "hostnogssenc" => {
            return Err(bad("GSSAPI encryption is not supported".into()));
        }
        other => return Err(bad(format!("unknown connection type \"{other}\""))),
    };
    if fields.len() < 5 {
        return Err(bad("a rule needs: type database user address method".into()));
    }
    let databases = names(fields[1]);
    let users = names(fields[2]);
    let (address, rest) = match fields[3] {
        "all" => (Address::All, &fields[4..]),
        "samehost" | "samenet" => {
            return Err(bad(format!(
                "\"{}\" is not supported: give an address range",
                fields[3]
            )));
        }
        a if a.contains('/') => {
            let net = a
                .parse::<IpNet>()
                .map_err(|e| bad(format!("bad address range \"{a}\": {e}")))?;
            (Address::Nets(vec![net.trunc()]), &fields[4..])
        }
        a => {
            let ip: IpAddr = a.parse().map_err(|_| {
                bad(format!(
                    "bad address \"{a}\" (host names are not supported)"
                ))
            })?;
            // `address mask` form, or a single host
            match fields.get(4).and_then(|m| m.parse::<IpAddr>().ok()) {
                Some(mask) => {
                    let prefix = ipnet::ip_mask_to_prefix(mask)
                        .map_err(|_| bad(format!("bad netmask \"{mask}\"")))?;
                    let net = IpNet::new(ip, prefix).map_err(|e| bad(e.to_string()))?;
                    (Address::Nets(vec![net.trunc()]), &fields[5..])
                }
                None => (Address::Nets(vec![IpNet::from(ip)]), &fields[4..]),
            }
        }
    };
    finish(conn, databases, users, address, rest, origin, &bad)
}

fn finish(
    conn: ConnType,
    databases: Names,
    users: Names,
    address: Address,
    rest: &[&str],
    origin: &str,
    bad: &dyn Fn(String) -> WeirError,
) -> Result<Option<Rule>> {
    let Some(method) = rest.first() else {
        return Err(bad("missing authentication method".into()));
    };
    let method = match *method {
        "trust" => Method::Trust,
        "reject" => Method::Reject,
        // Postgres answers an md5 rule with SCRAM when the stored password is SCRAM, and
        // Weir stores only SCRAM: md5 itself is never used
        "scram-sha-256" | "md5" => Method::ScramSha256,
        "password" => Method::Password,
        "cert" => Method::Cert,
        other => {
            return Err(bad(format!(
                "unsupported authentication method \"{other}\""
            )));
        }
    };
    if let Some(opt) = rest.get(1) {
        return Err(bad(format!("rule options are not supported (\"{opt}\")")));
    }
    if method == Method::Cert && conn != ConnType::HostSsl {
        return Err(bad("\"cert\" needs a hostssl rule".into()));
    }
    Ok(Some(Rule {
        conn,
        databases,
        users,
        address,
        method,
        origin: origin.to_owned(),
    }))
}

/// How the server decides who may connect.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// From `--hba-file` and `--hba`; None: the defaults.
    pub rules: Option<Vec<Rule>>,
    /// `--insecure`: trust from anywhere while no password is set.
    pub insecure: bool,
}

impl AuthConfig {
    /// Rules from `--hba-file` (if given) followed by `--hba` flags.
    pub fn load(file: Option<&Path>, flags: &[String], insecure: bool) -> Result<AuthConfig> {
        let mut rules = Vec::new();
        if let Some(f) = file {
            let text = std::fs::read_to_string(f).map_err(|e| {
                WeirError::io(&format!("cannot read --hba-file {}", f.display()), e)
            })?;
            for (i, line) in text.lines().enumerate() {
                if let Some(r) = parse_rule(line, &format!("{}:{}", f.display(), i + 1))? {
                    rules.push(r);
                }
            }
        }
        for (i, line) in flags.iter().enumerate() {
            if let Some(r) = parse_rule(line, &format!("--hba #{}", i + 1))? {
                rules.push(r);
            }
        }
        Ok(AuthConfig {
            rules: (file.is_some() || !flags.is_empty()).then_some(rules),
            insecure,
        })
    }

    /// Refuse to listen beyond loopback with no way to authenticate.
    pub fn check_listen(&self, listen: std::net::SocketAddr, catalog: &Catalog) -> Result<()> {
        if listen.ip().is_loopback() || self.rules.is_some() || self.insecure {
            if self.insecure
                && !listen.ip().is_loopback()
                && self.rules.is_none()
                && !superuser_has_password(catalog)
            {
                tracing::warn!(%listen, "--insecure: anyone who reaches this address connects without a password, as any role");
            }
            return Ok(());
        }
        if superuser_has_password(catalog) {
            return Ok(());
        }
        Err(WeirError::invalid_parameter(format!(
            "refusing to listen on {listen} without authentication: anyone who reaches it could connect as the superuser"
        ))
        .with_hint(
            "Set the superuser's password (WEIR_SUPERUSER_PASSWORD or --superuser-password-file at the first start, or ALTER ROLE ... PASSWORD), give rules with --hba-file / --hba, or pass --insecure to accept this.",
        ))
    }

    /// The method for a connection: the first rule that matches it (None: no rule does).
    pub fn method_for(
        &self,
        catalog: &Catalog,
        peer: IpAddr,
        tls: bool,
        database: &str,
        user: &str,
    ) -> Option<(Method, String)> {
        let peer = match peer {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(peer),
            v4 => v4,
        };
        let Some(rules) = &self.rules else {
            return Some(default_method(catalog, peer, self.insecure));
        };
        rules
            .iter()
            .find(|r| {
                let conn = match r.conn {
                    ConnType::Host => true,
                    ConnType::HostSsl => tls,
                    ConnType::HostNoSsl => !tls,
                };
                let address = match &r.address {
                    Address::All => true,
                    Address::Nets(nets) => nets.iter().any(|n| n.contains(&peer)),
                };
                let db = match &r.databases {
                    Names::All => true,
                    Names::List(l) => l
                        .iter()
                        .any(|d| d == database || (d == "sameuser" && database == user)),
                };
                conn && address && db && user_matches(catalog, &r.users, user)
            })
            .map(|r| (r.method, r.origin.clone()))
    }
}

fn user_matches(catalog: &Catalog, users: &Names, user: &str) -> bool {
    match users {
        Names::All => true,
        Names::List(l) => l.iter().any(|u| match u.strip_prefix('+') {
            Some(group) => match (catalog.role(user), catalog.role(group)) {
                (Some(r), Some(g)) => catalog.is_member_of_strict(r.oid, g.oid),
                _ => false,
            },
            None => u == user,
        }),
    }
}

fn superuser_has_password(catalog: &Catalog) -> bool {
    catalog
        .role_by_oid(crate::catalog::SUPERUSER_OID)
        .is_some_and(|r| r.password.is_some())
}

/// The rules when none are given: trust on loopback until the superuser has a password,
/// then SCRAM everywhere; `--insecure` trusts every address while no password is set.
fn default_method(catalog: &Catalog, peer: IpAddr, insecure: bool) -> (Method, String) {
    if superuser_has_password(catalog) {
        (
            Method::ScramSha256,
            "default (the superuser has a password)".into(),
        )
    } else if peer.is_loopback() {
        (
            Method::Trust,
            "default (loopback, no superuser password)".into(),
        )
    } else if insecure {
        (Method::Trust, "default (--insecure)".into())
    } else {
        (
            Method::Reject,
            "default (not loopback, no superuser password)".into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(line: &str) -> Rule {
        parse_rule(line, "test").unwrap().unwrap()
    }

    #[test]
    fn rules_parse_as_pg_hba_lines() {
        let r = rule("hostssl all alice,+admins 10.0.0.0/8 scram-sha-256 # comment");
        assert_eq!(r.conn, ConnType::HostSsl);
        assert_eq!(r.method, Method::ScramSha256);
        assert_eq!(r.users, Names::List(vec!["alice".into(), "+admins".into()]));
        let r = rule("host all all 192.168.1.7 255.255.255.0 trust");
        assert_eq!(
            r.address,
            Address::Nets(vec!["192.168.1.0/24".parse().unwrap()])
        );
        let r = rule("host all all ::1 reject");
        assert_eq!(r.address, Address::Nets(vec!["::1/128".parse().unwrap()]));
        assert_eq!(rule("host all all all md5").method, Method::ScramSha256);
        assert!(parse_rule("# only a comment", "t").unwrap().is_none());
        for bad in [
            "local all all trust",
            "host all all",
            "host all all 10.0.0.0/33 trust",
            "host all all example.com trust",
            "host all all all ident",
            "host all all all cert",
            "host all all all trust clientcert=verify-full",
        ] {
            assert!(parse_rule(bad, "t").is_err(), "{bad}");
        }
    }
}
