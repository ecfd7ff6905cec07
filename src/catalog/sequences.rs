//! Sequences (`CREATE SEQUENCE`, `serial`, `GENERATED ... AS IDENTITY`): a relation of kind
//! `Sequence` whose parameters are its options (`start`, `increment`, `min`, `max`,
//! `cycle`), and a counter. As in Postgres, values are handed out without transactions
//! (a rolled-back INSERT leaves a gap) and a restart may skip values but never repeats one:
//! the store holds, under `Q{oid}`, the highest value that may have been handed out, written
//! (synchronously) once every [`RESERVE`] values, and a restart continues after it.

use std::collections::HashMap;

use crate::catalog::{Catalog, RelationDesc};
use crate::error::{Result, WeirError};
use crate::state::store::{Durability, WriteBatch};

/// Values reserved per write of the counter (Postgres logs 32 ahead too).
pub const RESERVE: i64 = 32;

/// The DEFAULT of a column a sequence feeds (serial, identity): `nextval('name')`, the name
/// quoted as an identifier where it needs to be (`nextval('"Users_id_seq"')`: unquoted,
/// `nextval` would fold it to lower case, as Postgres does).
pub fn nextval_default(sequence: &str) -> String {
    format!(
        "nextval('{}')",
        crate::catalog::schemas::quote_relation(sequence).replace('\'', "''")
    )
}

/// The sequence a [`nextval_default`] names (also one written before names were quoted,
/// and `nextval('s'::regclass)` as pg_dump writes it).
pub fn sequence_of_default(text: &str) -> Option<String> {
    let arg = text
        .trim()
        .strip_prefix("nextval(")?
        .strip_suffix(')')?
        .trim();
    let arg = arg.strip_suffix("::regclass").unwrap_or(arg);
    let inner = arg
        .strip_prefix('\'')?
        .strip_suffix('\'')?
        .replace("''", "'");
    // (`app.s`, `"App"."S"`: a sequence of a user schema, keyed `app.s`)
    if !inner.contains(['"', '.']) {
        return Some(inner);
    }
    let parts = crate::catalog::pg_catalog::name_parts(&inner);
    Some(match parts.as_slice() {
        [s, n] => crate::sql::parser::relation_key(Some(s), n),
        _ => parts.join("."),
    })
}

/// A sequence's parameters, from its relation's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceSpec {
    pub start: i64,
    pub increment: i64,
    pub min: i64,
    pub max: i64,
    pub cycle: bool,
}

impl SequenceSpec {
    /// Postgres' defaults for the given options (`None`: not given).
    pub fn new(
        start: Option<i64>,
        increment: Option<i64>,
        min: Option<i64>,
        max: Option<i64>,
        cycle: bool,
    ) -> Result<SequenceSpec> {
        let increment = increment.unwrap_or(1);
        if increment == 0 {
            return Err(WeirError::new("22023", "INCREMENT must not be zero"));
        }
        let (min, max) = if increment > 0 {
            (min.unwrap_or(1), max.unwrap_or(i64::MAX))
        } else {
            (min.unwrap_or(i64::MIN), max.unwrap_or(-1))
        };
        if min >= max {
            return Err(WeirError::new(
                "22023",
                format!("MINVALUE ({min}) must be less than MAXVALUE ({max})"),
            ));
        }
        let start = start.unwrap_or(if increment > 0 { min } else { max });
        if start < min {
            return Err(WeirError::new(
                "22023",
                format!("START value ({start}) cannot be less than MINVALUE ({min})"),
            ));
        }
        if start > max {
            return Err(WeirError::new(
                "22023",
                format!("START value ({start}) cannot be greater than MAXVALUE ({max})"),
            ));
        }
        Ok(SequenceSpec {
            start,
            increment,
            min,
            max,
            cycle,
        })
    }

    /// The sequence's type as Postgres shows it: `integer` for one bounded by an integer's
    /// range (`serial`, `AS integer`), else `bigint` (Weir keeps no declared type: a bigint
    /// sequence whose bound is exactly 2147483647 shows as integer).
    pub fn type_name(&self) -> &'static str {
        if self.max == i64::from(i32::MAX) || self.min == i64::from(i32::MIN) {
            "integer"
        } else {
            "bigint"
        }
    }

    pub fn options(&self) -> Vec<(String, String)> {
        vec![
            ("start".into(), self.start.to_string()),
            ("increment".into(), self.increment.to_string()),
            ("min".into(), self.min.to_string()),
            ("max".into(), self.max.to_string()),
            ("cycle".into(), self.cycle.to_string()),
        ]
    }

    pub fn from_options(options: &[(String, String)]) -> SequenceSpec {
        let get = |k: &str| {
            options
                .iter()
                .find(|(n, _)| n == k)
                .and_then(|(_, v)| v.parse::<i64>().ok())
        };
        SequenceSpec {
            start: get("start").unwrap_or(1),
            increment: get("increment").unwrap_or(1),
            min: get("min").unwrap_or(1),
            max: get("max").unwrap_or(i64::MAX),
            cycle: options.iter().any(|(k, v)| k == "cycle" && v == "true"),
        }
    }
}

/// A sequence's counter in memory.
#[derive(Debug, Clone, Copy)]
struct Counter {
    /// The value `nextval` hands out next (None: past the end).
    next: Option<i64>,
    /// Values up to here (in the increment's direction) may have been handed out.
    reserved: Option<i64>,
}

#[derive(Default)]
pub struct Sequences {
    counters: parking_lot::Mutex<HashMap<u32, Counter>>,
}

fn key(oid: u32) -> Vec<u8> {
    let mut k = b"Q".to_vec();
    k.extend_from_slice(&oid.to_be_bytes());
    k
}

impl Catalog {
    fn sequence_desc(&self, oid: u32) -> Result<RelationDesc> {
        self.get_by_oid(oid)
            .map(|e| e.desc.clone())
            .filter(|d| d.kind == crate::catalog::RelationKind::Sequence)
            .ok_or_else(|| {
                WeirError::new(
                    crate::error::sqlstate::UNDEFINED_TABLE,
                    format!("sequence with OID {oid} does not exist"),
                )
            })
    }

    /// Every sequence with its parameters, by name (what `pg_sequence`, `pg_sequences` and
    /// `information_schema.sequences` list).
    pub fn sequences(&self) -> Vec<(std::sync::Arc<crate::catalog::Entry>, SequenceSpec)> {
        let mut v: Vec<_> = self
            .entries()
            .into_iter()
            .filter(|e| e.desc.kind == crate::catalog::RelationKind::Sequence)
            .map(|e| {
                let spec = SequenceSpec::from_options(&e.desc.options);
                (e, spec)
            })
            .collect();
        v.sort_by(|a, b| a.0.desc.name.cmp(&b.0.desc.name));
        v
    }

    /// The value `nextval` gave last (`pg_sequences.last_value`): this process's last, else
    /// the value reserved ahead on disk (after a restart; Postgres also shows the value it
    /// logged ahead), None for a sequence never used.
    pub fn sequence_last_value(&self, oid: u32) -> Option<i64> {
        let desc = self.sequence_desc(oid).ok()?;
        let spec = SequenceSpec::from_options(&desc.options);
        if let Some(c) = self.sequences.counters.lock().get(&oid) {
            return c
                .next
                .and_then(|n| n.checked_sub(spec.increment))
                .or(c.reserved);
        }
        self.store()
            .get(&key(oid))
            .ok()
            .flatten()
            .and_then(|v| v.try_into().ok())
            .map(i64::from_be_bytes)
    }

    /// The next value of a sequence (`nextval`).
    pub fn nextval(&self, oid: u32) -> Result<i64> {
        let desc = self.sequence_desc(oid)?;
        let spec = SequenceSpec::from_options(&desc.options);
        let mut counters = self.sequences.counters.lock();
        let c = match counters.get(&oid) {
            Some(c) => *c,
            None => {
                let reserved = self
                    .store()
                    .get(&key(oid))?
                    .and_then(|v| v.try_into().ok())
                    .map(i64::from_be_bytes);
                let next = match reserved {
                    Some(r) => r.checked_add(spec.increment),
                    None => Some(spec.start),
                };
                Counter { next, reserved }
            }
        };
        let past_end = |v: Option<i64>| v.is_none_or(|v| v > spec.max || v < spec.min);
        let v = match c.next {
            n if !past_end(n) => n.unwrap_or(spec.start),
            _ if spec.cycle => {
                if spec.increment > 0 {
                    spec.min
                } else {
                    spec.max
                }
            }
            _ => {
                return Err(WeirError::new(
                    "2200H",
                    format!(
                        "nextval: reached {} value of sequence \"{}\" ({})",
                        if spec.increment > 0 {
                            "maximum"
                        } else {
                            "minimum"
                        },
                        desc.name,
                        if spec.increment > 0 {
                            spec.max
                        } else {
                            spec.min
                        }
                    ),
                ));
            }
        };
        let beyond = match c.reserved {
            None => true,
            Some(r) => {
                if spec.increment > 0 {
                    v > r || c.next.is_none()
                } else {
                    v < r || c.next.is_none()
                }
            }
        };
        let mut reserved = c.reserved;
        if beyond || past_end(c.next) {
            let r = v.saturating_add(spec.increment.saturating_mul(RESERVE - 1));
            let r = r.clamp(spec.min, spec.max);
            let mut wb = WriteBatch::default();
            wb.put(key(oid), r.to_be_bytes().to_vec());
            self.store().commit(wb, Durability::Sync)?;
            reserved = Some(r);
        }
        counters.insert(
            oid,
            Counter {
                next: v.checked_add(spec.increment),
                reserved,
            },
        );
        Ok(v)
    }

    /// `setval(seq, v, is_called)`: the next `nextval` gives v + increment (or v).
    pub fn setval(&self, oid: u32, v: i64, is_called: bool) -> Result<i64> {
        let desc = self.sequence_desc(oid)?;
        let spec = SequenceSpec::from_options(&desc.options);
        if v < spec.min || v > spec.max {
            return Err(WeirError::new(
                "22003",
                format!(
                    "setval: value {v} is out of bounds for sequence \"{}\" ({}..{})",
                    desc.name, spec.min, spec.max
                ),
            ));
        }
        let next = if is_called {
            v.checked_add(spec.increment)
        } else {
            Some(v)
        };
        // what a restart continues after: v itself once handed out, else the one before
        let persisted = if is_called { v } else { v - spec.increment };
        let mut wb = WriteBatch::default();
        wb.put(key(oid), persisted.to_be_bytes().to_vec());
        self.store().commit(wb, Durability::Sync)?;
        self.sequences.counters.lock().insert(
            oid,
            Counter {
                next,
                reserved: Some(persisted),
            },
        );
        Ok(v)
    }

    /// New parameters for sequence `name` (ALTER SEQUENCE): the value handed out last stays
    /// the last, the next one follows it by the new increment.
    pub fn alter_sequence(&self, name: &str, old: SequenceSpec, spec: SequenceSpec) -> Result<()> {
        let mut oid = None;
        self.alter_relation(name, |d| {
            oid = Some(d.oid);
            d.options.retain(|(k, _)| {
                !["start", "increment", "min", "max", "cycle"].contains(&k.as_str())
            });
            d.options.extend(spec.options());
            Ok(())
        })?;
        if let Some(oid) = oid
            && let Some(c) = self.sequences.counters.lock().get_mut(&oid)
            && let Some(next) = c.next
        {
            c.next = next
                .checked_sub(old.increment)
                .and_then(|last| last.checked_add(spec.increment));
        }
        Ok(())
    }

    /// Forget a dropped sequence's counter.
    pub(crate) fn drop_sequence_state(&self, oid: u32) -> Result<()> {
        self.sequences.counters.lock().remove(&oid);
        let mut wb = WriteBatch::default();
        wb.delete(key(oid));
        self.store().commit(wb, Durability::Sync)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_defaults() {
        let s = SequenceSpec::new(None, None, None, None, false).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.start, s.min, s.max), (1, 1, i64::MAX));
        let d =
            SequenceSpec::new(None, Some(-1), None, None, false).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((d.start, d.min, d.max), (-1, i64::MIN, -1));
        assert!(SequenceSpec::new(None, Some(0), None, None, false).is_err());
        assert!(SequenceSpec::new(Some(0), None, None, None, false).is_err());
    }
}
