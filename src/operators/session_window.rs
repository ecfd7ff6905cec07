//! `SessionAggregate`: GROUP BY over `SESSION(src, ts, gap)`: per grouping key, rows whose
//! event times are closer than `gap` form one session, with `window_start` = the first
//! event time and `window_end` = the last event time + gap.
//!
//! - input: one changelog stream; `window_start` of a row is its event time.
//! - output: per key changed in an epoch, the difference between the sessions it showed
//!   and the sessions it has now: an out-of-order row that bridges two sessions retracts
//!   both and emits the merged one; a deleted row can split one. Each session's aggregates
//!   are computed by fresh DataFusion accumulators over the session's rows.
//! - state: per key, its rows ordered by event time (with multiplicity), and the session
//!   rows last emitted.
//! - watermark: a session is closed when the watermark reaches its end. With EMIT ON WINDOW
//!   CLOSE only closed sessions are emitted. Rows of sessions whose end + allowed lateness
//!   is below the watermark are freed (their output stays in the view). Each key registers
//!   the next time it needs a look (a session end, or end + lateness), so a watermark step
//!   revisits only the keys with a session due, not every key.
//! - checkpoint: the per-key rows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, TimestampMicrosecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::changelog::Changelog;
use crate::error::{Result, WeirError};
use crate::operators::aggregate::AggSpec;
use crate::operators::{FastMap, FastSet, Operator, evaluate, true_mask};

/// Where each output column of a group key comes from.
#[derive(Debug, Clone, Copy)]
pub enum Slot {
    /// The i-th non-window grouping key.
    Key(usize),
    Start,
    End,
}

/// (event time, row) -> multiplicity, in event-time order.
type KeyRows = BTreeMap<(i64, Box<[u8]>), i64>;

/// An output row shown for a key: (session end, encoded row).
type Shown = (i64, Box<[u8]>);

pub struct SessionAggregate {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    key_conv: RowConverter,
    ts: Arc<dyn PhysicalExpr>,
    gap_us: i64,
    aggs: Vec<AggSpec>,
    row_conv: RowConverter,
    input_schema: SchemaRef,
    layout: Vec<Slot>,
    lateness_us: i64,
    emit_on_close: bool,
    correct: bool,
    watermark: Option<i64>,
    rows: FastMap<Box<[u8]>, KeyRows>,
    /// Output rows shown per key, with the session end each belongs to.
    emitted: FastMap<Box<[u8]>, Vec<Shown>>,
    dirty: FastSet<Box<[u8]>>,
    /// When a key next needs a look as the watermark moves (a session of it closes under
    /// EMIT ON WINDOW CLOSE, or can be freed): deadline -> keys, and each key's earliest
    /// registered deadline. Only those keys are revisited, not every key.
    deadlines: BTreeMap<i64, Vec<Box<[u8]>>>,
    next_deadline: FastMap<Box<[u8]>, i64>,
    out_conv: RowConverter,
    schema: SchemaRef,
    text: String,
}

struct Session<'a> {
    start: i64,
    last: i64,
    rows: Vec<(&'a [u8], i64)>,
}

impl SessionAggregate {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        keys: Vec<Arc<dyn PhysicalExpr>>,
        key_types: Vec<DataType>,
        ts: Arc<dyn PhysicalExpr>,
        gap_us: i64,
        aggs: Vec<AggSpec>,
        layout: Vec<Slot>,
        input_schema: SchemaRef,
        schema: SchemaRef,
        window: &crate::plan::view::WindowOptions,
        text: String,
    ) -> Result<Self> {
        let fields = |s: &SchemaRef| -> Vec<SortField> {
            s.fields()
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect()
        };
        Ok(SessionAggregate {
            keys,
            key_conv: RowConverter::new(key_types.into_iter().map(SortField::new).collect())?,
            ts,
            gap_us,
            aggs,
            row_conv: RowConverter::new(fields(&input_schema))?,
            input_schema,
            layout,
            lateness_us: window.lateness_us,
            emit_on_close: window.emit_on_close,
            correct: window.correct,
            watermark: None,
            rows: FastMap::default(),
            emitted: FastMap::default(),
            dirty: FastSet::default(),
            deadlines: BTreeMap::new(),
            next_deadline: FastMap::default(),
            out_conv: RowConverter::new(fields(&schema))?,
            schema,
            text,
        })
    }

    /// Register when `key` next needs a look: the earliest future end of one of its
    /// sessions (closing it under EMIT ON WINDOW CLOSE) or end + lateness (freeing it).
    fn schedule(&mut self, key: &[u8], wm: Option<i64>) {
        let Some(rows) = self.rows.get(key) else {
            return;
        };
        let mut next: Option<i64> = None;
        let mut consider = |t: i64| {
            if wm.is_none_or(|w| t > w) {
                next = Some(next.map_or(t, |n: i64| n.min(t)));
            }
        };
        let mut prev: Option<i64> = None;
        for ((t, _), _) in rows.iter() {
            if let Some(p) = prev
                && *t - p >= self.gap_us
            {
                let end = p + self.gap_us;
                consider(end);
                consider(end.saturating_add(self.lateness_us));
            }
            prev = Some(*t);
        }
        if let Some(p) = prev {
            let end = p + self.gap_us;
            consider(end);
            consider(end.saturating_add(self.lateness_us));
        }
        let Some(d) = next else { return };
        if self.next_deadline.get(key).is_some_and(|cur| *cur <= d) {
            return;
        }
        self.next_deadline.insert(key.into(), d);
        self.deadlines.entry(d).or_default().push(key.into());
    }

    fn sessions<'a>(&self, rows: &'a KeyRows) -> Vec<Session<'a>> {
        let mut out: Vec<Session<'a>> = Vec::new();
        for ((t, row), count) in rows {
            if *count <= 0 {
                continue;
            }
            match out.last_mut() {
                Some(s) if *t - s.last < self.gap_us => {
                    s.last = *t;
                    s.rows.push((row, *count));
                }
                _ => out.push(Session {
                    start: *t,
                    last: *t,
                    rows: vec![(row, *count)],
                }),
            }
        }
        out
    }

    /// One output row per session of `key`, with each session's end.
    fn output_rows(&self, key: &[u8], sessions: &[Session]) -> Result<Vec<(i64, Box<[u8]>)>> {
        if sessions.is_empty() {
            return Ok(Vec::new());
        }
        let n = sessions.len();
        let parser = self.key_conv.parser();
        let key_cols = if self.keys.is_empty() {
            Vec::new()
        } else {
            self.key_conv
                .convert_rows(std::iter::once(parser.parse(key)))?
        };
        let row_parser = self.row_conv.parser();
        let mut agg_values: Vec<Vec<ScalarValue>> = vec![Vec::with_capacity(n); self.aggs.len()];
        for s in sessions {
            let mut expanded: Vec<&[u8]> = Vec::new();
            for (r, c) in &s.rows {
                for _ in 0..*c {
                    expanded.push(r);
                }
            }
            let cols = self
                .row_conv
                .convert_rows(expanded.iter().map(|r| row_parser.parse(r)))?;
            let batch = RecordBatch::try_new_with_options(
                self.input_schema.clone(),
                cols,
                &RecordBatchOptions::new().with_row_count(Some(expanded.len())),
            )?;
            for (a, spec) in self.aggs.iter().enumerate() {
                let mut batch = batch.clone();
                if let Some(f) = &spec.filter {
                    let m = evaluate(f, &batch)?;
                    let m = m
                        .as_any()
                        .downcast_ref::<datafusion::arrow::array::BooleanArray>()
                        .ok_or_else(|| WeirError::internal("aggregate FILTER is not boolean"))?;
                    batch = datafusion::arrow::compute::filter_record_batch(&batch, &true_mask(m))?;
                }
                let mut values = spec
                    .func
                    .expressions()
                    .iter()
                    .map(|e| evaluate(e, &batch))
                    .collect::<Result<Vec<_>>>()?;
                for o in &spec.order_by {
                    values.push(evaluate(o, &batch)?);
                }
                let mut acc = spec.func.create_accumulator()?;
                acc.update_batch(&values)?;
                agg_values[a].push(acc.evaluate()?);
            }
        }
        let fields = self.schema.fields();
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(fields.len());
        for (i, slot) in self.layout.iter().enumerate() {
            let t = fields[i].data_type();
            let a: ArrayRef = match slot {
                Slot::Key(k) => {
                    let idx = datafusion::arrow::array::UInt32Array::from(vec![0u32; n]);
                    datafusion::arrow::compute::take(&key_cols[*k], &idx, None)?
                }
                Slot::Start => Arc::new(TimestampMicrosecondArray::from_iter_values(
                    sessions.iter().map(|s| s.start),
                )),
                Slot::End => Arc::new(TimestampMicrosecondArray::from_iter_values(
                    sessions.iter().map(|s| s.last + self.gap_us),
                )),
            };
            cols.push(if a.data_type() != t { cast(&a, t)? } else { a });
        }
        for (a, values) in agg_values.into_iter().enumerate() {
            let t = fields[self.layout.len() + a].data_type();
            let arr = ScalarValue::iter_to_array(values)?;
            cols.push(if arr.data_type() != t {
                cast(&arr, t)?
            } else {
                arr
            });
        }
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        let rows = self.out_conv.convert_columns(batch.columns())?;
        Ok(sessions
            .iter()
            .enumerate()
            .map(|(i, s)| (s.last + self.gap_us, rows.row(i).data().into()))
            .collect())
    }

    fn batch_of(&self, rows: &[Box<[u8]>]) -> Result<RecordBatch> {
        let parser = self.out_conv.parser();
        let cols = self
            .out_conv
            .convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )?)
    }
}

impl Operator for SessionAggregate {
    fn name(&self) -> &'static str {
        "SessionAggregate"
    }

    fn details(&self) -> String {
        self.text.clone()
    }

    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn state_rows(&self) -> usize {
        self.rows.values().map(|r| r.len()).sum()
    }

    fn on_changes(&mut self, _port: usize, input: Changelog) -> Result<Vec<Changelog>> {
        if input.is_empty() {
            return Ok(vec![]);
        }
        let batch = &input.data;
        let key_cols = self
            .keys
            .iter()
            .map(|e| evaluate(e, batch))
            .collect::<Result<Vec<_>>>()?;
        let keys = if key_cols.is_empty() {
            None
        } else {
            Some(self.key_conv.convert_columns(&key_cols)?)
        };
        let ts = evaluate(&self.ts, batch)?;
        let ts = cast(&ts, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
        let ts = ts
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .ok_or_else(|| WeirError::internal("session event time is not a timestamp"))?
            .clone();
        let rows = self.row_conv.convert_columns(batch.columns())?;
        for (i, w) in input.weights.values().iter().enumerate() {
            // a row without event time belongs to no session
            if ts.is_null(i) {
                continue;
            }
            let key: &[u8] = match &keys {
                Some(k) => k.row(i).data(),
                None => &[],
            };
            let entry = self.rows.entry(key.into()).or_default();
            let k = (ts.value(i), Box::<[u8]>::from(rows.row(i).data()));
            let c = entry.entry(k).or_insert(0);
            *c += w;
            if *c == 0 {
                entry.remove(&(ts.value(i), rows.row(i).data().into()));
            }
            if !self.dirty.contains(key) {
                self.dirty.insert(key.into());
            }
        }
        Ok(vec![])
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Vec<Changelog>> {
        self.watermark = Some(watermark);
        // keys with a session that closes or can be freed at this watermark
        let due: Vec<i64> = self
            .deadlines
            .range(..=watermark)
            .map(|(d, _)| *d)
            .collect();
        for d in due {
            for k in self.deadlines.remove(&d).unwrap_or_default() {
                if self.next_deadline.get(&k) == Some(&d) {
                    self.next_deadline.remove(&k);
                }
                self.dirty.insert(k);
            }
        }
        Ok(vec![])
    }

    fn on_epoch_end(&mut self) -> Result<Vec<Changelog>> {
        if self.dirty.is_empty() {
            return Ok(vec![]);
        }
        let dirty: Vec<Box<[u8]>> = self.dirty.drain().collect();
        let wm = self.watermark;
        let mut insert: Vec<Box<[u8]>> = Vec::new();
        let mut retract: Vec<Box<[u8]>> = Vec::new();
        for key in dirty {
            let now: Vec<(i64, Box<[u8]>)> = match self.rows.get(&key) {
                Some(rows) => {
                    let sessions = self.sessions(rows);
                    let shown: Vec<Session> = sessions
                        .into_iter()
                        .filter(|s| {
                            !self.emit_on_close || wm.is_some_and(|w| s.last + self.gap_us <= w)
                        })
                        .collect();
                    self.output_rows(&key, &shown)?
                }
                None => Vec::new(),
            };
            let old = self.emitted.remove(&key).unwrap_or_default();
            let final_only = self.emit_on_close && !self.correct;
            let mut counts: HashMap<&[u8], i64> = HashMap::new();
            for (_, r) in &now {
                *counts.entry(r).or_default() += 1;
            }
            for (_, r) in &old {
                *counts.entry(r).or_default() -= 1;
            }
            for (r, c) in counts {
                for _ in 0..c.abs() {
                    if c > 0 {
                        insert.push(r.into());
                    } else if !final_only {
                        retract.push(r.into());
                    }
                }
            }
            let mut shown = now;
            if final_only {
                // rows once shown stay shown (EOWC without 'correct' never retracts)
                for (end, r) in old {
                    if !shown.iter().any(|(_, x)| *x == r) {
                        shown.push((end, r));
                    }
                }
            }
            // free sessions no admitted row can reach: their rows leave the state, their
            // output rows stop being tracked (they stay in the view)
            if let Some(w) = wm {
                let limit = w.saturating_sub(self.lateness_us);
                if let Some(rows) = self.rows.get_mut(&key) {
                    let mut last_closed: Option<i64> = None;
                    let mut prev: Option<i64> = None;
                    for ((t, _), _) in rows.iter() {
                        if let Some(p) = prev
                            && *t - p >= self.gap_us
                            && p + self.gap_us <= limit
                        {
                            last_closed = Some(p);
                        }
                        prev = Some(*t);
                    }
                    if let Some(p) = prev
                        && p + self.gap_us <= limit
                    {
                        last_closed = Some(p);
                    }
                    if let Some(cut) = last_closed {
                        let keep = rows.split_off(&(cut + 1, Box::from(&[][..])));
                        *rows = keep;
                        shown.retain(|(end, _)| *end > cut + self.gap_us);
                    }
                    if rows.is_empty() {
                        self.rows.remove(&key);
                    }
                }
            }
            self.schedule(&key, wm);
            if !shown.is_empty() {
                self.emitted.insert(key, shown);
            }
        }
        let mut out = Vec::new();
        if !retract.is_empty() {
            out.push(Changelog::retractions(self.batch_of(&retract)?));
        }
        if !insert.is_empty() {
            out.push(Changelog::inserts(self.batch_of(&insert)?));
        }
        Ok(out)
    }
}
