//! `ENCODE CSV`: one CSV record per message, its fields matched to the declared columns by
//! position. Options: `csv.delimiter` (one character, default `,`) and `csv.header`
//! (`true`: a record whose fields are the column names is a header and skipped, wherever
//! it appears — producers that copy files often send one per file).
//!
//! Decoded a batch at a time with arrow-csv (every field as text), then cast to the
//! declared types with Arrow's cast kernels; a message with the wrong number of fields, or a
//! field that does not cast, is reported with its index (dead letters) and left out. An
//! empty field is NULL for non-text columns (arrow-csv does not tell a quoted empty string
//! from an empty field). Timestamps: ISO-8601 or epoch milliseconds, as for JSON.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringArray};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::csv::ReaderBuilder;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;

use crate::catalog::ColumnDesc;
use crate::connectors::Options;
use crate::connectors::json::{Decoded, finish, read_text_messages};
use crate::error::{Result, WeirError};
use crate::sql::types::{SqlType, schema_of};

pub struct CsvDecoder {
    columns: Vec<ColumnDesc>,
    /// Every column as text: what arrow-csv reads.
    read_schema: SchemaRef,
    schema: SchemaRef,
    delimiter: u8,
    header: bool,
}

/// The CSV options a source knows.
pub const OPTIONS: &[&str] = &["csv.delimiter", "csv.header"];

impl CsvDecoder {
    pub fn new(columns: &[ColumnDesc], o: &Options) -> Result<CsvDecoder> {
        let delimiter = match o.get("csv.delimiter").map(|s| s.as_bytes()) {
            None => b',',
            Some([d]) if *d != b'"' && *d != b'\n' => *d,
            Some(_) => {
                return Err(WeirError::invalid_parameter(
                    "csv.delimiter must be one character (not a quote or newline)",
                ));
            }
        };
        let header = match o.get("csv.header").map(|s| s.to_lowercase()).as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(WeirError::invalid_parameter(format!(
                    "csv.header must be true or false, not '{other}'"
                )));
            }
        };
        for c in columns {
            if matches!(c.ty, SqlType::Array(_) | SqlType::Bytea | SqlType::Interval) {
                return Err(WeirError::not_supported(format!(
                    "ENCODE CSV cannot decode column \"{}\" of type {}",
                    c.name,
                    c.ty.display_name()
                )));
            }
        }
        let read_schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|c| Field::new(&c.name, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        Ok(CsvDecoder {
            schema: schema_of(columns.iter().map(|c| (c.name.as_str(), &c.ty, c.nullable))),
            columns: columns.to_vec(),
            read_schema,
            delimiter,
            header,
        })
    }

    /// Decode messages' values; `None` (a message without a value) is an error.
    pub fn decode(&self, values: &[Option<&[u8]>]) -> Decoded {
        let (read, good, mut errors) = read_text_messages(values, &self.read_schema, |which| {
            self.read_all(values, which)
        });
        // header records
        let (read, mut good) = if self.header {
            self.drop_headers(read, good)
        } else {
            (read, good)
        };
        let mut bad_cast: Vec<(usize, String)> = Vec::new();
        let mut raw: Vec<ArrayRef> = Vec::with_capacity(self.columns.len());
        for (k, c) in self.columns.iter().enumerate() {
            let text = read.column(k).clone();
            let strings = text.as_any().downcast_ref::<StringArray>();
            let is_text = matches!(
                c.ty,
                SqlType::Text | SqlType::Varchar(_) | SqlType::Jsonb | SqlType::Json
            );
            // empty fields are NULL for non-text columns
            let text: ArrayRef = match strings {
                Some(s) if !is_text => Arc::new(
                    s.iter()
                        .map(|v| v.filter(|v| !v.trim().is_empty()))
                        .collect::<StringArray>(),
                ),
                _ => text,
            };
            let col = match c.ty {
                SqlType::Timestamp(_) | SqlType::TimestampTz(_) => text,
                // JSON text, checked and stored in jsonb's canonical form (json: as written)
                SqlType::Jsonb | SqlType::Json => match text.as_any().downcast_ref::<StringArray>()
                {
                    Some(s) => {
                        let read = match c.ty {
                            SqlType::Json => crate::sql::jsonb::json_checked,
                            _ => crate::sql::jsonb::normalize,
                        };
                        let mut out: Vec<Option<String>> = Vec::with_capacity(s.len());
                        for (r, v) in s.iter().enumerate() {
                            match v.map(read) {
                                None => out.push(None),
                                Some(Ok(n)) => out.push(Some(n)),
                                Some(Err(e)) => {
                                    bad_cast
                                        .push((r, format!("column \"{}\": {}", c.name, e.message)));
                                    out.push(None);
                                }
                            }
                        }
                        Arc::new(StringArray::from(out)) as ArrayRef
                    }
                    None => text,
                },
                _ if is_text => text,
                _ => {
                    let target = c.ty.arrow_type();
                    let opts = CastOptions {
                        safe: true,
                        ..Default::default()
                    };
                    match cast_with_options(&text, &target, &opts) {
                        Ok(a) => {
                            for r in 0..a.len() {
                                if a.is_null(r) && text.is_valid(r) {
                                    let v = text
                                        .as_any()
                                        .downcast_ref::<StringArray>()
                                        .map(|s| s.value(r).to_owned())
                                        .unwrap_or_default();
                                    bad_cast.push((
                                        r,
                                        format!(
                                            "column \"{}\": invalid input syntax for type {}: \"{v}\"",
                                            c.name,
                                            c.ty.display_name()
                                        ),
                                    ));
                                }
                            }
                            a
                        }
                        Err(e) => {
                            for r in 0..text.len() {
                                bad_cast.push((r, format!("column \"{}\": {e}", c.name)));
                            }
                            datafusion::arrow::array::new_null_array(&target, text.len())
                        }
                    }
                }
            };
            raw.push(col);
        }
        if !bad_cast.is_empty() {
            // rows with a field that did not cast: reported, and left out before the checks
            let mut bad = vec![false; good.len()];
            for (r, e) in bad_cast {
                if !bad[r] {
                    bad[r] = true;
                    errors.push((good[r], e));
                }
            }
            let keep = datafusion::arrow::array::BooleanArray::from(
                bad.iter().map(|b| !b).collect::<Vec<_>>(),
            );
            raw = raw
                .iter()
                .map(|c| {
                    datafusion::arrow::compute::filter(c, &keep).unwrap_or_else(|_| c.slice(0, 0))
                })
                .collect();
            good = good
                .into_iter()
                .zip(bad)
                .filter(|(_, b)| !b)
                .map(|(i, _)| i)
                .collect();
        }
        finish(&self.columns, &self.schema, raw, good, errors)
    }

    /// Leave out records whose fields are the column names.
    fn drop_headers(&self, read: RecordBatch, good: Vec<usize>) -> (RecordBatch, Vec<usize>) {
        let cols: Vec<Option<&StringArray>> = read
            .columns()
            .iter()
            .map(|c| c.as_any().downcast_ref::<StringArray>())
            .collect();
        let is_header: Vec<bool> = (0..read.num_rows())
            .map(|r| {
                self.columns.iter().zip(&cols).all(|(c, col)| {
                    col.is_some_and(|s| {
                        s.is_valid(r) && s.value(r).trim().eq_ignore_ascii_case(&c.name)
                    })
                })
            })
            .collect();
        if !is_header.iter().any(|h| *h) {
            return (read, good);
        }
        let keep = datafusion::arrow::array::BooleanArray::from(
            is_header.iter().map(|h| !h).collect::<Vec<_>>(),
        );
        let read = datafusion::arrow::compute::filter_record_batch(&read, &keep)
            .unwrap_or_else(|_| RecordBatch::new_empty(self.read_schema.clone()));
        let good = good
            .into_iter()
            .zip(is_header)
            .filter(|(_, h)| !h)
            .map(|(i, _)| i)
            .collect();
        (read, good)
    }

    /// arrow-csv over the given messages: exactly one record each, or an error.
    fn read_all(
        &self,
        values: &[Option<&[u8]>],
        which: &[usize],
    ) -> std::result::Result<RecordBatch, String> {
        let mut d = ReaderBuilder::new(self.read_schema.clone())
            .with_delimiter(self.delimiter)
            .with_header(false)
            .with_batch_size(which.len().max(1))
            .build_decoder();
        let mut buf: Vec<u8> = Vec::new();
        for i in which {
            let v = values[*i].unwrap_or_default();
            buf.extend_from_slice(v);
            if !v.ends_with(b"\n") {
                buf.push(b'\n');
            }
        }
        let mut at = 0;
        while at < buf.len() {
            let used = d.decode(&buf[at..]).map_err(|e| e.to_string())?;
            if used == 0 {
                break;
            }
            at += used;
        }
        d.decode(&[]).map_err(|e| e.to_string())?;
        let batch = d
            .flush()
            .map_err(|e| e.to_string())?
            .unwrap_or_else(|| RecordBatch::new_empty(self.read_schema.clone()));
        if batch.num_rows() != which.len() {
            return Err(format!(
                "expected one CSV record of {} fields",
                self.columns.len()
            ));
        }
        Ok(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, TimestampMicrosecondArray};

    fn col(name: &str, ty: SqlType, nullable: bool) -> ColumnDesc {
        ColumnDesc {
            name: name.into(),
            ty,
            nullable,
        }
    }

    #[test]
    fn records_headers_and_bad_fields() {
        let cols = [
            col("id", SqlType::Int8, false),
            col("name", SqlType::Varchar(Some(5)), true),
            col("ts", SqlType::Timestamp(None), true),
        ];
        let o = Options::from([("csv.header".to_string(), "true".to_string())]);
        let d = CsvDecoder::new(&cols, &o).unwrap();
        let msgs: Vec<Option<&[u8]>> = vec![
            Some(b"id,name,ts"),
            Some(b"1,ann,2024-01-01T00:00:01Z\n"),
            Some(b"2,\"b,c\",1704067202000"),
            Some(b"three,x,"),
            Some(b"4,toolong,"),
            Some(b"5,only two"),
            Some(b",noid,"),
            Some(b"\xff"),
            Some(b"8,,yesterday"),
            Some(b"9,,"),
        ];
        let out = d.decode(&msgs);
        assert_eq!(out.rows, vec![1, 2, 9], "errors: {:?}", out.errors);
        let bad: Vec<usize> = out.errors.iter().map(|(i, _)| *i).collect();
        assert_eq!(bad, vec![3, 4, 5, 6, 7, 8]);
        let ids = out
            .batch
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(ids.values(), &[1, 2, 9]);
        let ts = out
            .batch
            .column(2)
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .unwrap();
        assert_eq!(ts.value(1), 1_704_067_202_000_000);
        assert!(ts.is_null(2));
        let names = out
            .batch
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(names.value(1), "b,c");
    }
}
