//! Decoding changelog topics into keyed-table operations: `FORMAT UPSERT ENCODE JSON` and
//! `FORMAT DEBEZIUM ENCODE JSON` (tables with a primary key, fed by `kafka.rs`).
//!
//! UPSERT, as in a compacted topic: the message key identifies the row (a JSON object with
//! the key columns, or for a one-column key a bare JSON value or plain text); a value is
//! the whole row (key fields from the message key win over the value's), a null value
//! deletes the key.
//!
//! DEBEZIUM: the value is a change event `{"before":..,"after":..,"op":..}`, bare or inside
//! the `{"schema":..,"payload":..}` envelope of Kafka Connect's JSON converter. `c`
//! (create), `r` (snapshot read) and `u` (update) set the key's row to `after`; `d` deletes
//! the key of `before` (or of the message key); a null value (the tombstone after a delete)
//! is skipped. Applying by key makes replays idempotent: re-reading a topic gives the same
//! table whatever `before` says.
//!
//! Each message becomes one operation, in message order; the table applies them in order
//! (`Change::Upsert`). Messages that do not decode come back with their index and error.
//! This path parses each message with serde_json (to merge or unwrap objects) before the
//! batch decode: CDC tables are not the stream hot path.

use datafusion::arrow::record_batch::RecordBatch;
use serde_json::{Map, Value};

use crate::catalog::ColumnDesc;
use crate::connectors::json::JsonDecoder;
use crate::error::{Result, WeirError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFormat {
    Upsert,
    Debezium,
}

impl TableFormat {
    pub fn parse(word: &str) -> Option<TableFormat> {
        match word {
            "upsert" => Some(TableFormat::Upsert),
            "debezium" => Some(TableFormat::Debezium),
            _ => None,
        }
    }
}

/// A message's key and value.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

pub struct ChangeDecoder {
    format: TableFormat,
    /// All the table's columns.
    rows: JsonDecoder,
    /// The primary-key columns, in key order.
    keys: JsonDecoder,
    key_names: Vec<String>,
}

/// What a batch of messages gave, ready for `Change::Upsert`.
pub struct DecodedChanges {
    pub upserts: RecordBatch,
    pub deletes: RecordBatch,
    /// (is_delete, row in its batch), in message order.
    pub order: Vec<(bool, u32)>,
    /// (message index, error) of the messages left out.
    pub errors: Vec<(usize, String)>,
    /// Messages that were skipped on purpose (Debezium tombstones).
    pub skipped: usize,
}

enum Op {
    Upsert(Vec<u8>),
    Delete(Vec<u8>),
    Skip,
}

impl ChangeDecoder {
    /// `columns`: the table's columns; `key`: indexes of its primary key.
    pub fn new(
        format: TableFormat,
        columns: &[ColumnDesc],
        key: &[usize],
    ) -> Result<ChangeDecoder> {
        if key.is_empty() {
            return Err(WeirError::new(
                crate::error::sqlstate::INVALID_TABLE_DEFINITION,
                "a table fed by FORMAT UPSERT or DEBEZIUM needs a PRIMARY KEY",
            ));
        }
        let key_cols: Vec<ColumnDesc> = key.iter().map(|&i| columns[i].clone()).collect();
        Ok(ChangeDecoder {
            format,
            rows: JsonDecoder::new(columns)?,
            keys: JsonDecoder::new(&key_cols)?,
            key_names: key_cols.into_iter().map(|c| c.name).collect(),
        })
    }

    /// Decode messages given as (key, value).
    pub fn decode(&self, messages: &[KeyValue<'_>]) -> DecodedChanges {
        let mut errors = Vec::new();
        let mut ops: Vec<(usize, Op)> = Vec::with_capacity(messages.len());
        for (i, (k, v)) in messages.iter().enumerate() {
            let op = match self.format {
                TableFormat::Upsert => self.upsert_op(*k, *v),
                TableFormat::Debezium => self.debezium_op(*k, *v),
            };
            match op {
                Ok(op) => ops.push((i, op)),
                Err(e) => errors.push((i, e)),
            }
        }
        let mut skipped = 0;
        let mut up_in: Vec<Option<&[u8]>> = Vec::new();
        let mut del_in: Vec<Option<&[u8]>> = Vec::new();
        // (message, is_delete, index in its input list)
        let mut seq: Vec<(usize, bool, usize)> = Vec::with_capacity(ops.len());
        for (i, op) in &ops {
            match op {
                Op::Upsert(b) => {
                    seq.push((*i, false, up_in.len()));
                    up_in.push(Some(b));
                }
                Op::Delete(b) => {
                    seq.push((*i, true, del_in.len()));
                    del_in.push(Some(b));
                }
                Op::Skip => skipped += 1,
            }
        }
        let up = self.rows.decode(&up_in);
        let del = self.keys.decode(&del_in);
        // input index -> row of the decoded batch
        let row_of = |n: usize, rows: &[usize]| {
            let mut m = vec![None; n];
            for (r, i) in rows.iter().enumerate() {
                m[*i] = Some(r as u32);
            }
            m
        };
        let up_rows = row_of(up_in.len(), &up.rows);
        let del_rows = row_of(del_in.len(), &del.rows);
        let mut up_err: std::collections::HashMap<usize, String> = up.errors.into_iter().collect();
        let mut del_err: std::collections::HashMap<usize, String> =
            del.errors.into_iter().collect();
        let mut order = Vec::with_capacity(seq.len());
        for (msg, is_delete, j) in seq {
            let row = if is_delete { del_rows[j] } else { up_rows[j] };
            match row {
                Some(r) => order.push((is_delete, r)),
                None => {
                    let e = if is_delete {
                        del_err.remove(&j).map(|e| format!("delete key: {e}"))
                    } else {
                        up_err.remove(&j)
                    };
                    errors.push((msg, e.unwrap_or_else(|| "cannot decode".into())));
                }
            }
        }
        errors.sort_by_key(|(i, _)| *i);
        DecodedChanges {
            upserts: up.batch,
            deletes: del.batch,
            order,
            errors,
            skipped,
        }
    }

    /// The message key as an object of key fields (None without a key).
    fn key_object(
        &self,
        key: Option<&[u8]>,
    ) -> std::result::Result<Option<Map<String, Value>>, String> {
        let Some(k) = key else {
            return Ok(None);
        };
        let parsed: std::result::Result<Value, _> = serde_json::from_slice(k);
        let v = match parsed {
            Ok(v) => v,
            Err(e) => {
                // a one-column key may be plain text
                return match (std::str::from_utf8(k), self.key_names.as_slice()) {
                    (Ok(s), [name]) => Ok(Some(Map::from_iter([(
                        name.clone(),
                        Value::String(s.to_owned()),
                    )]))),
                    _ => Err(format!("the message key is not JSON: {e}")),
                };
            }
        };
        match unwrap_envelope(v) {
            Value::Object(m) => Ok(Some(m)),
            Value::Null => Ok(None),
            scalar => match self.key_names.as_slice() {
                [name] => Ok(Some(Map::from_iter([(name.clone(), scalar)]))),
                _ => Err(format!(
                    "the message key must be a JSON object with the key columns ({})",
                    self.key_names.join(", ")
                )),
            },
        }
    }

    fn upsert_op(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> std::result::Result<Op, String> {
        let key = self.key_object(key)?;
        match (value, key) {
            (None, None) => Err("a message without value (a delete) needs a key".into()),
            (None, Some(k)) => Ok(Op::Delete(to_bytes(&Value::Object(k)))),
            // without a key the value carries the key columns itself
            (Some(v), None) => Ok(Op::Upsert(v.to_vec())),
            (Some(v), Some(k)) => {
                let mut row = match serde_json::from_slice::<Value>(v) {
                    Ok(Value::Object(m)) => m,
                    Ok(_) => return Err("the message value is not a JSON object".into()),
                    Err(e) => return Err(format!("the message value is not JSON: {e}")),
                };
                for name in &self.key_names {
                    if let Some(x) = k.get(name) {
                        row.insert(name.clone(), x.clone());
                    }
                }
                Ok(Op::Upsert(to_bytes(&Value::Object(row))))
            }
        }
    }

    fn debezium_op(
        &self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> std::result::Result<Op, String> {
        let Some(v) = value else {
            return Ok(Op::Skip);
        };
        let event = match serde_json::from_slice::<Value>(v) {
            Ok(v) => unwrap_envelope(v),
            Err(e) => return Err(format!("the message value is not JSON: {e}")),
        };
        let Value::Object(mut event) = event else {
            return Err("a Debezium event must be a JSON object".into());
        };
        let op = match event.get("op") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err("a Debezium event needs \"op\" (c, r, u or d)".into()),
        };
        match op.as_str() {
            "c" | "r" | "u" => match event.remove("after") {
                Some(after @ Value::Object(_)) => Ok(Op::Upsert(to_bytes(&after))),
                _ => Err(format!(
                    "a Debezium \"{op}\" event needs an \"after\" object"
                )),
            },
            "d" => match event.remove("before") {
                Some(before @ Value::Object(_)) => Ok(Op::Delete(to_bytes(&before))),
                _ => match self.key_object(key)? {
                    Some(k) => Ok(Op::Delete(to_bytes(&Value::Object(k)))),
                    None => Err("a Debezium delete needs \"before\" or a message key".into()),
                },
            },
            "t" => Err("Debezium truncate events are not supported".into()),
            other => Err(format!("unknown Debezium op \"{other}\"")),
        }
    }
}

/// Kafka Connect's JSON converter wraps data as `{"schema": .., "payload": ..}`.
fn unwrap_envelope(v: Value) -> Value {
    match v {
        Value::Object(mut m)
            if m.contains_key("payload")
                && m.len() <= 2
                && (m.len() == 1 || m.contains_key("schema")) =>
        {
            m.remove("payload").unwrap_or(Value::Null)
        }
        other => other,
    }
}

fn to_bytes(v: &Value) -> Vec<u8> {
    // serializing a Value cannot fail (string keys only)
    serde_json::to_vec(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::types::SqlType;
    use datafusion::arrow::array::{Array, Int32Array, StringArray};

    fn cols() -> Vec<ColumnDesc> {
        vec![
            ColumnDesc {
                name: "id".into(),
                ty: SqlType::Int4,
                nullable: false,
            },
            ColumnDesc {
                name: "name".into(),
                ty: SqlType::Text,
                nullable: true,
            },
        ]
    }

    #[test]
    fn upsert_messages() {
        let d = ChangeDecoder::new(TableFormat::Upsert, &cols(), &[0]).unwrap();
        let msgs: Vec<KeyValue<'_>> = vec![
            (Some(b"{\"id\":1}"), Some(b"{\"name\":\"a\"}")),
            (Some(b"2"), Some(b"{\"id\":99,\"name\":\"b\"}")),
            (Some(b"1"), None),
            (None, None),
            (Some(b"{\"id\":3}"), Some(b"not json")),
            (None, Some(b"{\"id\":4,\"name\":\"d\"}")),
            (Some(b"x"), None),
        ];
        let out = d.decode(&msgs);
        let errs: Vec<usize> = out.errors.iter().map(|(i, _)| *i).collect();
        assert_eq!(errs, vec![3, 4, 6], "{:?}", out.errors);
        assert_eq!(
            out.order,
            vec![(false, 0), (false, 1), (true, 0), (false, 2)]
        );
        let ids = out
            .upserts
            .column(0)
            .as_any()
            .downcast_ref::<Int32Array>()
            .unwrap();
        assert_eq!(ids.values().to_vec(), vec![1, 2, 4]);
        let names = out
            .upserts
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(names.value(1), "b");
        assert_eq!(out.deletes.num_rows(), 1);
    }

    #[test]
    fn debezium_events() {
        let d = ChangeDecoder::new(TableFormat::Debezium, &cols(), &[0]).unwrap();
        let msgs: Vec<KeyValue<'_>> = vec![
            (None, Some(br#"{"before":null,"after":{"id":1,"name":"a"},"op":"c"}"#)),
            (None, Some(br#"{"schema":{},"payload":{"before":{"id":1,"name":"a"},"after":{"id":1,"name":"b"},"op":"u"}}"#)),
            (None, Some(br#"{"before":{"id":1,"name":"b"},"after":null,"op":"d"}"#)),
            (Some(b"{\"id\":1}"), None),
            (None, Some(br#"{"op":"x"}"#)),
            (None, Some(br#"{"op":"c","after":{"name":"no id"}}"#)),
        ];
        let out = d.decode(&msgs);
        assert_eq!(out.skipped, 1);
        let errs: Vec<usize> = out.errors.iter().map(|(i, _)| *i).collect();
        assert_eq!(errs, vec![4, 5], "{:?}", out.errors);
        assert_eq!(out.order, vec![(false, 0), (false, 1), (true, 0)]);
        assert!(out.deletes.column(0).is_valid(0));
    }
}
