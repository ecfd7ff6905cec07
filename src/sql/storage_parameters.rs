//! Postgres' storage parameters (`CREATE TABLE ... WITH (fillfactor = 70)`, `ALTER TABLE t
//! SET (autovacuum_enabled = false)`, `RESET (...)`, `CREATE INDEX ... WITH (fillfactor =
//! 80)`): checked as Postgres checks them — the name known for a table or an index, the
//! value of the parameter's type and in its range (22023 with Postgres' messages) — and
//! then ignored, as `ALTER COLUMN ... SET STATISTICS` is. They tune Postgres' heap pages,
//! its autovacuum and its B-tree pages, none of which Weir has; pg_dump writes them for
//! tables that had them, and some migrations set them.

use crate::error::{Result, WeirError, sqlstate};

/// What a parameter's value must be.
#[derive(Clone, Copy)]
enum Kind {
    Int(i64, i64),
    Real(f64, f64),
    Bool,
    /// `vacuum_index_cleanup`: a Boolean or `auto`
    BoolOrAuto,
}

const MAX_INT: i64 = i32::MAX as i64;

/// A table's (heap's) parameters, Postgres 15 (`toast.` ones: the same autovacuum and
/// vacuum settings of the TOAST table).
const TABLE: &[(&str, Kind)] = &[
    ("fillfactor", Kind::Int(10, 100)),
    ("toast_tuple_target", Kind::Int(128, 8160)),
    ("parallel_workers", Kind::Int(0, 1024)),
    ("autovacuum_enabled", Kind::Bool),
    ("vacuum_index_cleanup", Kind::BoolOrAuto),
    ("vacuum_truncate", Kind::Bool),
    ("autovacuum_vacuum_threshold", Kind::Int(0, MAX_INT)),
    ("autovacuum_vacuum_insert_threshold", Kind::Int(-1, MAX_INT)),
    ("autovacuum_analyze_threshold", Kind::Int(0, MAX_INT)),
    ("autovacuum_vacuum_scale_factor", Kind::Real(0.0, 100.0)),
    (
        "autovacuum_vacuum_insert_scale_factor",
        Kind::Real(0.0, 100.0),
    ),
    ("autovacuum_analyze_scale_factor", Kind::Real(0.0, 100.0)),
    ("autovacuum_vacuum_cost_delay", Kind::Real(0.0, 100.0)),
    ("autovacuum_vacuum_cost_limit", Kind::Int(1, 10000)),
    ("autovacuum_freeze_min_age", Kind::Int(0, 1_000_000_000)),
    (
        "autovacuum_freeze_max_age",
        Kind::Int(100_000, 2_000_000_000),
    ),
    ("autovacuum_freeze_table_age", Kind::Int(0, 2_000_000_000)),
    (
        "autovacuum_multixact_freeze_min_age",
        Kind::Int(0, 1_000_000_000),
    ),
    (
        "autovacuum_multixact_freeze_max_age",
        Kind::Int(10_000, 2_000_000_000),
    ),
    (
        "autovacuum_multixact_freeze_table_age",
        Kind::Int(0, 2_000_000_000),
    ),
    ("log_autovacuum_min_duration", Kind::Int(-1, MAX_INT)),
    ("user_catalog_table", Kind::Bool),
];

/// The TOAST table's parameters (`toast.name`).
const TOAST: &[&str] = &[
    "autovacuum_enabled",
    "vacuum_index_cleanup",
    "vacuum_truncate",
    "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_insert_threshold",
    "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_insert_scale_factor",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_cost_limit",
    "autovacuum_freeze_min_age",
    "autovacuum_freeze_max_age",
    "autovacuum_freeze_table_age",
    "autovacuum_multixact_freeze_min_age",
    "autovacuum_multixact_freeze_max_age",
    "autovacuum_multixact_freeze_table_age",
    "log_autovacuum_min_duration",
];

/// A B-tree's (and a hash index's) parameters.
const INDEX: &[(&str, Kind)] = &[
    ("fillfactor", Kind::Int(10, 100)),
    ("deduplicate_items", Kind::Bool),
];

/// What the parameters are of.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Of {
    Table,
    Index,
}

fn kind_of(of: Of, name: &str) -> Option<Kind> {
    let find = |list: &[(&str, Kind)], n: &str| list.iter().find(|(k, _)| *k == n).map(|(_, k)| *k);
    match of {
        Of::Index => find(INDEX, name),
        Of::Table => match name.strip_prefix("toast.") {
            Some(t) if TOAST.contains(&t) || t == "fillfactor" => find(TABLE, t),
            Some(_) => None,
            None => find(TABLE, name),
        },
    }
}

/// Whether `name` is one of the parameters of `of` (lower case, as written unquoted).
pub fn is_known(of: Of, name: &str) -> bool {
    kind_of(of, name).is_some()
}

/// Check parameters (name, value; a name written without a value is `true`, as Postgres
/// reads it). (`RESET (names)` checks nothing, as in Postgres.)
pub fn check(of: Of, params: &[(String, Option<String>)]) -> Result<()> {
    for (name, value) in params {
        let bad = |m: String| WeirError::new(sqlstate::INVALID_PARAMETER_VALUE, m);
        let Some(kind) = kind_of(of, name) else {
            return Err(bad(format!("unrecognized parameter \"{name}\"")));
        };
        let v = value.as_deref().unwrap_or("true").trim();
        let out_of_bounds = |lo: String, hi: String| {
            bad(format!("value {v} out of bounds for option \"{name}\""))
                .with_detail(format!("Valid values are between \"{lo}\" and \"{hi}\"."))
        };
        let boolean = |v: &str| {
            matches!(
                v.to_ascii_lowercase().as_str(),
                "true" | "false" | "on" | "off" | "yes" | "no" | "1" | "0" | "t" | "f" | "y" | "n"
            )
        };
        match kind {
            Kind::Int(lo, hi) => {
                // (a fraction is rounded, as Postgres' parse_int does)
                let n = v
                    .parse::<i64>()
                    .ok()
                    .or_else(|| {
                        v.parse::<f64>()
                            .ok()
                            .filter(|x| x.is_finite())
                            .map(|x| x.round() as i64)
                    })
                    .ok_or_else(|| {
                        bad(format!("invalid value for integer option \"{name}\": {v}"))
                    })?;
                if n < lo || n > hi {
                    return Err(out_of_bounds(lo.to_string(), hi.to_string()));
                }
            }
            Kind::Real(lo, hi) => {
                let x: f64 = v.parse().map_err(|_| {
                    bad(format!(
                        "invalid value for floating point option \"{name}\": {v}"
                    ))
                })?;
                if !(lo..=hi).contains(&x) {
                    return Err(out_of_bounds(format!("{lo:.6}"), format!("{hi:.6}")));
                }
            }
            Kind::Bool if !boolean(v) => {
                return Err(bad(format!(
                    "invalid value for boolean option \"{name}\": {v}"
                )));
            }
            Kind::BoolOrAuto if !boolean(v) && !v.eq_ignore_ascii_case("auto") => {
                return Err(
                    bad(format!("invalid value for enum option \"{name}\": {v}"))
                        .with_detail("Valid values are \"on\", \"off\", and \"auto\"."),
                );
            }
            Kind::Bool | Kind::BoolOrAuto => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(name: &str, v: Option<&str>) -> Vec<(String, Option<String>)> {
        vec![(name.to_owned(), v.map(str::to_owned))]
    }

    #[test]
    fn checked_as_postgres_checks_them() {
        assert!(check(Of::Table, &p("fillfactor", Some("70"))).is_ok());
        assert!(check(Of::Table, &p("toast.autovacuum_enabled", Some("off"))).is_ok());
        assert!(
            check(
                Of::Table,
                &p("autovacuum_vacuum_scale_factor", Some("0.01"))
            )
            .is_ok()
        );
        assert!(check(Of::Table, &p("vacuum_index_cleanup", Some("auto"))).is_ok());
        assert!(check(Of::Table, &p("fillfactor", Some("70.5"))).is_ok());
        assert!(check(Of::Table, &p("autovacuum_enabled", None)).is_ok());
        let e = check(Of::Table, &p("fillfactor", None)).unwrap_err();
        assert_eq!(
            e.message,
            "invalid value for integer option \"fillfactor\": true"
        );
        assert!(check(Of::Index, &p("deduplicate_items", Some("false"))).is_ok());
        let e = check(Of::Table, &p("fillfactor", Some("5"))).unwrap_err();
        assert_eq!(e.message, "value 5 out of bounds for option \"fillfactor\"");
        assert_eq!(
            e.detail.as_deref(),
            Some("Valid values are between \"10\" and \"100\".")
        );
        let e = check(Of::Table, &p("nosuch", Some("1"))).unwrap_err();
        assert_eq!(e.message, "unrecognized parameter \"nosuch\"");
        assert_eq!(e.code, sqlstate::INVALID_PARAMETER_VALUE);
        assert!(check(Of::Index, &p("autovacuum_enabled", Some("on"))).is_err());
        assert!(check(Of::Table, &p("toast.parallel_workers", Some("2"))).is_err());
        let e = check(Of::Table, &p("autovacuum_enabled", Some("maybe"))).unwrap_err();
        assert_eq!(
            e.message,
            "invalid value for boolean option \"autovacuum_enabled\": maybe"
        );
    }
}
