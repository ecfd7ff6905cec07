//! `ENCODE AVRO`, on arrow-avro's push decoder (Avro binary straight into Arrow columns).
//!
//! Two ways to know the writer schema:
//! - `schema.definition = '<Avro schema JSON>'`: every message is the Avro binary of one
//!   record of that schema, bare or with the single-object header (`C3 01` + Rabin
//!   fingerprint);
//! - `schema.registry = 'http://host:port'`: messages are in Confluent's wire format
//!   (`00` + 4-byte schema id + body); a schema id not seen before is fetched once from
//!   `GET /schemas/ids/<id>` (plain HTTP, `ureq`). A registry that cannot answer makes the
//!   messages of that id dead letters, and the id is asked again with the next batch.
//!
//! Record fields are matched to the declared columns by name and cast to their types
//! (Arrow cast kernels); a field missing from the record is NULL. A message that does not
//! decode, or a value that does not cast, is reported with its index (dead letters).
//! Timestamps: Avro `timestamp-millis`/`-micros` logical types, or text / epoch millis as
//! for JSON.

use std::collections::HashMap;
use std::time::Duration;

use arrow_avro::reader::ReaderBuilder;
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, SchemaStore};
use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, new_null_array};
use datafusion::arrow::compute::{CastOptions, cast_with_options, concat, filter};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use parking_lot::Mutex;

use crate::catalog::ColumnDesc;
use crate::connectors::Options;
use crate::connectors::json::{Decoded, finish};
use crate::error::{Result, WeirError};
use crate::sql::types::{SqlType, schema_of};

pub const OPTIONS: &[&str] = &["schema.definition", "schema.registry"];

const SINGLE_OBJECT_MAGIC: [u8; 2] = [0xC3, 0x01];

enum Writer {
    /// The inline schema's Rabin fingerprint (bare messages get the header prepended).
    Inline(u64),
    /// Confluent framing; the registry's base URL.
    Registry(String),
}

pub struct AvroDecoder {
    columns: Vec<ColumnDesc>,
    schema: SchemaRef,
    writer: Writer,
    /// Known writer schemas (inline: the one; registry: the ids fetched so far).
    store: Mutex<SchemaStore>,
}

/// One message ready for the decoder: its framed bytes and its writer schema.
struct Framed {
    msg: usize,
    bytes: Vec<u8>,
    fingerprint: Fingerprint,
}

impl AvroDecoder {
    pub fn new(columns: &[ColumnDesc], o: &Options) -> Result<AvroDecoder> {
        for c in columns {
            if matches!(
                c.ty,
                SqlType::Array(_) | SqlType::Interval | SqlType::Jsonb | SqlType::Json
            ) {
                return Err(WeirError::not_supported(format!(
                    "ENCODE AVRO cannot decode column \"{}\" of type {}",
                    c.name,
                    c.ty.display_name()
                )));
            }
        }
        let (writer, store) = match (o.get("schema.definition"), o.get("schema.registry")) {
            (Some(def), None) => {
                let mut store = SchemaStore::new();
                let fp = store
                    .register(AvroSchema::new(def.clone()))
                    .map_err(|e| WeirError::invalid_parameter(format!("schema.definition: {e}")))?;
                let Fingerprint::Rabin(fp) = fp else {
                    return Err(WeirError::internal("unexpected fingerprint kind"));
                };
                // the schema must make a decoder, and name the declared columns
                let d = ReaderBuilder::new()
                    .with_writer_schema_store(store.clone())
                    .with_active_fingerprint(Fingerprint::Rabin(fp))
                    .build_decoder()
                    .map_err(|e| WeirError::invalid_parameter(format!("schema.definition: {e}")))?;
                let fields = d.schema();
                for c in columns {
                    if !fields
                        .fields()
                        .iter()
                        .any(|f| f.name().eq_ignore_ascii_case(&c.name))
                    {
                        return Err(WeirError::invalid_parameter(format!(
                            "column \"{}\" is not a field of the Avro schema",
                            c.name
                        )));
                    }
                }
                (Writer::Inline(fp), store)
            }
            (None, Some(url)) => {
                let url = url.trim_end_matches('/').to_owned();
                if !url.starts_with("http://") {
                    return Err(WeirError::invalid_parameter(
                        "schema.registry must be an http:// URL (TLS is not supported yet)",
                    ));
                }
                crate::connectors::policy::check_url("schema.registry", &url)?;
                (
                    Writer::Registry(url),
                    SchemaStore::new_with_type(FingerprintAlgorithm::Id),
                )
            }
            (Some(_), Some(_)) => {
                return Err(WeirError::invalid_parameter(
                    "give schema.definition or schema.registry, not both",
                ));
            }
            (None, None) => {
                return Err(WeirError::invalid_parameter(
                    "ENCODE AVRO needs schema.definition = '<Avro schema>' or schema.registry = 'http://...'",
                ));
            }
        };
        Ok(AvroDecoder {
            schema: schema_of(columns.iter().map(|c| (c.name.as_str(), &c.ty, c.nullable))),
            columns: columns.to_vec(),
            writer,
            store: Mutex::new(store),
        })
    }

    /// Decode messages' values; `None` (a message without a value) is an error.
    pub fn decode(&self, values: &[Option<&[u8]>]) -> Decoded {
        let mut errors: Vec<(usize, String)> = Vec::new();
        let mut framed: Vec<Framed> = Vec::with_capacity(values.len());
        for (i, v) in values.iter().enumerate() {
            let Some(v) = v else {
                errors.push((i, "the message has no value".into()));
                continue;
            };
            match self.frame(v) {
                Ok((bytes, fingerprint)) => framed.push(Framed {
                    msg: i,
                    bytes,
                    fingerprint,
                }),
                Err(e) => errors.push((i, e)),
            }
        }
        // schemas the registry has not given us yet
        if let Writer::Registry(url) = &self.writer {
            let mut missing: Vec<u32> = framed
                .iter()
                .filter_map(|f| match f.fingerprint {
                    Fingerprint::Id(id) if self.store.lock().lookup(&f.fingerprint).is_none() => {
                        Some(id)
                    }
                    _ => None,
                })
                .collect();
            missing.sort_unstable();
            missing.dedup();
            let mut failed: HashMap<u32, String> = HashMap::new();
            for id in missing {
                match fetch_schema(url, id) {
                    Ok(s) => {
                        if let Err(e) = self.store.lock().set(Fingerprint::Id(id), s) {
                            failed.insert(id, e.to_string());
                        }
                    }
                    Err(e) => {
                        failed.insert(id, e);
                    }
                }
            }
            if !failed.is_empty() {
                framed.retain(|f| match f.fingerprint {
                    Fingerprint::Id(id) if failed.contains_key(&id) => {
                        errors.push((f.msg, format!("schema id {id}: {}", failed[&id])));
                        false
                    }
                    _ => true,
                });
            }
        }
        let (raw, good) = self.decode_framed(&framed, &mut errors);
        finish(&self.columns, &self.schema, raw, good, errors)
    }

    /// The bytes the decoder reads for one message, and its writer schema.
    fn frame(&self, v: &[u8]) -> std::result::Result<(Vec<u8>, Fingerprint), String> {
        match &self.writer {
            Writer::Inline(fp) => {
                if v.starts_with(&SINGLE_OBJECT_MAGIC) {
                    if v.len() < 10 {
                        return Err("truncated single-object header".into());
                    }
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&v[2..10]);
                    let got = u64::from_le_bytes(b);
                    if got != *fp {
                        return Err(format!(
                            "written with another schema (fingerprint {got:016x})"
                        ));
                    }
                    return Ok((v.to_vec(), Fingerprint::Rabin(*fp)));
                }
                let mut bytes = Vec::with_capacity(v.len() + 10);
                bytes.extend_from_slice(&SINGLE_OBJECT_MAGIC);
                bytes.extend_from_slice(&fp.to_le_bytes());
                bytes.extend_from_slice(v);
                Ok((bytes, Fingerprint::Rabin(*fp)))
            }
            Writer::Registry(_) => {
                if v.len() < 5 || v[0] != 0 {
                    return Err(
                        "not in the Confluent wire format (magic byte 0, 4-byte schema id)".into(),
                    );
                }
                let id = u32::from_be_bytes([v[1], v[2], v[3], v[4]]);
                Ok((v.to_vec(), Fingerprint::Id(id)))
            }
        }
    }

    /// Run the messages through arrow-avro; the declared columns (typed) for the ones that
    /// decoded, and their message indexes.
    fn decode_framed(
        &self,
        framed: &[Framed],
        errors: &mut Vec<(usize, String)>,
    ) -> (Vec<ArrayRef>, Vec<usize>) {
        // the whole batch with one decoder; one message at a time only to find bad ones
        // (a failed record can leave the decoder's columns uneven)
        let pieces = match self.decode_run(framed.iter()) {
            Ok(p) => p,
            Err(_) => {
                let mut pieces = Vec::new();
                for f in framed {
                    match self.decode_run(std::iter::once(f)) {
                        Ok(p) => pieces.extend(p),
                        Err(e) => errors.push((f.msg, format!("cannot decode Avro: {e}"))),
                    }
                }
                pieces
            }
        };
        // each piece's fields → the declared columns
        let mut cols: Vec<Vec<ArrayRef>> = vec![Vec::new(); self.columns.len()];
        let mut good = Vec::new();
        for (batch, msgs) in pieces {
            if batch.num_rows() != msgs.len() {
                for i in msgs {
                    errors.push((i, "the Avro decoder lost track of records".into()));
                }
                continue;
            }
            let (typed, bad) = self.conform(&batch);
            let keep = BooleanArray::from(bad.iter().map(|b| b.is_none()).collect::<Vec<_>>());
            for (r, b) in bad.iter().enumerate() {
                if let Some(e) = b {
                    errors.push((msgs[r], e.clone()));
                }
            }
            for (k, a) in typed.into_iter().enumerate() {
                cols[k].push(filter(&a, &keep).unwrap_or_else(|_| a.slice(0, 0)));
            }
            good.extend(
                msgs.into_iter()
                    .zip(&bad)
                    .filter(|(_, b)| b.is_none())
                    .map(|(i, _)| i),
            );
        }
        let raw = cols
            .into_iter()
            .zip(&self.columns)
            .map(|(parts, c)| {
                let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
                if refs.is_empty() {
                    new_null_array(&c.ty.arrow_type(), 0)
                } else {
                    concat(&refs).unwrap_or_else(|_| new_null_array(&c.ty.arrow_type(), 0))
                }
            })
            .collect();
        (raw, good)
    }

    /// Decode messages with one decoder, flushing where the writer schema changes; the
    /// batches with the message index of each row, or the first error.
    fn decode_run<'a>(
        &self,
        framed: impl Iterator<Item = &'a Framed>,
    ) -> std::result::Result<Vec<(RecordBatch, Vec<usize>)>, String> {
        let store = self.store.lock().clone();
        let mut pieces = Vec::new();
        let mut rows: Vec<usize> = Vec::new();
        let mut decoder: Option<arrow_avro::reader::Decoder> = None;
        for f in framed {
            let d = match decoder.as_mut() {
                Some(d) => d,
                None => decoder.insert(
                    ReaderBuilder::new()
                        .with_batch_size(4096)
                        .with_writer_schema_store(store.clone())
                        .with_active_fingerprint(f.fingerprint)
                        .build_decoder()
                        .map_err(|e| e.to_string())?,
                ),
            };
            let mut at = 0usize;
            // a schema change (or a full batch) waits for an empty batch: flush, go on
            for _ in 0..3 {
                at += d.decode(&f.bytes[at..]).map_err(|e| e.to_string())?;
                if at == f.bytes.len() {
                    break;
                }
                if d.batch_is_empty() {
                    break;
                }
                if let Some(b) = d.flush().map_err(|e| e.to_string())? {
                    pieces.push((b, std::mem::take(&mut rows)));
                }
            }
            if at != f.bytes.len() {
                return Err("the message is not one complete Avro record".into());
            }
            rows.push(f.msg);
        }
        if let Some(d) = decoder.as_mut()
            && let Some(b) = d.flush().map_err(|e| e.to_string())?
        {
            pieces.push((b, std::mem::take(&mut rows)));
        }
        if !rows.is_empty() {
            return Err("the Avro decoder lost track of records".into());
        }
        Ok(pieces)
    }

    /// The declared columns of a decoded batch (fields by name, cast), and per row the
    /// first value that did not cast.
    fn conform(&self, batch: &RecordBatch) -> (Vec<ArrayRef>, Vec<Option<String>>) {
        let n = batch.num_rows();
        let mut bad: Vec<Option<String>> = vec![None; n];
        let mut out = Vec::with_capacity(self.columns.len());
        let schema = batch.schema();
        for c in &self.columns {
            let target = c.ty.arrow_type();
            let Some(idx) = schema
                .fields()
                .iter()
                .position(|f| f.name().eq_ignore_ascii_case(&c.name))
            else {
                out.push(new_null_array(&target, n));
                continue;
            };
            let a = batch.column(idx);
            // timestamps: typed ones cast in `finish`, text ones are parsed there
            let want = match c.ty {
                SqlType::Timestamp(_) | SqlType::TimestampTz(_) => match a.data_type() {
                    DataType::Timestamp(_, _) => {
                        out.push(a.clone());
                        continue;
                    }
                    // epoch millis or text, parsed like JSON's
                    _ => DataType::Utf8,
                },
                _ => target,
            };
            let opts = CastOptions {
                safe: true,
                ..Default::default()
            };
            match cast_with_options(a, &want, &opts) {
                Ok(casted) => {
                    for (r, slot) in bad.iter_mut().enumerate() {
                        if casted.is_null(r) && a.is_valid(r) && slot.is_none() {
                            *slot = Some(format!(
                                "column \"{}\": the Avro value does not fit type {}",
                                c.name,
                                c.ty.display_name()
                            ));
                        }
                    }
                    out.push(casted);
                }
                Err(e) => {
                    for b in bad.iter_mut().filter(|b| b.is_none()) {
                        *b = Some(format!("column \"{}\": {e}", c.name));
                    }
                    out.push(new_null_array(&want, n));
                }
            }
        }
        (out, bad)
    }
}

/// `GET <registry>/schemas/ids/<id>` → the schema text.
fn fetch_schema(url: &str, id: u32) -> std::result::Result<AvroSchema, String> {
    // no redirects: the registry named in SQL (and allowed by --allow-connect) is the only
    // host this may reach
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .max_redirects(0)
        .build()
        .into();
    let body = agent
        .get(&format!("{url}/schemas/ids/{id}"))
        .header("Accept", "application/vnd.schemaregistry.v1+json")
        .call()
        .map_err(|e| format!("schema registry: {e}"))?
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("schema registry: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| format!("schema registry answer: {e}"))?;
    if let Some(t) = v.get("schemaType").and_then(|t| t.as_str())
        && t != "AVRO"
    {
        return Err(format!("schema id {id} is {t}, not AVRO"));
    }
    let text = v
        .get("schema")
        .and_then(|s| s.as_str())
        .ok_or("schema registry answer without \"schema\"")?;
    Ok(AvroSchema::new(text.to_owned()))
}

/// Avro binary encoding helpers, for tests (zig-zag varints, length-prefixed strings).
#[cfg(test)]
pub(crate) mod encode {
    pub fn long(out: &mut Vec<u8>, v: i64) {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        loop {
            let b = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    pub fn string(out: &mut Vec<u8>, s: &str) {
        long(out, s.len() as i64);
        out.extend_from_slice(s.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray, TimestampMicrosecondArray};

    const SCHEMA: &str = r#"{"type": "record", "name": "bid", "fields": [
        {"name": "auction", "type": "long"},
        {"name": "channel", "type": ["null", "string"]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}
    ]}"#;

    fn col(name: &str, ty: SqlType) -> ColumnDesc {
        ColumnDesc {
            name: name.into(),
            ty,
            nullable: true,
        }
    }

    fn record(auction: i64, channel: Option<&str>, at_ms: i64) -> Vec<u8> {
        let mut b = Vec::new();
        encode::long(&mut b, auction);
        match channel {
            None => encode::long(&mut b, 0),
            Some(c) => {
                encode::long(&mut b, 1);
                encode::string(&mut b, c);
            }
        }
        encode::long(&mut b, at_ms);
        b
    }

    #[test]
    fn inline_schema_records() {
        let cols = [
            col("auction", SqlType::Int8),
            col("channel", SqlType::Varchar(Some(6))),
            col("at", SqlType::Timestamp(None)),
        ];
        let o = Options::from([("schema.definition".to_string(), SCHEMA.to_string())]);
        let d = AvroDecoder::new(&cols, &o).unwrap();
        let a = record(1, Some("google"), 1_704_067_200_000);
        let b = record(2, None, 1_704_067_201_000);
        let long_channel = record(3, Some("toolongchannel"), 0);
        let truncated = a[..3].to_vec();
        let msgs: Vec<Option<&[u8]>> = vec![
            Some(&a),
            Some(&truncated),
            Some(&b),
            None,
            Some(&long_channel),
            Some(&a),
        ];
        let out = d.decode(&msgs);
        assert_eq!(out.rows, vec![0, 2, 5], "{:?}", out.errors);
        let bad: Vec<usize> = out.errors.iter().map(|(i, _)| *i).collect();
        assert_eq!(bad, vec![1, 3, 4]);
        let ids = out
            .batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(ids.values(), &[1, 2, 1]);
        let ch = out
            .batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert!(ch.is_null(1));
        let at = out
            .batch
            .column(2)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        assert_eq!(at.value(1), 1_704_067_201_000_000);
    }

    #[test]
    fn schema_checked_at_create() {
        let o = Options::from([("schema.definition".to_string(), "{not json".to_string())]);
        assert!(AvroDecoder::new(&[col("a", SqlType::Int8)], &o).is_err());
        let o = Options::from([("schema.definition".to_string(), SCHEMA.to_string())]);
        let e = AvroDecoder::new(&[col("nope", SqlType::Int8)], &o)
            .err()
            .expect("unknown column");
        assert!(e.message.contains("not a field"), "{}", e.message);
    }
}
