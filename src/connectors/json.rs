//! `ENCODE JSON`: one JSON object per message, its fields matched to the declared columns
//! by name. Decoded a batch at a time with arrow-json into Arrow columns; a message that
//! does not decode, or whose field does not fit its column, is reported with its index
//! (for the dead-letter table) and left out, never failing the others.
//!
//! - Missing fields and JSON `null` give SQL NULL (a NOT NULL column refuses them).
//!   Fields not declared are ignored.
//! - Timestamps: ISO-8601 text (`2024-01-01T00:00:00Z`, `2024-01-01 00:00:00`) or a
//!   number of milliseconds since the epoch.
//! - `jsonb` columns take the field's JSON text, whatever its JSON type.
//! - Numbers and booleans are accepted for text columns (as their JSON text).

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, StringArray, StringBuilder, TimestampMicrosecondArray,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::compute::{cast, concat_batches};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::json::ReaderBuilder;
use datafusion::arrow::record_batch::RecordBatch;

use crate::catalog::ColumnDesc;
use crate::error::{Result, WeirError};
use crate::sql::types::{SqlType, schema_of};

/// How a declared column is read from the JSON object.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// arrow-json decodes it as the column's own type.
    Direct,
    /// Decoded as text, then parsed as ISO-8601 or epoch milliseconds.
    Timestamp,
    /// The field's JSON text.
    Jsonb,
}

pub struct JsonDecoder {
    columns: Vec<ColumnDesc>,
    kinds: Vec<Kind>,
    /// What arrow-json decodes: the Direct and Timestamp columns.
    read_schema: SchemaRef,
    /// The declared columns, in order.
    schema: SchemaRef,
}

/// What a batch of messages gave.
pub struct Decoded {
    /// Rows of the messages that decoded, in message order.
    pub batch: RecordBatch,
    /// Message index of each row.
    pub rows: Vec<usize>,
    /// (message index, error) of the messages left out.
    pub errors: Vec<(usize, String)>,
}

impl JsonDecoder {
    pub fn new(columns: &[ColumnDesc]) -> Result<JsonDecoder> {
        let mut kinds = Vec::with_capacity(columns.len());
        let mut read_fields = Vec::new();
        for c in columns {
            let kind = match c.ty {
                SqlType::Timestamp(_) | SqlType::TimestampTz(_) => Kind::Timestamp,
                SqlType::Jsonb | SqlType::Json => Kind::Jsonb,
                SqlType::Bool
                | SqlType::Int2
                | SqlType::Int4
                | SqlType::Int8
                | SqlType::Float4
                | SqlType::Float8
                | SqlType::Numeric(_)
                | SqlType::Text
                | SqlType::Varchar(_)
                | SqlType::Uuid
                | SqlType::Inet
                | SqlType::Cidr
                | SqlType::Date => Kind::Direct,
                _ => {
                    return Err(WeirError::not_supported(format!(
                        "ENCODE JSON cannot decode column \"{}\" of type {}",
                        c.name,
                        c.ty.display_name()
                    )));
                }
            };
            match kind {
                Kind::Direct => {
                    read_fields.push(Field::new(&c.name, c.ty.arrow_type(), true));
                }
                Kind::Timestamp => read_fields.push(Field::new(&c.name, DataType::Utf8, true)),
                Kind::Jsonb => {}
            }
            kinds.push(kind);
        }
        Ok(JsonDecoder {
            schema: schema_of(columns.iter().map(|c| (c.name.as_str(), &c.ty, c.nullable))),
            columns: columns.to_vec(),
            kinds,
            read_schema: Arc::new(Schema::new(read_fields)),
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Decode messages' values; `None` (a message without a value) is an error.
    pub fn decode(&self, values: &[Option<&[u8]>]) -> Decoded {
        let (read, good, errors) = read_text_messages(values, &self.read_schema, |which| {
            self.read_all(values, which)
        });
        // columns in declared order: typed, timestamps as text, jsonb as JSON text
        let mut raw: Vec<ArrayRef> = Vec::with_capacity(self.columns.len());
        let mut read_at = 0usize;
        for (c, kind) in self.columns.iter().zip(&self.kinds) {
            raw.push(match kind {
                Kind::Direct | Kind::Timestamp => {
                    read_at += 1;
                    read.column(read_at - 1).clone()
                }
                Kind::Jsonb => {
                    let mut b = StringBuilder::with_capacity(good.len(), good.len() * 16);
                    for i in &good {
                        let field = values[*i].and_then(|v| {
                            serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(v)
                                .ok()
                                .and_then(|mut m| m.remove(&c.name))
                        });
                        match field {
                            Some(serde_json::Value::Null) | None => b.append_null(),
                            // serde_json wrote it, so it is JSON: stored in jsonb's form
                            Some(v) => {
                                let text = v.to_string();
                                match crate::sql::jsonb::normalize(&text) {
                                    Ok(n) => b.append_value(n),
                                    Err(_) => b.append_value(text),
                                }
                            }
                        }
                    }
                    Arc::new(b.finish())
                }
            });
        }
        finish(&self.columns, &self.schema, raw, good, errors)
    }

    /// arrow-json over the given messages: exactly one row each, or an error.
    fn read_all(
        &self,
        values: &[Option<&[u8]>],
        which: &[usize],
    ) -> std::result::Result<RecordBatch, String> {
        let mut d = ReaderBuilder::new(self.read_schema.clone())
            .with_batch_size(which.len().max(1))
            .with_coerce_primitive(true)
            .build_decoder()
            .map_err(|e| e.to_string())?;
        for i in which {
            let v = values[*i].unwrap_or_default();
            let before = d.len();
            let used = d.decode(v).map_err(|e| e.to_string())?;
            if used != v.len() || d.has_partial_record() || d.len() != before + 1 {
                return Err("the message is not one complete JSON object".into());
            }
        }
        let batch = d
            .flush()
            .map_err(|e| e.to_string())?
            .unwrap_or_else(|| RecordBatch::new_empty(self.read_schema.clone()));
        if batch.num_rows() != which.len() {
            return Err("the message is not one JSON object".into());
        }
        Ok(batch)
    }
}

/// The text decoders' first step: messages without a value or not UTF-8 are errors; the
/// others are read by `read` all at once, and only when that fails one at a time, to find
/// the bad ones. Returns the rows read (one per message, in order), which messages they
/// are, and the errors.
pub(crate) fn read_text_messages(
    values: &[Option<&[u8]>],
    schema: &SchemaRef,
    read: impl Fn(&[usize]) -> std::result::Result<RecordBatch, String>,
) -> (RecordBatch, Vec<usize>, Vec<(usize, String)>) {
    let mut errors: Vec<(usize, String)> = Vec::new();
    let mut good: Vec<usize> = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        match v {
            None => errors.push((i, "the message has no value".into())),
            Some(b) if std::str::from_utf8(b).is_err() => {
                errors.push((i, "the message is not valid UTF-8".into()))
            }
            Some(_) => good.push(i),
        }
    }
    let batch = match read(&good) {
        Ok(b) => b,
        Err(_) => {
            let mut parts = Vec::new();
            let mut still = Vec::new();
            for i in good {
                match read(&[i]) {
                    Ok(b) => {
                        parts.push(b);
                        still.push(i);
                    }
                    Err(e) => errors.push((i, e)),
                }
            }
            good = still;
            match concat_batches(schema, &parts) {
                Ok(b) => b,
                Err(e) => {
                    for i in good.drain(..) {
                        errors.push((i, e.to_string()));
                    }
                    RecordBatch::new_empty(schema.clone())
                }
            }
        }
    };
    if batch.num_rows() != good.len() {
        for i in good.drain(..) {
            errors.push((i, "the messages did not give one row each".into()));
        }
        return (RecordBatch::new_empty(schema.clone()), good, errors);
    }
    (batch, good, errors)
}

/// The declared-type checks shared by the value decoders: `raw` holds each declared
/// column for the messages `good` (typed, except timestamps as text); timestamps are parsed,
/// varchar lengths and NOT NULL checked, and refused rows reported and left out.
pub(crate) fn finish(
    columns: &[ColumnDesc],
    schema: &SchemaRef,
    raw: Vec<ArrayRef>,
    good: Vec<usize>,
    mut errors: Vec<(usize, String)>,
) -> Decoded {
    let mut bad = vec![false; good.len()];
    let mut cols: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for (c, a) in columns.iter().zip(raw) {
        let col: ArrayRef = match c.ty {
            // already typed (Avro): cast to the declared timestamp type
            SqlType::Timestamp(_) | SqlType::TimestampTz(_)
                if matches!(a.data_type(), DataType::Timestamp(_, _)) =>
            {
                cast(&a, &c.ty.arrow_type()).unwrap_or(a)
            }
            SqlType::Timestamp(_) | SqlType::TimestampTz(_) => {
                let text = a
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .cloned()
                    .unwrap_or_else(|| StringArray::new_null(a.len()));
                let ts = timestamps(&text, |r, e| {
                    if !bad[r] {
                        bad[r] = true;
                        errors.push((good[r], format!("column \"{}\": {e}", c.name)));
                    }
                });
                let ts: ArrayRef = Arc::new(ts);
                match cast(&ts, &c.ty.arrow_type()) {
                    Ok(t) => t,
                    Err(_) => ts,
                }
            }
            SqlType::Varchar(Some(n)) => {
                if let Some(s) = a.as_any().downcast_ref::<StringArray>() {
                    for (r, v) in s.iter().enumerate() {
                        if v.is_some_and(|v| v.chars().count() > n as usize) && !bad[r] {
                            bad[r] = true;
                            errors.push((
                                good[r],
                                format!(
                                    "value too long for type character varying({n}) (column \"{}\")",
                                    c.name
                                ),
                            ));
                        }
                    }
                }
                a
            }
            // any of uuid's (inet's, cidr's) input forms, stored canonical
            SqlType::Uuid | SqlType::Inet | SqlType::Cidr => {
                match a.as_any().downcast_ref::<StringArray>() {
                    Some(s) => {
                        let canonical = match c.ty {
                            SqlType::Inet => crate::sql::inet::canonical_inet,
                            SqlType::Cidr => crate::sql::inet::canonical_cidr,
                            _ => crate::sql::uuid::canonical,
                        };
                        let mut out = StringBuilder::with_capacity(s.len(), s.len() * 36);
                        for (r, v) in s.iter().enumerate() {
                            match v.map(canonical) {
                                None => out.append_null(),
                                Some(Ok(u)) => out.append_value(u),
                                Some(Err(e)) => {
                                    if !bad[r] {
                                        bad[r] = true;
                                        errors.push((
                                            good[r],
                                            format!("column \"{}\": {}", c.name, e.message),
                                        ));
                                    }
                                    out.append_null();
                                }
                            }
                        }
                        Arc::new(out.finish())
                    }
                    None => a,
                }
            }
            _ => a,
        };
        if !c.nullable {
            for r in 0..col.len() {
                if col.is_null(r) && !bad[r] {
                    bad[r] = true;
                    errors.push((
                        good[r],
                        format!(
                            "null value in column \"{}\" violates not-null constraint",
                            c.name
                        ),
                    ));
                }
            }
        }
        cols.push(col);
    }
    // drop the refused rows, then the declared schema (NOT NULL holds now)
    let (cols, rows) = if bad.iter().any(|b| *b) {
        let keep = BooleanArray::from(bad.iter().map(|b| !b).collect::<Vec<_>>());
        let rows = good
            .iter()
            .zip(&bad)
            .filter(|(_, b)| !**b)
            .map(|(i, _)| *i)
            .collect();
        let cols = cols
            .iter()
            .map(|c| datafusion::arrow::compute::filter(c, &keep))
            .collect::<std::result::Result<Vec<_>, _>>();
        (cols, rows)
    } else {
        (Ok(cols), good)
    };
    let batch = cols
        .map_err(|e| e.to_string())
        .and_then(|cols| RecordBatch::try_new(schema.clone(), cols).map_err(|e| e.to_string()));
    let (batch, rows) = match batch {
        Ok(b) => (b, rows),
        Err(e) => {
            for i in rows {
                errors.push((i, e.clone()));
            }
            (RecordBatch::new_empty(schema.clone()), Vec::new())
        }
    };
    errors.sort_by_key(|(i, _)| *i);
    Decoded {
        batch,
        rows,
        errors,
    }
}

/// Timestamps from JSON text: ISO-8601 or epoch milliseconds. `bad(row, error)` for rows
/// that are neither (they become NULL here and are dropped by the caller).
fn timestamps(text: &StringArray, mut bad: impl FnMut(usize, String)) -> TimestampMicrosecondArray {
    let mut b = TimestampMicrosecondBuilder::with_capacity(text.len());
    for (r, v) in text.iter().enumerate() {
        let Some(s) = v else {
            b.append_null();
            continue;
        };
        let s = s.trim();
        let parsed = if !s.is_empty()
            && s.bytes()
                .enumerate()
                .all(|(i, c)| c.is_ascii_digit() || (i == 0 && c == b'-'))
        {
            s.parse::<i64>()
                .ok()
                .and_then(|ms| ms.checked_mul(1000))
                .ok_or_else(|| format!("timestamp out of range: {s}"))
        } else {
            datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(s)
                .map(|ns| ns.div_euclid(1000))
                .map_err(|_| {
                    format!("invalid timestamp: \"{s}\" (expected ISO-8601 or epoch milliseconds)")
                })
        };
        match parsed {
            Ok(us) => b.append_value(us),
            Err(e) => {
                bad(r, e);
                b.append_null();
            }
        }
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, ty: SqlType, nullable: bool) -> ColumnDesc {
        ColumnDesc {
            name: name.into(),
            ty,
            nullable,
        }
    }

    #[test]
    fn uuid_columns_are_stored_canonical_and_bad_ones_are_errors() {
        let d = JsonDecoder::new(&[col("id", SqlType::Uuid, false)]).unwrap();
        let msgs: Vec<Option<&[u8]>> = vec![
            Some(br#"{"id": "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"}"#),
            Some(br#"{"id": "not a uuid"}"#),
            Some(br#"{"id": "{b0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}"}"#),
        ];
        let out = d.decode(&msgs);
        assert_eq!(out.rows, vec![0, 2]);
        assert_eq!(out.errors.len(), 1);
        assert_eq!(out.errors[0].0, 1);
        assert!(
            out.errors[0]
                .1
                .contains("invalid input syntax for type uuid")
        );
        let ids = datafusion::arrow::array::AsArray::as_string::<i32>(out.batch.column(0));
        assert_eq!(ids.value(0), "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
        assert_eq!(ids.value(1), "b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11");
    }

    #[test]
    fn inet_and_cidr_columns_are_stored_canonical_and_bad_ones_are_errors() {
        let d = JsonDecoder::new(&[
            col("ip", SqlType::Inet, true),
            col("net", SqlType::Cidr, true),
        ])
        .unwrap();
        let msgs: Vec<Option<&[u8]>> = vec![
            Some(br#"{"ip": "2001:DB8::1", "net": "10"}"#),
            Some(br#"{"ip": "10.0.0.1", "net": "10.1.2.3/8"}"#),
            Some(br#"{"ip": "10.0.0.1/32", "net": "192.168.1"}"#),
        ];
        let out = d.decode(&msgs);
        assert_eq!(out.rows, vec![0, 2]);
        assert_eq!(out.errors.len(), 1);
        assert!(
            out.errors[0].1.contains("invalid cidr value"),
            "{:?}",
            out.errors
        );
        let ips = datafusion::arrow::array::AsArray::as_string::<i32>(out.batch.column(0));
        let nets = datafusion::arrow::array::AsArray::as_string::<i32>(out.batch.column(1));
        assert_eq!((ips.value(0), nets.value(0)), ("2001:db8::1", "10.0.0.0/8"));
        assert_eq!(
            (ips.value(1), nets.value(1)),
            ("10.0.0.1", "192.168.1.0/24")
        );
    }

    #[test]
    fn good_and_bad_messages() {
        let d = JsonDecoder::new(&[
            col("id", SqlType::Int8, false),
            col("name", SqlType::Varchar(Some(5)), true),
            col("ts", SqlType::Timestamp(None), true),
            col("meta", SqlType::Jsonb, true),
        ])
        .unwrap();
        let msgs: Vec<Option<&[u8]>> = vec![
            Some(br#"{"id": 1, "name": "a", "ts": "2024-01-01T00:00:01Z", "meta": {"x": [1, 2]}}"#),
            Some(br#"{"id": 2, "ts": 1704067202000, "extra": true}"#),
            Some(br#"{"id": "three"}"#),
            Some(br#"{"id": 4, "#),
            Some(b"\xff\xfe"),
            None,
            Some(br#"{"name": "no id"}"#),
            Some(br#"{"id": 8, "name": "toolong"}"#),
            Some(br#"{"id": 9, "ts": "yesterday"}"#),
            Some(br#"{"id": 10, "name": 42}"#),
        ];
        let out = d.decode(&msgs);
        assert_eq!(out.rows, vec![0, 1, 9], "errors: {:?}", out.errors);
        let bad: Vec<usize> = out.errors.iter().map(|(i, _)| *i).collect();
        assert_eq!(bad, vec![2, 3, 4, 5, 6, 7, 8]);
        let ids = out
            .batch
            .column(0)
            .as_any()
            .downcast_ref::<datafusion::arrow::array::Int64Array>()
            .unwrap();
        assert_eq!(ids.values(), &[1, 2, 10]);
        let ts = out
            .batch
            .column(2)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        assert_eq!(ts.value(0), 1_704_067_201_000_000);
        assert_eq!(ts.value(1), 1_704_067_202_000_000);
        let meta = out
            .batch
            .column(3)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        // stored as Postgres stores jsonb
        assert_eq!(meta.value(0), r#"{"x": [1, 2]}"#);
        assert!(meta.is_null(1));
        let names = out
            .batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(names.value(2), "42");
    }
}
