//! Connectors: where stream data comes from. Built-in generators (`nexmark`, `datagen`)
//! produce deterministic Arrow batches, each row a function of its index (so they seek);
//! a view over a source runs its own instance from the start (so a view created later, or
//! rebuilt after a restart, sees the same rows) or, restored from a checkpoint, from the
//! checkpointed position, feeding the dataflow with the source's event-time watermark.

pub mod avro;
pub mod csv;
pub mod datagen;
pub mod dead_letters;
pub mod json;
pub mod kafka;
pub mod kafka_sink;
pub mod nexmark;
pub mod nexmark_columns;
pub mod policy;
pub mod runner;
pub mod shared;
pub mod upsert;

use std::collections::HashMap;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use crate::catalog::ColumnDesc;
use crate::error::{Result, WeirError};

/// A deterministic source of rows.
pub trait Generator: Send {
    fn schema(&self) -> SchemaRef;
    /// The next batch of at most `max_rows` rows, or None when the source is exhausted.
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>>;
    /// Continue as if `rows` rows had been generated already (a restored view resumes
    /// its instance from the checkpoint): the rows that follow are exactly the ones a run
    /// from the start would produce after them, in O(1).
    fn seek(&mut self, rows: u64) -> Result<()>;
}

/// `WITH (...)` options by key.
pub type Options = HashMap<String, String>;

pub fn options(list: &[(String, String)]) -> Options {
    list.iter().cloned().collect()
}

pub fn opt_u64(o: &Options, key: &str) -> Result<Option<u64>> {
    match o.get(key) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            WeirError::invalid_parameter(format!("option {key} must be a whole number, not '{v}'"))
        }),
    }
}

/// Check the `WITH` keys a connector knows, so a typo is an error and not a silent default.
pub fn check_options(connector: &str, o: &Options, columns: &[ColumnDesc]) -> Result<()> {
    for key in o.keys() {
        let known = key == "connector"
            || match connector {
                "nexmark" => NEXMARK_OPTIONS.contains(&key.as_str()),
                "datagen" => {
                    DATAGEN_OPTIONS.contains(&key.as_str())
                        || key.strip_prefix("fields.").is_some_and(|rest| {
                            rest.rsplit_once('.').is_some_and(|(col, opt)| {
                                columns.iter().any(|c| c.name == col)
                                    && DATAGEN_FIELD_OPTIONS.contains(&opt)
                            })
                        })
                }
                "kafka" => kafka::known_option(key),
                _ => true,
            };
        if !known {
            return Err(WeirError::invalid_parameter(format!(
                "unknown option \"{key}\" for connector '{connector}'"
            )));
        }
    }
    Ok(())
}

const NEXMARK_OPTIONS: &[&str] = &[
    "nexmark.table.type",
    "nexmark.event.num",
    "nexmark.seed",
    "nexmark.base.time",
    "nexmark.event.rate",
    "nexmark.rows.per.second",
];
const DATAGEN_OPTIONS: &[&str] = &[
    "datagen.rows.per.second",
    "datagen.row.num",
    "datagen.seed",
    "datagen.base.time",
    "datagen.time.step.ms",
];
const DATAGEN_FIELD_OPTIONS: &[&str] = &["kind", "start", "min", "max", "length"];

/// Rows per second of wall-clock time a generator is paced at (None: as fast as the views
/// take them).
pub fn rate_limit(connector: &str, o: &Options) -> Result<Option<u64>> {
    let key = match connector {
        "nexmark" => "nexmark.rows.per.second",
        "datagen" => "datagen.rows.per.second",
        _ => return Ok(None),
    };
    match opt_u64(o, key)? {
        Some(0) => Err(WeirError::invalid_parameter(format!(
            "option {key} must be positive"
        ))),
        r => Ok(r),
    }
}

/// Whether the generator ends (a row or event count was given).
pub fn bounded(connector: &str, o: &Options) -> bool {
    match connector {
        "nexmark" => o.contains_key("nexmark.event.num"),
        "datagen" => o.contains_key("datagen.row.num"),
        _ => false,
    }
}

/// The columns of a source: declared, or the connector's own.
pub fn source_columns(
    connector: &str,
    o: &Options,
    declared: &[ColumnDesc],
) -> Result<Vec<ColumnDesc>> {
    match connector {
        "nexmark" => nexmark::columns(o, declared),
        "datagen" => {
            if declared.is_empty() {
                return Err(WeirError::invalid_parameter(
                    "a datagen source needs its columns declared",
                ));
            }
            Ok(declared.to_vec())
        }
        "kafka" => kafka::columns(o, declared),
        other => Err(WeirError::invalid_parameter(format!(
            "unknown connector '{other}' (known: kafka, nexmark, datagen)"
        ))),
    }
}

/// Whether the connector generates its rows itself (no FORMAT / ENCODE).
pub fn is_generator(connector: &str) -> bool {
    matches!(connector, "nexmark" | "datagen")
}

/// A generator for a source's definition.
pub fn generator(
    connector: &str,
    o: &Options,
    columns: &[ColumnDesc],
) -> Result<Box<dyn Generator>> {
    match connector {
        "nexmark" => Ok(Box::new(nexmark::Nexmark::new(o, columns)?)),
        "datagen" => Ok(Box::new(datagen::Datagen::new(o, columns)?)),
        other => Err(WeirError::invalid_parameter(format!(
            "unknown connector '{other}'"
        ))),
    }
}
