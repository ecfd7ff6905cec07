//! The datagen generator (`connector = 'datagen'`): rows of declared columns with values
//! from a seeded PRNG, deterministic for a seed: each value is a function of (seed, row
//! index, column), so the rows do not depend on batch sizes and the generator seeks in
//! O(1) (a restored view resumes its instance at the checkpointed row). Options: `datagen.rows.per.second`
//! (wall-clock pace; default unlimited), `datagen.row.num` (total rows; default unbounded),
//! `datagen.seed` (default 0), and per column `fields.<col>.kind` = `random` (default) or
//! `sequence` (with `fields.<col>.start`, default 1), `fields.<col>.min` / `.max` for
//! numbers, `fields.<col>.length` for text (default 10). Timestamps advance by
//! `datagen.time.step.ms` per row (default 1) from `datagen.base.time` (ms, default
//! 2024-01-01), so a watermark on them moves.

use std::fmt::Write as _;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float32Builder, Float64Builder, Int16Builder, Int32Builder,
    Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::catalog::ColumnDesc;
/// Longest random text a datagen field may have (bytes).
const MAX_LENGTH: u64 = 1 << 20;

use crate::connectors::{Generator, Options, opt_u64};
use crate::error::{Result, WeirError};
use crate::sql::types::{SqlType, schema_of};

enum Field {
    Sequence { start: i64 },
    Random { min: i64, max: i64, length: usize },
}

pub struct Datagen {
    columns: Vec<ColumnDesc>,
    fields: Vec<Field>,
    seed: u64,
    /// Index of the next row.
    row: u64,
    /// Rows in all (None: unbounded).
    total: Option<u64>,
    base_us: i64,
    step_us: i64,
    schema: SchemaRef,
}

/// The random stream of one value: a function of (seed, row, column) only.
fn value_rng(seed: u64, row: u64, col: usize) -> SmallRng {
    // distinct odd multipliers keep (row, col) pairs apart before SplitMix64 mixes them
    SmallRng::seed_from_u64(
        seed ^ row.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (col as u64).wrapping_mul(0xD1B5_4A32_D192_ED03),
    )
}

fn opt_i64(o: &Options, key: &str) -> Result<Option<i64>> {
    match o.get(key) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            WeirError::invalid_parameter(format!("option {key} must be a number, not '{v}'"))
        }),
    }
}

impl Datagen {
    pub fn new(o: &Options, columns: &[ColumnDesc]) -> Result<Datagen> {
        let mut fields = Vec::with_capacity(columns.len());
        for c in columns {
            let p = |k: &str| format!("fields.{}.{k}", c.name);
            let kind = o.get(&p("kind")).map(|s| s.to_lowercase());
            fields.push(match kind.as_deref() {
                Some("sequence") => Field::Sequence {
                    start: opt_i64(o, &p("start"))?.unwrap_or(1),
                },
                Some("random") | None => {
                    let length = opt_u64(o, &p("length"))?.unwrap_or(10);
                    // a batch holds thousands of such values
                    if length > MAX_LENGTH {
                        return Err(WeirError::invalid_parameter(format!(
                            "fields.{}.length must be at most {MAX_LENGTH}, not {length}",
                            c.name
                        )));
                    }
                    Field::Random {
                        min: opt_i64(o, &p("min"))?.unwrap_or(0),
                        max: opt_i64(o, &p("max"))?.unwrap_or(1000),
                        length: length as usize,
                    }
                }
                Some(other) => {
                    return Err(WeirError::invalid_parameter(format!(
                        "fields.{}.kind must be random or sequence, not '{other}'",
                        c.name
                    )));
                }
            });
            if !matches!(
                c.ty,
                SqlType::Bool
                    | SqlType::Int2
                    | SqlType::Int4
                    | SqlType::Int8
                    | SqlType::Float4
                    | SqlType::Float8
                    | SqlType::Numeric(_)
                    | SqlType::Text
                    | SqlType::Varchar(_)
                    | SqlType::Timestamp(_)
                    | SqlType::TimestampTz(_)
            ) {
                return Err(WeirError::not_supported(format!(
                    "datagen cannot generate {} (column \"{}\")",
                    c.ty.display_name(),
                    c.name
                )));
            }
        }
        Ok(Datagen {
            schema: schema_of(columns.iter().map(|c| (c.name.as_str(), &c.ty, c.nullable))),
            columns: columns.to_vec(),
            fields,
            seed: opt_u64(o, "datagen.seed")?.unwrap_or(0),
            row: 0,
            total: opt_u64(o, "datagen.row.num")?,
            base_us: opt_i64(o, "datagen.base.time")?
                .unwrap_or(1_704_067_200_000)
                .saturating_mul(1000),
            step_us: opt_i64(o, "datagen.time.step.ms")?
                .unwrap_or(1)
                .saturating_mul(1000),
        })
    }
}

fn next_int(f: &Field, row: u64, rng: &mut SmallRng) -> i64 {
    match f {
        Field::Sequence { start } => start.wrapping_add(row as i64),
        Field::Random { min, max, .. } => rng.random_range(*min..=(*max).max(*min)),
    }
}

impl Generator for Datagen {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn seek(&mut self, rows: u64) -> Result<()> {
        self.row = rows;
        Ok(())
    }

    fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        let n = match self.total {
            Some(t) if self.row >= t => return Ok(None),
            Some(t) => ((t - self.row) as usize).min(max_rows),
            None => max_rows,
        };
        let first = self.row;
        let seed = self.seed;
        let rows = first..first + n as u64;
        let mut arrays: Vec<ArrayRef> = Vec::with_capacity(self.columns.len());
        for (col, (c, f)) in self.columns.iter().zip(self.fields.iter()).enumerate() {
            let a: ArrayRef = match &c.ty {
                SqlType::Bool => {
                    let mut b = BooleanBuilder::with_capacity(n);
                    for r in rows.clone() {
                        b.append_value(next_int(f, r, &mut value_rng(seed, r, col)) % 2 == 0);
                    }
                    Arc::new(b.finish())
                }
                SqlType::Int2 => {
                    let mut b = Int16Builder::with_capacity(n);
                    for r in rows.clone() {
                        b.append_value(next_int(f, r, &mut value_rng(seed, r, col)) as i16);
                    }
                    Arc::new(b.finish())
                }
                SqlType::Int4 => {
                    let mut b = Int32Builder::with_capacity(n);
                    for r in rows.clone() {
                        b.append_value(next_int(f, r, &mut value_rng(seed, r, col)) as i32);
                    }
                    Arc::new(b.finish())
                }
                SqlType::Int8 => {
                    let mut b = Int64Builder::with_capacity(n);
                    for r in rows.clone() {
                        b.append_value(next_int(f, r, &mut value_rng(seed, r, col)));
                    }
                    Arc::new(b.finish())
                }
                SqlType::Float4 => {
                    let mut b = Float32Builder::with_capacity(n);
                    for r in rows.clone() {
                        let rng = &mut value_rng(seed, r, col);
                        b.append_value(next_int(f, r, rng) as f32 + rng.random::<f32>());
                    }
                    Arc::new(b.finish())
                }
                SqlType::Float8 | SqlType::Numeric(_) => {
                    let mut b = Float64Builder::with_capacity(n);
                    for r in rows.clone() {
                        let rng = &mut value_rng(seed, r, col);
                        b.append_value(next_int(f, r, rng) as f64 + rng.random::<f64>());
                    }
                    let a: ArrayRef = Arc::new(b.finish());
                    cast(&a, &c.ty.arrow_type())?
                }
                SqlType::Timestamp(_) | SqlType::TimestampTz(_) => {
                    let mut b = TimestampMicrosecondBuilder::with_capacity(n);
                    for r in rows.clone() {
                        b.append_value(
                            self.base_us
                                .saturating_add((r as i64).saturating_mul(self.step_us)),
                        );
                    }
                    let a: ArrayRef = Arc::new(b.finish());
                    cast(&a, &c.ty.arrow_type())?
                }
                _ => {
                    let len = match f {
                        Field::Random { length, .. } => *length,
                        Field::Sequence { .. } => 0,
                    };
                    let mut b = StringBuilder::with_capacity(n, n * len.max(1));
                    let mut buf = String::with_capacity(len);
                    for r in rows.clone() {
                        buf.clear();
                        match f {
                            Field::Sequence { start } => {
                                let _ = write!(buf, "{}", start.wrapping_add(r as i64));
                            }
                            Field::Random { .. } => {
                                let rng = &mut value_rng(seed, r, col);
                                buf.extend(
                                    (0..len).map(|_| (b'a' + rng.random_range(0..26u8)) as char),
                                );
                            }
                        }
                        b.append_value(&buf);
                    }
                    Arc::new(b.finish())
                }
            };
            arrays.push(a);
        }
        self.row += n as u64;
        Ok(Some(RecordBatch::try_new(self.schema.clone(), arrays)?))
    }
}
