//! What SQL may make the server do outside itself: which hosts connectors may connect to
//! (`weir serve --allow-connect`), which librdkafka properties a `WITH (properties.* = ...)`
//! may pass through, and whether any of them may name a file on the server
//! (`--allow-connector-files`).
//!
//! The policy is set once when the server starts and read by every connector whenever it
//! builds a client: at `CREATE`, and again when a source, table or sink starts after a
//! restart, so a catalog written under a laxer policy cannot bypass a stricter one.
//!
//! Hosts are matched as written (names are not resolved): `*.example.com:9092` allows any
//! name under `example.com`, `10.0.0.0/8:*` any IP literal in that network.

use std::net::IpAddr;
use std::sync::OnceLock;

use crate::error::{Result, WeirError, sqlstate};

/// The server's connector policy.
#[derive(Debug, Clone, Default)]
pub struct ConnectorPolicy {
    /// None: any host (the default).
    pub allow_connect: Option<Vec<EndpointPattern>>,
    /// librdkafka properties that name files on the server (`*.location`, `*.file`) are
    /// refused unless this is set.
    pub allow_files: bool,
}

static POLICY: OnceLock<ConnectorPolicy> = OnceLock::new();

/// Install the policy (once, at startup; later calls are ignored).
pub fn set_policy(policy: ConnectorPolicy) {
    let _ = POLICY.set(policy);
}

pub fn policy() -> &'static ConnectorPolicy {
    POLICY.get_or_init(ConnectorPolicy::default)
}

/// One `--allow-connect` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointPattern {
    host: HostPattern,
    /// Inclusive port range.
    ports: (u16, u16),
    text: String,
}

#[derive(Debug, Clone, PartialEq)]
enum HostPattern {
    Any,
    /// `*.suffix`: names ending in `.suffix` (lower case).
    Suffix(String),
    Name(String),
    Net(IpAddr, u8),
}

impl EndpointPattern {
    /// `*`, `host`, `host:port`, `host:*`, `host:9092-9094`, `*.example.com:9092`,
    /// `10.0.0.0/8:9092`, `[::1]:9092`.
    pub fn parse(text: &str) -> std::result::Result<EndpointPattern, String> {
        let t = text.trim();
        if t.is_empty() {
            return Err("empty pattern".into());
        }
        let bad = || {
            format!(
                "'{t}' is not host:port (host may be *, *.domain, a name, an IP or a CIDR network; port a number, a range a-b or *)"
            )
        };
        let (host, port) = if let Some(rest) = t.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(bad)?;
            match after.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None if after.is_empty() => (h, None),
                None => return Err(bad()),
            }
        } else if t.matches(':').count() > 1 {
            // a bare IPv6 address or network, no port
            (t, None)
        } else {
            match t.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (t, None),
            }
        };
        let ports = match port {
            None | Some("*") => (0, u16::MAX),
            Some(p) => match p.split_once('-') {
                Some((a, b)) => {
                    let a: u16 = a.trim().parse().map_err(|_| bad())?;
                    let b: u16 = b.trim().parse().map_err(|_| bad())?;
                    if a > b {
                        return Err(bad());
                    }
                    (a, b)
                }
                None => {
                    let p: u16 = p.trim().parse().map_err(|_| bad())?;
                    (p, p)
                }
            },
        };
        let host = host.trim().to_ascii_lowercase();
        let host = if host == "*" {
            HostPattern::Any
        } else if let Some(s) = host.strip_prefix("*.") {
            if s.is_empty() {
                return Err(bad());
            }
            HostPattern::Suffix(s.to_owned())
        } else if let Some((ip, bits)) = host.split_once('/') {
            let ip: IpAddr = ip.parse().map_err(|_| bad())?;
            let bits: u8 = bits.parse().map_err(|_| bad())?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            if bits > max {
                return Err(bad());
            }
            HostPattern::Net(ip, bits)
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            HostPattern::Net(ip, if ip.is_ipv4() { 32 } else { 128 })
        } else if host.is_empty() || host.contains('*') {
            return Err(bad());
        } else {
            HostPattern::Name(host)
        };
        Ok(EndpointPattern {
            host,
            ports,
            text: t.to_owned(),
        })
    }

    pub fn matches(&self, host: &str, port: u16) -> bool {
        if port < self.ports.0 || port > self.ports.1 {
            return false;
        }
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let lower = host.to_ascii_lowercase();
        let lower = lower.trim_end_matches('.');
        match &self.host {
            HostPattern::Any => true,
            HostPattern::Suffix(s) => lower
                .strip_suffix(s.as_str())
                .is_some_and(|rest| rest.ends_with('.')),
            HostPattern::Name(n) => lower == n,
            HostPattern::Net(net, bits) => match lower.parse::<IpAddr>() {
                Ok(ip) => in_network(ip, *net, *bits),
                Err(_) => false,
            },
        }
    }
}

fn in_network(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits as u32)
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits as u32)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        // an IPv4-mapped IPv6 address against an IPv4 network
        (IpAddr::V6(a), IpAddr::V4(_)) => a
            .to_ipv4_mapped()
            .is_some_and(|a| in_network(IpAddr::V4(a), net, bits)),
        _ => false,
    }
}

/// Parse `--allow-connect`: a comma-separated list of patterns; `*` (the default) allows
/// any host.
pub fn parse_allow_connect(
    text: &str,
) -> std::result::Result<Option<Vec<EndpointPattern>>, String> {
    let patterns: Vec<EndpointPattern> = text
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(EndpointPattern::parse)
        .collect::<std::result::Result<_, _>>()?;
    if patterns.is_empty() {
        return Err("--allow-connect needs at least one pattern (* allows any host)".into());
    }
    if patterns
        .iter()
        .any(|p| p.host == HostPattern::Any && p.ports == (0, u16::MAX))
    {
        return Ok(None);
    }
    Ok(Some(patterns))
}

fn not_allowed(what: &str, host: &str, port: u16, patterns: &[EndpointPattern]) -> WeirError {
    let allowed: Vec<&str> = patterns.iter().map(|p| p.text.as_str()).collect();
    WeirError::new(
        sqlstate::INSUFFICIENT_PRIVILEGE,
        format!("{what} {host}:{port} is not allowed by the server's --allow-connect"),
    )
    .with_detail(format!("allowed: {}", allowed.join(", ")))
}

/// May a connector connect to `host:port`? `what` names it for the error ("kafka broker").
pub fn check_endpoint(what: &str, host: &str, port: u16) -> Result<()> {
    match &policy().allow_connect {
        None => Ok(()),
        Some(patterns) if patterns.iter().any(|p| p.matches(host, port)) => Ok(()),
        Some(patterns) => Err(not_allowed(what, host, port, patterns)),
    }
}

/// Check the brokers a cluster advertises in its metadata (the client connects to them
/// after the bootstrap server answered): each must be allowed too.
pub fn check_brokers<'a>(brokers: impl IntoIterator<Item = (&'a str, i32)>) -> Result<()> {
    for (host, port) in brokers {
        let port = u16::try_from(port).unwrap_or(0);
        check_endpoint("kafka broker (advertised by the cluster)", host, port)?;
    }
    Ok(())
}

/// Split `host:port` (`[v6]:port`; a missing port is `default_port`).
pub fn split_host_port(s: &str, default_port: u16) -> std::result::Result<(String, u16), String> {
    let s = s.trim();
    let s = s.split_once("://").map(|(_, rest)| rest).unwrap_or(s);
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("'{s}' is not host:port"))?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| format!("'{s}' has no valid port"))?,
            None => default_port,
        };
        return Ok((h.to_owned(), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => Ok((
            h.to_owned(),
            p.parse().map_err(|_| format!("'{s}' has no valid port"))?,
        )),
        _ => Ok((s.to_owned(), default_port)),
    }
}

/// Check a Kafka bootstrap list (`host:port,host:port`).
pub fn check_bootstrap(list: &str) -> Result<()> {
    for entry in list.split(',').filter(|e| !e.trim().is_empty()) {
        let (host, port) = split_host_port(entry, 9092).map_err(|e| {
            WeirError::invalid_parameter(format!("properties.bootstrap.server: {e}"))
        })?;
        check_endpoint("kafka broker", &host, port)?;
    }
    Ok(())
}

/// Check an `http://` or `https://` URL a connector will call.
pub fn check_url(what: &str, url: &str) -> Result<()> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| WeirError::invalid_parameter(format!("{what} '{url}' is not a URL")))?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        other => {
            return Err(WeirError::invalid_parameter(format!(
                "{what} must be an http:// or https:// URL, not {other}://"
            )));
        }
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(authority);
    let (host, port) = split_host_port(authority, default_port)
        .map_err(|e| WeirError::invalid_parameter(format!("{what}: {e}")))?;
    check_endpoint(what, &host, port)
}

/// Why a librdkafka property may not be set from SQL, if it may not.
enum Refusal {
    /// Loads code, runs a command, or hands the server's identity to someone.
    Dangerous(&'static str),
    /// Names a file on the server (allowed with `--allow-connector-files`).
    File,
    /// Weir sets it itself; changing it would break what Weir promises.
    Managed(&'static str),
}

/// librdkafka properties a `properties.*` option may set: client tuning, timeouts,
/// security protocol and credentials given by value.
const ALLOWED: &[&str] = &[
    // client and network tuning
    "client.id",
    "client.rack",
    "client.dns.lookup",
    "message.max.bytes",
    "message.copy.max.bytes",
    "receive.message.max.bytes",
    "max.in.flight",
    "max.in.flight.requests.per.connection",
    "metadata.max.age.ms",
    "metadata.recovery.strategy",
    "metadata.recovery.rebootstrap.trigger.ms",
    "topic.metadata.refresh.interval.ms",
    "topic.metadata.refresh.fast.interval.ms",
    "topic.metadata.refresh.fast.cnt",
    "topic.metadata.refresh.sparse",
    "topic.metadata.propagation.max.ms",
    "topic.blacklist",
    "socket.timeout.ms",
    "socket.blocking.max.ms",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "socket.keepalive.enable",
    "socket.nagle.disable",
    "socket.max.fails",
    "socket.connection.setup.timeout.ms",
    "broker.address.ttl",
    "broker.address.family",
    "connections.max.idle.ms",
    "reconnect.backoff.jitter.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "retry.backoff.ms",
    "retry.backoff.max.ms",
    "statistics.interval.ms",
    "enable.metrics.push",
    "api.version.request",
    "api.version.request.timeout.ms",
    "api.version.fallback.ms",
    "broker.version.fallback",
    "allow.auto.create.topics",
    "log.connection.close",
    "enable.random.seed",
    // security, with credentials by value
    "security.protocol",
    "sasl.mechanism",
    "sasl.mechanisms",
    "sasl.username",
    "sasl.password",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.extensions",
    "sasl.oauthbearer.method",
    "sasl.oauthbearer.client.id",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.client.credentials.client.id",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.scope",
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.oauthbearer.grant.type",
    "sasl.oauthbearer.assertion.algorithm",
    "sasl.oauthbearer.assertion.claim.aud",
    "sasl.oauthbearer.assertion.claim.exp.seconds",
    "sasl.oauthbearer.assertion.claim.iss",
    "sasl.oauthbearer.assertion.claim.jti.include",
    "sasl.oauthbearer.assertion.claim.nbf.seconds",
    "sasl.oauthbearer.assertion.claim.sub",
    "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.metadata.authentication.type",
    "enable.sasl.oauthbearer.unsecure.jwt",
    "ssl.ca.pem",
    "ssl.certificate.pem",
    "ssl.key.pem",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.endpoint.identification.algorithm",
    "ssl.cipher.suites",
    "ssl.curves.list",
    "ssl.sigalgs.list",
    "enable.ssl.certificate.verification",
    "https.ca.pem",
    // consumer tuning
    "fetch.wait.max.ms",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "fetch.message.max.bytes",
    "max.partition.fetch.bytes",
    "fetch.error.backoff.ms",
    "fetch.queue.backoff.ms",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "check.crcs",
    "isolation.level",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "coordinator.query.interval.ms",
    "consume.callback.max.messages",
    // producer tuning
    "batch.num.messages",
    "batch.size",
    "compression.codec",
    "compression.type",
    "compression.level",
    "delivery.timeout.ms",
    "message.timeout.ms",
    "linger.ms",
    "queue.buffering.max.ms",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "queue.buffering.backpressure.threshold",
    "message.send.max.retries",
    "retries",
    "request.timeout.ms",
    "sticky.partitioning.linger.ms",
    "partitioner",
    "transaction.timeout.ms",
];

fn refusal(name: &str) -> Option<Refusal> {
    Some(match name {
        "plugin.library.paths" => Refusal::Dangerous("it loads a shared library into the server"),
        "ssl.engine.location" | "ssl.engine.id" | "ssl.providers" => {
            Refusal::Dangerous("it loads OpenSSL engine or provider code into the server")
        }
        "sasl.kerberos.kinit.cmd" => Refusal::Dangerous("it runs a shell command on the server"),
        "sasl.kerberos.keytab"
        | "sasl.kerberos.principal"
        | "sasl.kerberos.service.name"
        | "sasl.kerberos.min.time.before.relogin" => Refusal::Dangerous(
            "Kerberos (GSSAPI) runs kinit on the server with the server's credentials",
        ),
        "internal.termination.signal" => {
            Refusal::Dangerous("it makes the client library send signals inside the server")
        }
        "debug" | "log_level" | "log.queue" | "log.thread.name" => {
            Refusal::Managed("the server's logging is set with WEIR_LOG")
        }
        "bootstrap.servers" | "metadata.broker.list" => {
            Refusal::Managed("brokers are given with properties.bootstrap.server")
        }
        "group.id"
        | "group.instance.id"
        | "group.protocol"
        | "group.protocol.type"
        | "group.remote.assignor"
        | "partition.assignment.strategy"
        | "enable.auto.commit"
        | "auto.commit.enable"
        | "auto.commit.interval.ms"
        | "enable.auto.offset.store"
        | "enable.partition.eof"
        | "offset.store.method"
        | "offset.store.sync.interval.ms" => Refusal::Managed(
            "Weir assigns partitions and keeps offsets itself (nothing is committed to a consumer group)",
        ),
        "auto.offset.reset" => Refusal::Managed("the start position is scan.startup.mode"),
        "transactional.id"
        | "enable.idempotence"
        | "acks"
        | "request.required.acks"
        | "enable.gapless.guarantee"
        | "delivery.report.only.error"
        | "produce.offset.report"
        | "queuing.strategy" => Refusal::Managed(
            "Weir's sinks set delivery themselves (idempotent, acks=all, transactions)",
        ),
        n if n.ends_with(".location")
            || n.ends_with(".file")
            || n.ends_with(".path")
            || n == "ssl.ca.certificate.stores" =>
        {
            Refusal::File
        }
        _ => return None,
    })
}

/// May `properties.<name> = value` be passed to librdkafka? Refused with 42501 (code,
/// commands, files) or 22023 (unknown, or set by Weir itself), naming the property.
pub fn check_kafka_property(name: &str, value: &str) -> Result<()> {
    let option = format!("properties.{name}");
    match refusal(name) {
        Some(Refusal::Dangerous(why)) => {
            return Err(WeirError::new(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                format!("option \"{option}\" is not allowed: {why}"),
            ));
        }
        Some(Refusal::File) => {
            // the system CA bundle is not a file the user chooses
            if name == "ssl.ca.location" && value.trim().eq_ignore_ascii_case("probe") {
                return Ok(());
            }
            if !policy().allow_files {
                return Err(WeirError::new(
                    sqlstate::INSUFFICIENT_PRIVILEGE,
                    format!("option \"{option}\" names a file on the server, which SQL may not do"),
                )
                .with_hint(
                    "Give the credential by value (ssl.ca.pem, ssl.certificate.pem, ssl.key.pem), or start the server with --allow-connector-files.",
                ));
            }
            return Ok(());
        }
        Some(Refusal::Managed(why)) => {
            return Err(WeirError::invalid_parameter(format!(
                "option \"{option}\" cannot be set: {why}"
            )));
        }
        None => {}
    }
    if !ALLOWED.contains(&name) {
        return Err(WeirError::invalid_parameter(format!(
            "unknown or unsupported Kafka property \"{option}\""
        ))
        .with_hint("Weir passes through librdkafka's client, security and tuning properties; see docs/kafka.md."));
    }
    match name {
        "sasl.mechanism" | "sasl.mechanisms" if value.trim().eq_ignore_ascii_case("gssapi") => {
            Err(WeirError::new(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                format!(
                    "option \"{option}\" = 'GSSAPI' is not allowed: Kerberos runs kinit on the server with the server's credentials"
                ),
            ))
        }
        "sasl.oauthbearer.metadata.authentication.type"
            if !value.trim().eq_ignore_ascii_case("none") =>
        {
            Err(WeirError::new(
                sqlstate::INSUFFICIENT_PRIVILEGE,
                format!(
                    "option \"{option}\" = '{value}' is not allowed: it would hand the server's cloud identity to the connection"
                ),
            ))
        }
        "sasl.oauthbearer.token.endpoint.url" => check_url(&option, value),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_as_written() {
        let p = |s: &str| EndpointPattern::parse(s).expect(s);
        assert!(p("*").matches("anything", 1));
        assert!(p("127.0.0.1:9092").matches("127.0.0.1", 9092));
        assert!(!p("127.0.0.1:9092").matches("127.0.0.1", 9093));
        assert!(p("10.0.0.0/8:*").matches("10.1.2.3", 5));
        assert!(!p("10.0.0.0/8:*").matches("11.1.2.3", 5));
        assert!(!p("10.0.0.0/8:*").matches("ten.example", 5));
        assert!(p("*.example.com:9092-9094").matches("b1.Example.com", 9093));
        assert!(!p("*.example.com:9092").matches("example.com", 9092));
        assert!(!p("*.example.com:9092").matches("badexample.com", 9092));
        assert!(p("[::1]:9092").matches("[::1]", 9092));
        assert!(p("kafka").matches("KAFKA", 1234));
        assert!(EndpointPattern::parse("a:b").is_err());
        assert!(EndpointPattern::parse("a*b:1").is_err());
        assert!(EndpointPattern::parse("10.0.0.0/40").is_err());
        assert_eq!(parse_allow_connect("*").unwrap(), None);
        assert!(parse_allow_connect("").is_err());
    }

    #[test]
    fn host_port_splitting() {
        assert_eq!(
            split_host_port("PLAINTEXT://b:9093", 9092).unwrap(),
            ("b".into(), 9093)
        );
        assert_eq!(split_host_port("b", 9092).unwrap(), ("b".into(), 9092));
        assert_eq!(split_host_port("[::1]:1", 9092).unwrap(), ("::1".into(), 1));
        assert!(split_host_port("b:x", 9092).is_err());
    }

    #[test]
    fn dangerous_properties_are_refused() {
        let code = |n: &str, v: &str| check_kafka_property(n, v).err().map(|e| e.code);
        assert_eq!(code("plugin.library.paths", "/x.so"), Some("42501"));
        assert_eq!(code("sasl.kerberos.kinit.cmd", "id"), Some("42501"));
        assert_eq!(code("ssl.engine.location", "/x"), Some("42501"));
        assert_eq!(code("ssl.key.location", "/etc/shadow"), Some("42501"));
        assert_eq!(code("sasl.oauthbearer.assertion.file", "/x"), Some("42501"));
        assert_eq!(code("offset.store.path", "/x"), Some("42501"));
        assert_eq!(code("sasl.mechanism", "GSSAPI"), Some("42501"));
        assert_eq!(code("no.such.thing", "1"), Some("22023"));
        assert_eq!(code("enable.partition.eof", "false"), Some("22023"));
        assert_eq!(code("ssl.ca.location", "probe"), None);
        assert_eq!(code("security.protocol", "SASL_SSL"), None);
        assert_eq!(code("sasl.password", "x"), None);
        assert_eq!(code("fetch.max.bytes", "1000"), None);
    }
}
