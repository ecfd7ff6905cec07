//! Session settings (`SET`, `SHOW`, `current_setting`, `set_config`): which names exist,
//! which values Weir honours, and the session's current values.
//!
//! Every setting is either honoured or refused: a value Weir cannot act on gets 22023 (or
//! 0A000 for a feature it does not have), a read-only setting 55P02, an unknown name 42704
//! as in Postgres. Names with a dot (`weir.anything`, `myapp.user_id`) are custom settings
//! and are stored as given, as Postgres stores them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Result, WeirError, sqlstate};
use crate::serving::memory::StatementMemoryPool;

/// Settings a client can read with SHOW (and `pg_settings`), with their defaults. Names are
/// lower case; SHOW and SET match case-insensitively. `work_mem` and `max_connections`
/// come from the server's flags at run time.
pub const DEFAULT_SETTINGS: &[(&str, &str)] = &[
    ("application_name", ""),
    ("block_size", "8192"),
    ("bytea_output", "hex"),
    ("check_function_bodies", "on"),
    ("client_encoding", "UTF8"),
    ("client_min_messages", "notice"),
    ("datestyle", "ISO, MDY"),
    ("default_table_access_method", "heap"),
    ("default_tablespace", ""),
    ("default_transaction_isolation", "read committed"),
    ("default_transaction_read_only", "off"),
    ("extra_float_digits", "1"),
    ("idle_in_transaction_session_timeout", "0"),
    ("in_hot_standby", "off"),
    ("integer_datetimes", "on"),
    ("intervalstyle", "postgres"),
    ("is_superuser", "on"),
    ("lc_collate", "C.UTF-8"),
    ("lc_ctype", "C.UTF-8"),
    ("lc_messages", "C.UTF-8"),
    ("lc_monetary", "C.UTF-8"),
    ("lc_numeric", "C.UTF-8"),
    ("lc_time", "C.UTF-8"),
    ("lock_timeout", "0"),
    ("max_connections", "1000"),
    ("max_identifier_length", "63"),
    ("max_index_keys", "32"),
    ("password_encryption", "scram-sha-256"),
    ("row_security", "on"),
    ("search_path", "\"$user\", public"),
    ("server_encoding", "UTF8"),
    ("server_version", crate::server::PG_VERSION),
    ("server_version_num", crate::server::PG_VERSION_NUM),
    ("ssl", "off"),
    ("standard_conforming_strings", "on"),
    ("statement_timeout", "0"),
    ("timezone", "UTC"),
    ("transaction_isolation", "read committed"),
    ("transaction_read_only", "off"),
    ("work_mem", "2GB"),
    ("xmloption", "content"),
];

/// Settings that cannot be changed in a session (Postgres: 55P02).
const READ_ONLY: &[&str] = &[
    "block_size",
    "in_hot_standby",
    "integer_datetimes",
    "is_superuser",
    "lc_collate",
    "lc_ctype",
    "max_connections",
    "max_identifier_length",
    "max_index_keys",
    "server_encoding",
    "server_version",
    "server_version_num",
    "ssl",
];

/// How SHOW names a setting's column (Postgres keeps the spelling of the canonical name).
pub fn canonical_name(name: &str) -> &str {
    match name {
        "datestyle" => "DateStyle",
        "timezone" => "TimeZone",
        "intervalstyle" => "IntervalStyle",
        other => other,
    }
}

/// Settings reported to the client with ParameterStatus when they change.
pub fn is_reported(name: &str) -> bool {
    matches!(
        name,
        "application_name"
            | "client_encoding"
            | "datestyle"
            | "timezone"
            | "intervalstyle"
            | "standard_conforming_strings"
            | "integer_datetimes"
            | "is_superuser"
            | "server_version"
            | "default_transaction_read_only"
    )
}

/// Normalize a SHOW/SET name: lower case, multi-word aliases mapped.
pub fn normalize(name: &str) -> String {
    let n = name.trim().to_lowercase();
    match n.as_str() {
        "transaction isolation level" => "transaction_isolation".into(),
        "time zone" => "timezone".into(),
        "session authorization" => "session_authorization".into(),
        "names" => "client_encoding".into(),
        _ => n,
    }
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    if v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'') {
        v[1..v.len() - 1].replace("''", "'")
    } else {
        v.to_owned()
    }
}

fn bad_value(name: &str, value: &str, why: &str) -> WeirError {
    WeirError::invalid_parameter(format!(
        "invalid value for parameter \"{name}\": \"{value}\""
    ))
    .with_detail(why.to_owned())
}

/// Postgres booleans: on/off, true/false, yes/no, 1/0 and unique prefixes.
pub fn parse_bool(v: &str) -> Option<bool> {
    let v = v.trim().to_ascii_lowercase();
    match v.as_str() {
        "on" | "true" | "yes" | "1" | "t" | "tr" | "tru" | "y" | "ye" => Some(true),
        "off" | "false" | "no" | "0" | "f" | "fa" | "fal" | "fals" | "n" | "of" => Some(false),
        _ => None,
    }
}

/// A Postgres time setting: a bare number in ms, or with a unit (us, ms, s, min, h, d).
pub fn parse_duration(v: &str) -> Option<Duration> {
    let t = v.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().ok()?;
    let ms = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" => n,
        "us" => n / 1000.0,
        "s" => n * 1000.0,
        "min" => n * 60_000.0,
        "h" => n * 3_600_000.0,
        "d" => n * 86_400_000.0,
        _ => return None,
    };
    if !ms.is_finite() || ms < 0.0 || ms > i32::MAX as f64 {
        return None;
    }
    Some(Duration::from_micros((ms * 1000.0) as u64))
}

/// The unit `pg_settings` gives a setting's value in (Postgres' base units), for those
/// that have one.
pub fn unit_of(name: &str) -> Option<&'static str> {
    match name {
        "statement_timeout" | "lock_timeout" | "idle_in_transaction_session_timeout" => Some("ms"),
        "work_mem" => Some("kB"),
        _ => None,
    }
}

/// A setting's value as `pg_settings.setting` shows it: in [`unit_of`]'s unit where it has
/// one (`work_mem = '2GB'` is `2097152`, `statement_timeout = '5s'` is `5000`), else as set.
pub fn in_unit(name: &str, value: &str) -> String {
    match unit_of(name) {
        Some("ms") => parse_duration(value)
            .map(|d| d.as_millis().to_string())
            .unwrap_or_else(|| value.to_owned()),
        Some("kB") => crate::limits::parse_size_with(value, 1024)
            .map(|b| (b / 1024).to_string())
            .unwrap_or_else(|_| value.to_owned()),
        _ => value.to_owned(),
    }
}

/// `pg_settings.vartype`: `integer` for the settings with a unit and the numbers, `bool`
/// for the on/off ones, else `string`.
pub fn vartype_of(name: &str, default: &str) -> &'static str {
    if unit_of(name).is_some()
        || (!default.is_empty() && default.bytes().all(|b| b.is_ascii_digit()))
    {
        "integer"
    } else if matches!(default, "on" | "off") {
        "bool"
    } else {
        "string"
    }
}

/// A time setting as Postgres shows it: the largest unit that divides it (`1s`, `90s`,
/// `1500ms`, `2min`), `0` when off.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    if ms == 0 {
        return "0".into();
    }
    for (unit, name) in [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "min"),
        (1000, "s"),
    ] {
        if ms.is_multiple_of(unit) {
            return format!("{}{name}", ms / unit);
        }
    }
    format!("{ms}ms")
}

fn isolation(name: &str, v: &str) -> Result<String> {
    let l = v.trim().to_ascii_lowercase();
    let l = l.split_whitespace().collect::<Vec<_>>().join(" ");
    match l.as_str() {
        "read committed" | "read uncommitted" => Ok(l),
        "repeatable read" | "serializable" => Err(WeirError::not_supported(format!(
            "{} isolation is not supported: Weir runs every transaction at read committed or weaker (see docs/GUARANTEES.md)",
            l.to_uppercase()
        ))
        .with_hint(format!("SET {name} = 'read committed'"))),
        _ => Err(bad_value(name, v, "expected read committed, read uncommitted, repeatable read or serializable")),
    }
}

/// Check `value` for setting `name` (normalized); returns the value to store.
pub fn validate(name: &str, value: &str, max_work_mem: usize) -> Result<String> {
    let v = unquote(value);
    let lower = v.trim().to_ascii_lowercase();
    if READ_ONLY.contains(&name) {
        return Err(WeirError::new(
            sqlstate::CANT_CHANGE_RUNTIME_PARAM,
            format!("parameter \"{name}\" cannot be changed"),
        ));
    }
    let only_default = |ok: bool| -> Result<String> {
        if ok {
            Ok(v.clone())
        } else {
            Err(WeirError::invalid_parameter(format!(
                "invalid value for parameter \"{name}\": \"{v}\" (Weir supports only the default)"
            )))
        }
    };
    match name {
        "application_name" => Ok(v.chars().filter(|c| !c.is_control()).take(63).collect()),
        "client_encoding" => only_default(matches!(lower.as_str(), "utf8" | "utf-8" | "unicode")),
        "datestyle" => {
            let parts: Vec<String> = lower.split(',').map(|p| p.trim().to_owned()).collect();
            only_default(
                parts.iter().any(|p| p == "iso")
                    && parts.iter().all(|p| p == "iso" || p == "mdy" || p == "us"),
            )
        }
        "intervalstyle" => only_default(lower == "postgres"),
        // passwords are kept as SCRAM-SHA-256 verifiers only (md5 is password-equivalent)
        "password_encryption" => only_default(lower == "scram-sha-256"),
        "standard_conforming_strings" => only_default(parse_bool(&lower) == Some(true)),
        // any zone Postgres takes: the session's timestamptz values are read and shown in
        // it (`sql::time_zone`)
        "timezone" => crate::sql::time_zone::Zone::setting(&v)
            .map(|(_, shown)| shown)
            .ok_or_else(|| {
                WeirError::invalid_parameter(format!(
                    "invalid value for parameter \"TimeZone\": \"{v}\""
                ))
            }),
        "bytea_output" => only_default(lower == "hex"),
        "lc_messages" | "lc_monetary" | "lc_numeric" | "lc_time" => only_default(matches!(
            lower.as_str(),
            "c" | "posix" | "c.utf-8" | "c.utf8" | ""
        )),
        "client_min_messages" => match lower.as_str() {
            "debug5" | "debug4" | "debug3" | "debug2" | "debug1" | "debug" | "log" | "notice"
            | "warning" | "error" => Ok(lower),
            _ => Err(bad_value(
                name,
                &v,
                "expected debug5..debug1, log, notice, warning or error",
            )),
        },
        "default_transaction_isolation" | "transaction_isolation" => isolation(name, &v),
        "default_transaction_read_only"
        | "transaction_read_only"
        | "row_security"
        | "check_function_bodies" => match parse_bool(&lower) {
            Some(b) => Ok(if b { "on" } else { "off" }.to_owned()),
            None => Err(bad_value(name, &v, "expected a Boolean value")),
        },
        "extra_float_digits" => match lower.parse::<i32>() {
            Ok(n) if (1..=3).contains(&n) => Ok(n.to_string()),
            Ok(n) if (-15..=0).contains(&n) => Err(WeirError::not_supported(format!(
                "extra_float_digits = {n} is not supported: Weir prints floats in their shortest exact form (1 to 3)"
            ))),
            _ => Err(bad_value(name, &v, "expected an integer from -15 to 3")),
        },
        "statement_timeout" | "lock_timeout" | "idle_in_transaction_session_timeout" => {
            match parse_duration(&lower) {
                Some(d) => Ok(format_duration(d)),
                None => Err(bad_value(
                    name,
                    &v,
                    "expected a duration such as 5000, '5s' or '1min'",
                )),
            }
        }
        "work_mem" => {
            let bytes = crate::limits::parse_size_with(&lower, 1024)
                .map_err(|e| bad_value(name, &v, &e))?;
            if bytes < 64 * 1024 {
                return Err(bad_value(name, &v, "work_mem must be at least 64kB"));
            }
            if bytes > max_work_mem {
                return Err(WeirError::invalid_parameter(format!(
                    "work_mem cannot be more than the server's --query-memory-limit ({})",
                    crate::limits::format_size(max_work_mem)
                )));
            }
            Ok(crate::limits::format_size(bytes))
        }
        // pg_dump's preamble sets these to their defaults: Weir has one storage, no
        // tablespaces and no xml type
        "default_table_access_method" => match lower.as_str() {
            "heap" => Ok(lower),
            _ => Err(bad_value(
                name,
                &v,
                &format!("Table access method \"{v}\" does not exist."),
            )),
        },
        "default_tablespace" => match lower.as_str() {
            "" | "pg_default" => Ok(lower),
            _ => Err(WeirError::not_supported(format!(
                "tablespace \"{v}\" is not supported: Weir keeps all data in its --data-dir"
            ))),
        },
        "xmloption" => match lower.as_str() {
            "content" | "document" => Ok(lower),
            _ => Err(bad_value(name, &v, "expected content or document")),
        },
        // (any names, as Postgres takes them: schemas that do not exist are skipped when a
        // name is looked up along the path, `catalog/schemas.rs`)
        "search_path" => Ok(v),
        // SET ROLE / SET SESSION AUTHORIZATION are checked and applied by the engine
        // (`engine/security.rs`), which records the result with `set_identity`
        "session_authorization" | "role" => Err(WeirError::new(
            sqlstate::CANT_CHANGE_RUNTIME_PARAM,
            format!("parameter \"{name}\" is set with SET ROLE / SET SESSION AUTHORIZATION"),
        )),
        n if n.contains('.') => Ok(v),
        n => Err(WeirError::new(
            sqlstate::UNDEFINED_OBJECT,
            format!("unrecognized configuration parameter \"{n}\""),
        )),
    }
}

/// A session's settings: the values it SET, over the server's defaults. Shared with the
/// session's `current_setting()` and `set_config()`.
pub struct SettingsStore {
    set: BTreeMap<String, String>,
    defaults: BTreeMap<String, String>,
    memory: Arc<StatementMemoryPool>,
    max_work_mem: usize,
    /// What `set_config()` changed since the session last looked: (name, the value the
    /// session had SET before, is_local), for the session to keep as a SET in its block
    /// ([`crate::server::session::Session::settle_function_settings`]).
    journal: Vec<(String, Option<String>, bool)>,
}

impl SettingsStore {
    pub fn new(
        memory: Arc<StatementMemoryPool>,
        max_work_mem: usize,
        max_connections: usize,
    ) -> Self {
        let mut defaults: BTreeMap<String, String> = DEFAULT_SETTINGS
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        defaults.insert("work_mem".into(), crate::limits::format_size(max_work_mem));
        defaults.insert("max_connections".into(), max_connections.to_string());
        memory.set_limit(max_work_mem);
        SettingsStore {
            set: BTreeMap::new(),
            defaults,
            memory,
            max_work_mem,
            journal: Vec::new(),
        }
    }

    /// `set_config(name, value, is_local)`: [`set`](Self::set), journaled.
    pub fn set_from_function(&mut self, name: &str, value: &str, local: bool) -> Result<String> {
        let n = normalize(name);
        let before = self.session_value(&n);
        let v = self.set(&n, value)?;
        self.journal.push((n, before, local));
        Ok(v)
    }

    /// The `set_config()` changes since the last call, oldest first.
    pub fn take_journal(&mut self) -> Vec<(String, Option<String>, bool)> {
        std::mem::take(&mut self.journal)
    }

    pub fn get(&self, name: &str) -> Option<String> {
        let n = normalize(name);
        if let Some(v) = self.set.get(&n) {
            return Some(v.clone());
        }
        self.defaults.get(&n).cloned()
    }

    /// Record the session's identity settings (`session_authorization`, `role`), which
    /// RESET ALL does not change.
    pub fn set_identity(&mut self, name: &str, value: &str) {
        self.defaults.insert(name.to_owned(), value.to_owned());
    }

    /// Validate and set; returns the stored value.
    pub fn set(&mut self, name: &str, value: &str) -> Result<String> {
        let n = normalize(name);
        let v = validate(&n, value, self.max_work_mem)?;
        self.apply(&n, &v);
        self.set.insert(n, v.clone());
        Ok(v)
    }

    /// The value the session SET for a setting (None: the default is in force).
    pub fn session_value(&self, name: &str) -> Option<String> {
        self.set.get(&normalize(name)).cloned()
    }

    /// Put back a value [`Self::session_value`] read (a transaction block's SET undone).
    pub fn restore(&mut self, name: &str, value: Option<String>) {
        match value {
            Some(v) => {
                self.apply(name, &v);
                self.set.insert(name.to_owned(), v);
            }
            None => self.reset(name),
        }
    }

    /// Set without the read-only check (the transaction state Weir itself keeps).
    pub fn set_internal(&mut self, name: &str, value: &str) {
        self.set.insert(name.to_owned(), value.to_owned());
    }

    fn apply(&self, name: &str, value: &str) {
        if name == "work_mem"
            && let Ok(bytes) = crate::limits::parse_size_with(value, 1024)
        {
            self.memory.set_limit(bytes);
        }
    }

    pub fn reset(&mut self, name: &str) {
        if name.eq_ignore_ascii_case("all") {
            self.set.clear();
            self.memory.set_limit(self.max_work_mem);
        } else {
            let n = normalize(name);
            self.set.remove(&n);
            if n == "work_mem" {
                self.memory.set_limit(self.max_work_mem);
            }
        }
    }

    pub fn all(&self) -> Vec<(String, String)> {
        let mut out = self.defaults.clone();
        for (k, v) in &self.set {
            out.insert(k.clone(), v.clone());
        }
        out.into_iter().collect()
    }

    /// A time setting in effect (None when 0 = off).
    pub fn duration(&self, name: &str) -> Option<Duration> {
        let v = self.get(name)?;
        parse_duration(&v).filter(|d| !d.is_zero())
    }

    pub fn flag(&self, name: &str) -> bool {
        self.get(name).and_then(|v| parse_bool(&v)).unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> SettingsStore {
        SettingsStore::new(Arc::new(StatementMemoryPool::new(0)), 1 << 30, 100)
    }

    #[test]
    fn unknown_read_only_and_unsupported_settings_are_refused() {
        let mut s = store();
        assert_eq!(s.set("no_such_setting", "1").unwrap_err().code, "42704");
        assert_eq!(s.set("server_version", "1").unwrap_err().code, "55P02");
        assert_eq!(
            s.set("default_transaction_isolation", "serializable")
                .unwrap_err()
                .code,
            "0A000"
        );
        assert_eq!(s.set("timezone", "PST").unwrap_err().code, "22023");
        assert_eq!(
            s.set("timezone", "europe/paris").ok().as_deref(),
            Some("Europe/Paris")
        );
        assert_eq!(s.set("timezone", "'+02'").ok().as_deref(), Some("<+02>-02"));
        assert_eq!(
            s.set("statement_timeout", "soon").unwrap_err().code,
            "22023"
        );
        assert_eq!(s.set("work_mem", "2GB").unwrap_err().code, "22023");
        assert_eq!(s.set("myapp.user", "'ada'").unwrap(), "ada");
        assert_eq!(s.get("MyApp.User").unwrap(), "ada");
    }

    #[test]
    fn honoured_settings_take_effect() {
        let mut s = store();
        s.set("statement_timeout", "'1s'").unwrap();
        assert_eq!(
            s.duration("statement_timeout"),
            Some(Duration::from_secs(1))
        );
        assert_eq!(s.get("statement_timeout").unwrap(), "1s");
        s.set("statement_timeout", "1500").unwrap();
        assert_eq!(s.get("statement_timeout").unwrap(), "1500ms");
        s.set("work_mem", "'64MB'").unwrap();
        assert_eq!(s.memory.limit(), 64 << 20);
        assert_eq!(s.get("work_mem").unwrap(), "64MB");
        s.reset("work_mem");
        assert_eq!(s.memory.limit(), 1 << 30);
        s.set("default_transaction_read_only", "on").unwrap();
        assert!(s.flag("default_transaction_read_only"));
        assert_eq!(s.get("max_connections").unwrap(), "100");
    }
}
