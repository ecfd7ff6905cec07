//! A Kafka source's options (`WITH (...)`), checked at CREATE and at every start, its
//! columns (declared plus INCLUDEd metadata) and value decoder.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;

use super::poll::FETCH_WAIT_MS;
use crate::catalog::ColumnDesc;
use crate::connectors::avro::AvroDecoder;
use crate::connectors::csv::CsvDecoder;
use crate::connectors::json::JsonDecoder;
use crate::connectors::{Options, opt_u64};
use crate::error::{Result, WeirError};
use crate::sql::types::SqlType;

#[derive(Debug, Clone, PartialEq)]
pub enum Startup {
    Earliest,
    Latest,
    /// Milliseconds since the epoch: the first message at or after it.
    Timestamp(i64),
}

/// Metadata columns a source can add (`INCLUDE partition | offset | key | timestamp AS c`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Include {
    Partition,
    Offset,
    Key,
    Timestamp,
}

impl Include {
    pub const ALL: [(&'static str, Include); 4] = [
        ("partition", Include::Partition),
        ("offset", Include::Offset),
        ("key", Include::Key),
        ("timestamp", Include::Timestamp),
    ];

    pub fn sql_type(self) -> SqlType {
        match self {
            Include::Partition => SqlType::Int4,
            Include::Offset => SqlType::Int8,
            Include::Key => SqlType::Bytea,
            Include::Timestamp => SqlType::TimestampTz(None),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum OnError {
    DeadLetter,
    Fail,
}

/// A Kafka source's `WITH` options, checked.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    pub topic: String,
    pub bootstrap: String,
    pub startup: Startup,
    /// `properties.*` other than the bootstrap server, passed to librdkafka.
    pub properties: Vec<(String, String)>,
    pub on_error: OnError,
    pub idle_timeout: Duration,
    /// (kind, column name), in the order the columns follow the value columns.
    pub includes: Vec<(Include, String)>,
}

const OPTIONS: &[&str] = &[
    "topic",
    "properties.bootstrap.server",
    "properties.bootstrap.servers",
    "scan.startup.mode",
    "scan.startup.timestamp.millis",
    "on_error",
    "watermark.idle.timeout.ms",
    "include.partition",
    "include.offset",
    "include.key",
    "include.timestamp",
    "format",
    "encode",
];

/// Whether `key` is an option of the kafka connector.
pub fn known_option(key: &str) -> bool {
    OPTIONS.contains(&key)
        || crate::connectors::csv::OPTIONS.contains(&key)
        || crate::connectors::avro::OPTIONS.contains(&key)
        || key.starts_with("properties.")
}

impl KafkaOptions {
    pub fn parse(o: &Options) -> Result<KafkaOptions> {
        let need = |k: &str| {
            o.get(k).cloned().ok_or_else(|| {
                WeirError::invalid_parameter(format!("a kafka source needs the option {k}"))
            })
        };
        let topic = need("topic")?;
        let bootstrap = o
            .get("properties.bootstrap.server")
            .or_else(|| o.get("properties.bootstrap.servers"))
            .cloned()
            .ok_or_else(|| {
                WeirError::invalid_parameter(
                    "a kafka source needs the option properties.bootstrap.server",
                )
            })?;
        let startup = match o
            .get("scan.startup.mode")
            .map(|s| s.to_lowercase())
            .as_deref()
        {
            None | Some("earliest") => Startup::Earliest,
            Some("latest") => Startup::Latest,
            Some("timestamp") => Startup::Timestamp(
                opt_u64(o, "scan.startup.timestamp.millis")?
                    .ok_or_else(|| {
                        WeirError::invalid_parameter(
                            "scan.startup.mode = 'timestamp' needs scan.startup.timestamp.millis",
                        )
                    })?
                    .try_into()
                    .map_err(|_| WeirError::invalid_parameter("timestamp out of range"))?,
            ),
            Some(other) => {
                return Err(WeirError::invalid_parameter(format!(
                    "scan.startup.mode must be earliest, latest or timestamp, not '{other}'"
                )));
            }
        };
        let on_error = match o.get("on_error").map(|s| s.to_lowercase()).as_deref() {
            None | Some("dead_letter") => OnError::DeadLetter,
            Some("fail") => OnError::Fail,
            Some(other) => {
                return Err(WeirError::invalid_parameter(format!(
                    "on_error must be 'dead_letter' or 'fail', not '{other}'"
                )));
            }
        };
        let idle_timeout =
            Duration::from_millis(opt_u64(o, "watermark.idle.timeout.ms")?.unwrap_or(5000));
        let mut properties: Vec<(String, String)> = o
            .iter()
            .filter_map(|(k, v)| {
                let p = k.strip_prefix("properties.")?;
                (p != "bootstrap.server" && p != "bootstrap.servers")
                    .then(|| (p.to_owned(), v.clone()))
            })
            .collect();
        properties.sort();
        // checked here, where every consumer, table feed and sink gets its options, also
        // when a catalog entry written under another policy is started again
        crate::connectors::policy::check_bootstrap(&bootstrap)?;
        for (k, v) in &properties {
            crate::connectors::policy::check_kafka_property(k, v)?;
        }
        let mut includes = Vec::new();
        for (word, kind) in Include::ALL {
            if let Some(col) = o.get(&format!("include.{word}")) {
                includes.push((kind, col.clone()));
            }
        }
        Ok(KafkaOptions {
            topic,
            bootstrap,
            startup,
            properties,
            on_error,
            idle_timeout,
            includes,
        })
    }

    /// A consumer config (also checks the passed-through properties).
    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap)
            // assigned partitions, offsets kept by Weir: the group id only satisfies
            // librdkafka and nothing is committed under it
            .set("group.id", "weir")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // FLUSH knows a partition is read to its end from the EOF event
            .set("enable.partition.eof", "true")
            .set("fetch.wait.max.ms", FETCH_WAIT_MS.to_string())
            // when the local queue is full librdkafka pauses fetching a partition for this
            // long (default 1 s): the consumer then starves once the queue drains
            .set("fetch.queue.backoff.ms", "5")
            .set("reconnect.backoff.max.ms", "1000")
            .set("log_level", "3");
        for (k, v) in &self.properties {
            c.set(k, v);
        }
        c
    }
}

/// The columns of a Kafka source: the declared ones, then the INCLUDEd metadata columns.
pub fn columns(o: &Options, declared: &[ColumnDesc]) -> Result<Vec<ColumnDesc>> {
    if declared.is_empty() {
        return Err(WeirError::invalid_parameter(
            "a kafka source needs its columns declared",
        ));
    }
    let opts = KafkaOptions::parse(o)?;
    let mut out = declared.to_vec();
    for (kind, name) in opts.includes {
        if out.iter().any(|c| c.name == name) {
            return Err(WeirError::new(
                crate::error::sqlstate::DUPLICATE_COLUMN,
                format!("column \"{name}\" specified more than once"),
            ));
        }
        out.push(ColumnDesc {
            name,
            ty: kind.sql_type(),
            nullable: true,
        });
    }
    Ok(out)
}

/// How message values become rows.
pub enum ValueDecoder {
    Json(JsonDecoder),
    Csv(CsvDecoder),
    Avro(AvroDecoder),
}

impl ValueDecoder {
    pub fn decode(&self, values: &[Option<&[u8]>]) -> crate::connectors::json::Decoded {
        match self {
            ValueDecoder::Json(d) => d.decode(values),
            ValueDecoder::Csv(d) => d.decode(values),
            ValueDecoder::Avro(d) => d.decode(values),
        }
    }
}

/// What an instance needs: the checked options and the decoder for the value columns.
pub struct KafkaSpec {
    pub options: KafkaOptions,
    pub decoder: ValueDecoder,
    /// All columns of the source (values, then includes).
    pub columns: Vec<ColumnDesc>,
}

impl KafkaSpec {
    pub fn new(o: &Options, columns: &[ColumnDesc]) -> Result<KafkaSpec> {
        let options = KafkaOptions::parse(o)?;
        let values = &columns[..columns.len() - options.includes.len()];
        let decoder = match o.get("encode").map(|e| e.as_str()) {
            None | Some("json") => ValueDecoder::Json(JsonDecoder::new(values)?),
            Some("csv") => ValueDecoder::Csv(CsvDecoder::new(values, o)?),
            Some("avro") => ValueDecoder::Avro(AvroDecoder::new(values, o)?),
            Some(other) => {
                return Err(WeirError::not_supported(format!(
                    "ENCODE {} is not supported yet (JSON, CSV and AVRO are)",
                    other.to_uppercase()
                )));
            }
        };
        // the consumer config must be one librdkafka accepts
        options
            .client_config()
            .create::<BaseConsumer>()
            .map_err(|e| WeirError::invalid_parameter(format!("kafka properties: {e}")))?;
        Ok(KafkaSpec {
            options,
            decoder,
            columns: columns.to_vec(),
        })
    }
}
