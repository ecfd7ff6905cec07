//! `TopN`: the first rows by an ordering, per partition: `ORDER BY ... LIMIT n [OFFSET m]`
//! (one partition) and `ROW_NUMBER() OVER (PARTITION BY p ORDER BY o) <= n` (with the row
//! number as an output column).
//!
//! - input: one changelog stream.
//! - output: per partition changed in an epoch, the difference between the rows it showed
//!   and the rows it shows now (rows whose rank changed are retracted and re-emitted with
//!   their new row number). Ties in the ordering are broken by the whole row, so the result
//!   is deterministic.
//! - state: per partition every input row (not only the top n, so that a deleted top row
//!   can be replaced), ordered by (sort key, row); and the rows last emitted.
//! - watermark: passed through. A window top-N (partitioned by `window_start` or
//!   `window_end`) tracks each partition's latest `window_end` and, at the end of the epoch
//!   in which the watermark passes it plus the allowed lateness, frees the partition
//!   without retracting its rows (the windowed aggregate below frees the same windows then,
//!   so no change can reach them any more).
//! - checkpoint: the per-partition ordered rows.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, UInt64Array};
use datafusion::arrow::compute::{SortOptions, cast};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::changelog::Changelog;
use crate::error::Result;
use crate::operators::{FastMap, Operator, evaluate};

pub struct SortKey {
    pub expr: Arc<dyn PhysicalExpr>,
    pub data_type: DataType,
    pub options: SortOptions,
}

/// (sort key ++ row) -> (sort key length, multiplicity), in output order.
type Partition = BTreeMap<Box<[u8]>, (u32, i64)>;

pub struct TopN {
    partition_by: Vec<Arc<dyn PhysicalExpr>>,
    part_conv: RowConverter,
    sort_by: Vec<Arc<dyn PhysicalExpr>>,
    sort_conv: RowConverter,
    row_conv: RowConverter,
    out_conv: RowConverter,
    skip: usize,
    fetch: usize,
    /// Append the 1-based row number within the partition as the last output column.
    row_number: bool,
    /// partition -> (sort key ++ row) -> (sort key length, multiplicity)
    parts: FastMap<Box<[u8]>, Partition>,
    emitted: HashMap<Box<[u8]>, Vec<Box<[u8]>>>,
    dirty: HashSet<Box<[u8]>>,
    window: Option<WindowFree>,
    schema: SchemaRef,
    text: String,
}

/// Freeing of closed windows' partitions.
struct WindowFree {
    /// Input column holding `window_end`.
    end_col: usize,
    lateness_us: i64,
    watermark: Option<i64>,
    /// Latest window end seen per partition.
    part_end: FastMap<Box<[u8]>, i64>,
    /// Partitions by window end (entries may be stale: checked against `part_end`).
    by_end: BTreeMap<i64, Vec<Box<[u8]>>>,
}

impl TopN {
    /// Free partitions whose window closed (see the module header).
    pub fn with_window_end(mut self, end_col: usize, lateness_us: i64) -> Self {
        self.window = Some(WindowFree {
            end_col,
            lateness_us,
            watermark: None,
            part_end: FastMap::default(),
            by_end: BTreeMap::new(),
        });
        self
    }

    fn free_closed_windows(&mut self) {
        let Some(wf) = &mut self.window else { return };
        let Some(wm) = wf.watermark else { return };
        let limit = wm.saturating_sub(wf.lateness_us);
        let ends: Vec<i64> = wf.by_end.range(..=limit).map(|(e, _)| *e).collect();
        for end in ends {
            for part in wf.by_end.remove(&end).unwrap_or_default() {
                if wf.part_end.get(&part) != Some(&end) {
                    continue; // the partition moved to a later end
                }
                debug_assert!(!self.dirty.contains(&part), "freed after emitting");
                wf.part_end.remove(&part);
                self.parts.remove(&part);
                self.emitted.remove(&part);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        partition_by: Vec<Arc<dyn PhysicalExpr>>,
        partition_types: Vec<DataType>,
        sort_by: Vec<SortKey>,
        skip: usize,
        fetch: usize,
        row_number: bool,
        input_schema: SchemaRef,
        schema: SchemaRef,
        text: String,
    ) -> Result<TopN> {
        let fields = |s: &SchemaRef| -> Vec<SortField> {
            s.fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect()
        };
        Ok(TopN {
            partition_by,
            part_conv: RowConverter::new(
                partition_types.into_iter().map(SortField::new).collect(),
            )?,
            sort_conv: RowConverter::new(
                sort_by
                    .iter()
                    .map(|k| SortField::new_with_options(k.data_type.clone(), k.options))
                    .collect(),
            )?,
            sort_by: sort_by.into_iter().map(|k| k.expr).collect(),
            row_conv: RowConverter::new(fields(&input_schema))?,
            out_conv: RowConverter::new(fields(&schema))?,
            skip,
            fetch,
            row_number,
            parts: FastMap::default(),
            emitted: HashMap::new(),
            dirty: HashSet::new(),
            window: None,
            schema,
            text,
        })
    }

    /// The rows a partition shows now, in order (input rows, repeated by multiplicity).
    fn visible(&self, part: &[u8]) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let Some(rows) = self.parts.get(part) else {
            return out;
        };
        let mut skipped = 0usize;
        'outer: for (key, (sk_len, count)) in rows {
            for _ in 0..(*count).max(0) {
                if skipped < self.skip {
                    skipped += 1;
                    continue;
                }
                if out.len() >= self.fetch {
                    break 'outer;
                }
                out.push(&key[*sk_len as usize..]);
            }
        }
        out
    }
}

impl Operator for TopN {
    fn name(&self) -> &'static str {
        "TopN"
    }

    fn details(&self) -> String {
        self.text.clone()
    }

    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn state_rows(&self) -> usize {
        self.parts.values().map(|p| p.len()).sum()
    }

    fn on_changes(&mut self, _port: usize, input: Changelog) -> Result<Vec<Changelog>> {
        if input.is_empty() {
            return Ok(vec![]);
        }
        let batch = &input.data;
        let pcols = self
            .partition_by
            .iter()
            .map(|e| evaluate(e, batch))
            .collect::<Result<Vec<_>>>()?;
        let scols = self
            .sort_by
            .iter()
            .map(|e| evaluate(e, batch))
            .collect::<Result<Vec<_>>>()?;
        let parts = if pcols.is_empty() {
            None
        } else {
            Some(self.part_conv.convert_columns(&pcols)?)
        };
        let sorts = self.sort_conv.convert_columns(&scols)?;
        let rows = self.row_conv.convert_columns(batch.columns())?;
        let ends = match &self.window {
            Some(wf) => Some(cast(
                batch.column(wf.end_col),
                &DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Microsecond, None),
            )?),
            None => None,
        };
        let ends = ends.as_ref().and_then(|a| {
            a.as_any()
                .downcast_ref::<datafusion::arrow::array::TimestampMicrosecondArray>()
        });
        let mut key = Vec::with_capacity(64);
        for (i, w) in input.weights.values().iter().enumerate() {
            let part: &[u8] = match &parts {
                Some(p) => p.row(i).data(),
                None => &[],
            };
            let sk = sorts.row(i).data();
            key.clear();
            key.extend_from_slice(sk);
            key.extend_from_slice(rows.row(i).data());
            let map = self.parts.entry(part.into()).or_default();
            match map.get_mut(key.as_slice()) {
                Some((_, c)) => {
                    *c += w;
                    if *c == 0 {
                        map.remove(key.as_slice());
                    }
                }
                None => {
                    map.insert(key.as_slice().into(), (sk.len() as u32, *w));
                }
            }
            if map.is_empty() {
                self.parts.remove(part);
            }
            if !self.dirty.contains(part) {
                self.dirty.insert(part.into());
            }
            if let (Some(wf), Some(ends)) = (&mut self.window, ends)
                && ends.is_valid(i)
            {
                let end = ends.value(i);
                let known = wf.part_end.get(part).copied();
                if known.is_none_or(|k| end > k) {
                    wf.part_end.insert(part.into(), end);
                    wf.by_end.entry(end).or_default().push(part.into());
                }
            }
        }
        Ok(vec![])
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Vec<Changelog>> {
        if let Some(wf) = &mut self.window {
            wf.watermark = Some(watermark);
        }
        Ok(vec![])
    }

    fn on_epoch_end(&mut self) -> Result<Vec<Changelog>> {
        let out = self.emit()?;
        self.free_closed_windows();
        Ok(out)
    }
}

impl TopN {
    /// Per partition changed in the epoch: the difference between what it showed and what
    /// it shows now.
    fn emit(&mut self) -> Result<Vec<Changelog>> {
        if self.dirty.is_empty() {
            return Ok(vec![]);
        }
        let dirty: Vec<Box<[u8]>> = self.dirty.drain().collect();
        let mut retract: Vec<Box<[u8]>> = Vec::new();
        let mut insert: Vec<Box<[u8]>> = Vec::new();
        let row_parser = self.row_conv.parser();
        for part in dirty {
            let now = self.visible(&part);
            let new_out: Vec<Box<[u8]>> = if now.is_empty() {
                Vec::new()
            } else {
                let mut cols = self
                    .row_conv
                    .convert_rows(now.iter().map(|r| row_parser.parse(r)))?;
                if self.row_number {
                    let rn: ArrayRef = Arc::new(UInt64Array::from_iter_values(
                        (1..=now.len() as u64).map(|r| r + self.skip as u64),
                    ));
                    let t = self
                        .schema
                        .field(self.schema.fields().len() - 1)
                        .data_type();
                    cols.push(if rn.data_type() != t {
                        cast(&rn, t)?
                    } else {
                        rn
                    });
                }
                let out = self.out_conv.convert_columns(&cols)?;
                out.iter().map(|r| r.data().into()).collect()
            };
            let old = self.emitted.remove(&part).unwrap_or_default();
            // multiset difference old vs new
            let mut counts: HashMap<&[u8], i64> = HashMap::new();
            for r in &new_out {
                *counts.entry(r).or_default() += 1;
            }
            for r in &old {
                *counts.entry(r).or_default() -= 1;
            }
            for (r, c) in counts {
                for _ in 0..c.abs() {
                    if c > 0 {
                        insert.push(r.into());
                    } else {
                        retract.push(r.into());
                    }
                }
            }
            if !new_out.is_empty() {
                self.emitted.insert(part, new_out);
            }
        }
        let mut out = Vec::new();
        let parser = self.out_conv.parser();
        for (rows, weight) in [(retract, -1i64), (insert, 1i64)] {
            if rows.is_empty() {
                continue;
            }
            let cols = self
                .out_conv
                .convert_rows(rows.iter().map(|r| parser.parse(r)))?;
            let batch = RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                &RecordBatchOptions::new().with_row_count(Some(rows.len())),
            )?;
            out.push(if weight > 0 {
                Changelog::inserts(batch)
            } else {
                Changelog::retractions(batch)
            });
        }
        Ok(out)
    }
}
