//! `SessionAggregate`: GROUP BY over `SESSION(src, ts, gap)`: per grouping key, rows whose
//! event times are closer than `gap` form one session, with `window_start` = the first
//! event time and `window_end` = the last event time + gap.
//!
//! - input: one changelog stream; `window_start` of a row is its event time.
//! - output: per key changed in an epoch, the difference between the sessions it showed
//!   and the sessions it has now: an out-of-order row that bridges two sessions retracts
//!   both and emits the merged one; a deleted row can split one. Each session's aggregates
//!   are computed by fresh DataFusion accumulators over the session's rows.
//! - state (state tables): `rows`: key ++ event time (order-preserving) ++ row ->
//!   multiplicity, so a prefix scan reads a key's rows in event-time order; `emitted`
//!   (`emitted.rs`): per key, session end ++ output row; `deadlines` (deadline ++ key) and
//!   `next_deadline` (key -> deadline).
//! - watermark: a session is closed when the watermark reaches its end. With EMIT ON WINDOW
//!   CLOSE only closed sessions are emitted. Rows of sessions whose end + allowed lateness
//!   is below the watermark are freed (their output stays in the view). Each key registers
//!   the next time it needs a look (a session end, or end + lateness), so a watermark step
//!   revisits only the keys with a session due, not every key.
//! - checkpoint: the four tables.

use std::ops::Bound;
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
use crate::operators::emitted::{Diff, Emitted};
use crate::operators::event_rows::EventRows;
use crate::operators::{Operator, evaluate, true_mask};
use crate::state::state_table::{StateTable, i64_key};

/// Where each output column of a group key comes from.
#[derive(Debug, Clone, Copy)]
pub enum Slot {
    /// The i-th non-window grouping key.
    Key(usize),
    Start,
    End,
}

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
    /// Rows per key in event-time order, the keys changed in this epoch, and when a key
    /// next needs a look as the watermark moves (a session of it closes under EMIT ON
    /// WINDOW CLOSE, or can be freed).
    state: EventRows,
    /// Output rows shown per key, each as session end ++ row.
    emitted: Emitted,
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
        window: &crate::operators::WindowOptions,
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
            state: EventRows::new(),
            emitted: Emitted::new(),
            out_conv: RowConverter::new(fields(&schema))?,
            schema,
            text,
        })
    }

    /// Register when `key` next needs a look: the earliest future end of one of its
    /// sessions (closing it under EMIT ON WINDOW CLOSE) or end + lateness (freeing it).
    fn schedule(&mut self, key: &[u8], wm: Option<i64>) {
        let mut next: Option<i64> = None;
        let mut consider = |t: i64| {
            if wm.is_none_or(|w| t > w) {
                next = Some(next.map_or(t, |n: i64| n.min(t)));
            }
        };
        let mut prev: Option<i64> = None;
        self.state.rows.fetch_prefix(key);
        for (t, _, _) in self.state.key_rows(key) {
            if let Some(p) = prev
                && t - p >= self.gap_us
            {
                let end = p + self.gap_us;
                consider(end);
                consider(end.saturating_add(self.lateness_us));
            }
            prev = Some(t);
        }
        if let Some(p) = prev {
            let end = p + self.gap_us;
            consider(end);
            consider(end.saturating_add(self.lateness_us));
        }
        if let Some(d) = next {
            self.state.register(key, d, wm);
        }
    }

    fn sessions<'a>(&'a self, key: &'a [u8]) -> Vec<Session<'a>> {
        let mut out: Vec<Session<'a>> = Vec::new();
        for (t, row, count) in self.state.key_rows(key) {
            if count <= 0 {
                continue;
            }
            match out.last_mut() {
                Some(s) if t - s.last < self.gap_us => {
                    s.last = t;
                    s.rows.push((row, count));
                }
                _ => out.push(Session {
                    start: t,
                    last: t,
                    rows: vec![(row, count)],
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
}

impl Operator for SessionAggregate {
    fn name(&self) -> &'static str {
        "SessionAggregate"
    }

    fn sharding(&self, _port: usize) -> crate::operators::Sharding {
        crate::operators::Sharding::by(&self.keys)
    }

    fn details(&self) -> String {
        self.text.clone()
    }

    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn state_rows(&self) -> usize {
        self.state.rows.len()
    }

    fn state_tables(&mut self) -> Vec<&mut StateTable> {
        vec![
            &mut self.state.rows,
            self.emitted.state_table(),
            &mut self.state.deadlines,
            &mut self.state.next_deadline,
        ]
    }

    fn on_changes(&mut self, _port: usize, input: Changelog) -> Result<Vec<Changelog>> {
        if input.is_empty() {
            return Ok(vec![]);
        }
        let batch = &input.data;
        let keys = crate::operators::key_rows(&self.keys, &self.key_conv, batch)?;
        let ts = evaluate(&self.ts, batch)?;
        let ts = cast(&ts, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
        let ts = ts
            .as_any()
            .downcast_ref::<TimestampMicrosecondArray>()
            .ok_or_else(|| WeirError::internal("session event time is not a timestamp"))?
            .clone();
        let rows = self.row_conv.convert_columns(batch.columns())?;
        // a row without event time belongs to no session
        self.state
            .add(keys.as_ref(), &ts, &rows, input.weights.values());
        Ok(vec![])
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Vec<Changelog>> {
        self.watermark = Some(watermark);
        // keys with a session that closes or can be freed at this watermark
        self.state.due(watermark);
        Ok(vec![])
    }

    fn on_epoch_end(&mut self) -> Result<Vec<Changelog>> {
        let dirty = self.state.take_dirty();
        if dirty.is_empty() {
            return Ok(vec![]);
        }
        let wm = self.watermark;
        let final_only = self.emit_on_close && !self.correct;
        let mut diff = Diff::default();
        for key in dirty {
            let now: Vec<(i64, Box<[u8]>)> = {
                self.state.rows.fetch_prefix(&key);
                let sessions = self.sessions(&key);
                let shown: Vec<Session> = sessions
                    .into_iter()
                    .filter(|s| {
                        !self.emit_on_close || wm.is_some_and(|w| s.last + self.gap_us <= w)
                    })
                    .collect();
                self.output_rows(&key, &shown)?
            };
            // what the key shows: session end ++ row, so ended sessions can be dropped by
            // range; under EOWC without 'correct', rows once shown stay shown (never
            // retracted)
            let mut shown: Vec<Vec<u8>> = now
                .iter()
                .map(|(end, r)| {
                    let mut v = i64_key(*end).to_vec();
                    v.extend_from_slice(r);
                    v
                })
                .collect();
            if final_only {
                let old: Vec<Vec<u8>> = self
                    .emitted
                    .rows(&key)
                    .filter(|(r, _)| !now.iter().any(|(_, x)| x.as_ref() == &r[8..]))
                    .flat_map(|(r, c)| std::iter::repeat_n(r.to_vec(), c.max(0) as usize))
                    .collect();
                shown.extend(old);
            }
            let refs: Vec<&[u8]> = shown.iter().map(|v| v.as_slice()).collect();
            self.emitted.replace(&key, &refs, &mut diff);
            // free sessions no admitted row can reach: their rows leave the state, their
            // output rows stop being tracked (they stay in the view)
            if let Some(w) = wm {
                let limit = w.saturating_sub(self.lateness_us);
                let mut last_closed: Option<i64> = None;
                let mut prev: Option<i64> = None;
                self.state.rows.fetch_prefix(&key);
                for (t, _, _) in self.state.key_rows(&key) {
                    if let Some(p) = prev
                        && t - p >= self.gap_us
                        && p + self.gap_us <= limit
                    {
                        last_closed = Some(p);
                    }
                    prev = Some(t);
                }
                if let Some(p) = prev
                    && p + self.gap_us <= limit
                {
                    last_closed = Some(p);
                }
                if let Some(cut) = last_closed {
                    let mut hi = key.to_vec();
                    hi.extend_from_slice(&i64_key(cut.saturating_add(1)));
                    self.state
                        .rows
                        .delete_range((Bound::Included(&key[..]), Bound::Excluded(&hi[..])));
                    self.emitted
                        .forget_before(&key, &i64_key((cut + self.gap_us).saturating_add(1)));
                }
            }
            self.schedule(&key, wm);
        }
        // the shown rows carry their session end in front
        let strip = |rows: Vec<Box<[u8]>>| -> Vec<Box<[u8]>> {
            rows.into_iter().map(|r| r[8..].into()).collect()
        };
        let diff = Diff {
            retract: strip(diff.retract),
            insert: strip(diff.insert),
        };
        diff.into_changelogs(&self.out_conv, &self.schema)
    }
}
