//! Where a Kafka source instance's rows go (a view's private relation, or a keyed table fed
//! by a changelog topic) and how a batch of messages becomes rows there: decode, refuse
//! what does not decode (dead letters), add INCLUDEd columns, advance per-partition event
//! time and the watermark, hand over.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::{
    Array, ArrayRef, BinaryBuilder, Int32Builder, Int64Builder, TimestampMicrosecondArray,
    TimestampMicrosecondBuilder,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::record_batch::RecordBatch;
use tokio::sync::mpsc;

use super::options::{Include, OnError};
use super::poll::{Instance, Pending};
use crate::connectors::runner::{BATCHES_PER_BARRIER, send_batch, wait_for_views};
use crate::connectors::upsert::{ChangeDecoder, KeyValue};
use crate::dataflow::journal::{Entry, Run};
use crate::dataflow::position::{PartPosition, Position};
use crate::dataflow::runtime::Msg;
use crate::dataflow::watermark::advance;
use crate::error::Result;
use crate::sql::types::schema_of;
use crate::state::table::{Change, TableStore, offset_key};

/// Where an instance's rows go.
pub(super) enum Target {
    /// A view's private relation in the dataflow.
    View {
        tx: mpsc::Sender<Msg>,
        instance: u32,
    },
    /// A keyed table (`FORMAT UPSERT | DEBEZIUM`): operations applied with the offsets
    /// in one commit.
    Table {
        table: Arc<TableStore>,
        decoder: ChangeDecoder,
        stop: Arc<AtomicBool>,
    },
}

impl Instance {
    /// Decode the pending messages and hand the rows to the dataflow. `journaled`: the
    /// batch re-forms this journal entry (its watermarks are the recorded ones); otherwise
    /// it is journaled before it goes.
    pub(super) fn hand_over(
        &mut self,
        pending: &mut Pending,
        journaled: Option<&Entry>,
    ) -> std::result::Result<(), String> {
        if matches!(self.target, Target::Table { .. }) {
            return self.apply_to_table(pending);
        }
        let runs = match (&self.journal, journaled) {
            (Some(_), None) => Entry::runs_of(pending.meta.iter().map(|m| (m.partition, m.offset))),
            _ => Vec::new(),
        };
        if let Some(e) = journaled {
            self.watermark = e.before;
        }
        let values: Vec<Option<&[u8]>> = pending
            .meta
            .iter()
            .map(|m| pending.slice(m.value))
            .collect();
        let decoded = self.spec.decoder.decode(&values);
        self.refuse(&decoded.errors, pending)?;
        self.note_offsets(pending);
        let mut batch = self
            .with_includes(&decoded.batch, &decoded.rows, pending)
            .map_err(|e| e.message)?;
        let mut rows = decoded.rows.clone();
        // a record without an event time has no place in event time: a dead letter
        if let Some(col) = self.watermark_spec.map(|w| w.column)
            && batch.column(col).null_count() > 0
        {
            let ts = batch.column(col).clone();
            let name = self
                .spec
                .columns
                .get(col)
                .map(|c| c.name.clone())
                .unwrap_or_default();
            let errors: Vec<(usize, String)> = rows
                .iter()
                .enumerate()
                .filter(|(r, _)| ts.is_null(*r))
                .map(|(_, i)| {
                    (
                        *i,
                        format!("event-time column \"{name}\" is NULL: the record has no place in event time"),
                    )
                })
                .collect();
            self.refuse(&errors, pending)?;
            let keep = datafusion::arrow::array::BooleanArray::from(
                (0..ts.len()).map(|r| ts.is_valid(r)).collect::<Vec<_>>(),
            );
            batch = datafusion::arrow::compute::filter_record_batch(&batch, &keep)
                .map_err(|e| e.to_string())?;
            rows = rows
                .iter()
                .enumerate()
                .filter(|(r, _)| ts.is_valid(*r))
                .map(|(_, i)| *i)
                .collect();
        }
        // per-partition event time, then the combined watermark
        let before = self.watermark;
        if let Some(spec) = self.watermark_spec
            && let Some(ts) = batch
                .column(spec.column)
                .as_any()
                .downcast_ref::<TimestampMicrosecondArray>()
        {
            for (r, i) in rows.iter().enumerate() {
                if ts.is_valid(r) {
                    let part = pending.meta[*i].partition;
                    if let Some(p) = self.partitions.get_mut(&part) {
                        let t = ts.value(r);
                        p.progress.max_event_time = advance(p.progress.max_event_time, Some(t));
                        p.progress.watermark = p.progress.max_event_time.map(|m| spec.bound(m));
                    }
                }
            }
            self.advance_watermark(spec);
        }
        match journaled {
            // the watermark moved as it did then (idleness is wall-clock time)
            Some(e) => self.watermark = e.after,
            None => self.record(runs, before)?,
        }
        for i in &rows {
            if let Some(p) = self.partitions.get_mut(&pending.meta[*i].partition) {
                p.progress.rows += 1;
            }
        }
        pending.clear();
        let n = batch.num_rows() as u64;
        if n > 0 || self.watermark != before {
            self.send(batch, before)?;
            self.batches += 1;
            self.rows += n;
            self.progress.rows.store(self.rows, Ordering::Release);
            if let Some(w) = self.watermark {
                self.progress.watermark.store(w, Ordering::Release);
            }
            if let Target::View { tx, .. } = &self.target
                && self.batches.is_multiple_of(BATCHES_PER_BARRIER)
                && !wait_for_views(tx)
            {
                return Err("the dataflow worker has stopped".into());
            }
        }
        Ok(())
    }

    /// Where the instance stands (after what it has handed over).
    pub(super) fn position(&self) -> Position {
        Position(
            self.partitions
                .values()
                .map(|p| PartPosition {
                    partition: p.progress.partition,
                    // not started yet (the startup mode's position is not known or not
                    // reached): a restore applies the startup mode again
                    next: if p.skip_below == Some(None) || p.skip_before_ms.is_some() {
                        -1
                    } else {
                        p.progress.offset
                    },
                    max_event_time: p.progress.max_event_time,
                })
                .collect(),
        )
    }

    /// Journal a batch about to be handed over (its messages, the watermark before it and
    /// now), fsynced, so recovery can re-form it (see `dataflow/journal.rs`).
    pub(super) fn record(
        &mut self,
        runs: Vec<Run>,
        before: Option<i64>,
    ) -> std::result::Result<(), String> {
        let entry = Entry {
            runs,
            before,
            after: self.watermark,
            position: self.position(),
        };
        let Some(j) = &mut self.journal else {
            return Ok(());
        };
        // the store cannot take it (a full disk): wait for space, as table writes do,
        // rather than fail the source; the batch goes once it is journaled
        let mut waited = false;
        let (source, view, progress) = (&self.source, &self.view, &self.progress);
        j.append_waiting(&entry, std::time::Duration::from_secs(1), |e| {
            if !waited {
                waited = true;
                tracing::warn!(source = %source, view = %view, error = %e, "cannot write the input journal; waiting");
                *progress.status.lock() =
                    format!("waiting: cannot write the input journal: {}", e.message);
            }
        })
        .map_err(|e| format!("cannot write the input journal: {}", e.message))?;
        if waited {
            self.set_status("running");
        }
        Ok(())
    }

    /// Tell the view the watermark moved without rows.
    pub(super) fn send_watermark(&self, before: Option<i64>) -> std::result::Result<(), String> {
        let empty = RecordBatch::new_empty(schema_of(
            self.spec
                .columns
                .iter()
                .map(|c| (c.name.as_str(), &c.ty, c.nullable)),
        ));
        self.send(empty, before)
    }

    /// Hand rows to the view (with the watermark before and after them).
    pub(super) fn send(
        &self,
        batch: RecordBatch,
        before: Option<i64>,
    ) -> std::result::Result<(), String> {
        match &self.target {
            Target::View { tx, instance } => {
                let position = self.position();
                if send_batch(
                    tx,
                    *instance,
                    batch,
                    before,
                    self.watermark,
                    position.clone(),
                ) {
                    if let Some(crate::connectors::runner::Share::Reader(r)) = &self.share {
                        r.published(&position);
                    }
                    Ok(())
                } else {
                    Err("the dataflow worker has stopped".into())
                }
            }
            Target::Table { .. } => Ok(()),
        }
    }

    /// Records that did not decode: to the dead letters, or the end of the instance under
    /// `on_error = 'fail'`.
    pub(super) fn refuse(
        &mut self,
        errors: &[(usize, String)],
        pending: &Pending,
    ) -> std::result::Result<(), String> {
        for (i, err) in errors {
            let m = &pending.meta[*i];
            if self.spec.options.on_error == OnError::Fail {
                return Err(format!(
                    "cannot decode the record at topic \"{}\" partition {} offset {}: {err}",
                    self.spec.options.topic, m.partition, m.offset
                ));
            }
            if self.dead.record(
                &self.source,
                m.partition,
                m.offset,
                pending.slice(m.value),
                err.clone(),
            ) {
                self.progress.dead_letters.fetch_add(1, Ordering::AcqRel);
            }
            if let Some(p) = self.partitions.get_mut(&m.partition) {
                p.progress.dead_letters += 1;
            }
        }
        Ok(())
    }

    /// Offsets read (also past refused records).
    pub(super) fn note_offsets(&mut self, pending: &Pending) {
        for m in &pending.meta {
            if let Some(p) = self.partitions.get_mut(&m.partition) {
                p.progress.offset = p.progress.offset.max(m.offset + 1);
            }
        }
    }

    /// Decode the pending messages as keyed operations and apply them to the table, with
    /// the partitions' next offsets in the same commit.
    pub(super) fn apply_to_table(
        &mut self,
        pending: &mut Pending,
    ) -> std::result::Result<(), String> {
        let Target::Table { decoder, .. } = &self.target else {
            return Ok(());
        };
        let messages: Vec<KeyValue<'_>> = pending
            .meta
            .iter()
            .map(|m| (pending.slice(m.key), pending.slice(m.value)))
            .collect();
        let decoded = decoder.decode(&messages);
        self.refuse(&decoded.errors, pending)?;
        self.note_offsets(pending);
        let mut extra = Vec::new();
        let mut touched: Vec<i32> = pending.meta.iter().map(|m| m.partition).collect();
        touched.sort_unstable();
        touched.dedup();
        let Target::Table { table, stop, .. } = &self.target else {
            return Ok(());
        };
        for p in touched {
            if let Some(s) = self.partitions.get(&p) {
                extra.push((
                    offset_key(table.oid, p),
                    s.progress.offset.to_be_bytes().to_vec(),
                ));
            }
        }
        let n = decoded.order.len() as u64;
        {
            // serialized with DML, backfills and DROP TABLE
            let _writer = table.writer.blocking_lock();
            if stop.load(Ordering::Acquire) {
                pending.clear();
                return Ok(());
            }
            table
                .apply_with(
                    Change::Upsert {
                        upserts: decoded.upserts,
                        deletes: decoded.deletes,
                        order: decoded.order,
                    },
                    extra,
                )
                .map_err(|e| {
                    format!("cannot apply to table \"{}\": {}", table.name(), e.message)
                })?;
        }
        for m in &pending.meta {
            if let Some(p) = self.partitions.get_mut(&m.partition) {
                p.progress.rows += 1;
            }
        }
        pending.clear();
        self.batches += 1;
        self.rows += n;
        self.progress.rows.store(self.rows, Ordering::Release);
        Ok(())
    }

    /// The decoded value columns plus the INCLUDEd metadata columns.
    pub(super) fn with_includes(
        &self,
        values: &RecordBatch,
        rows: &[usize],
        pending: &Pending,
    ) -> Result<RecordBatch> {
        let mut cols: Vec<ArrayRef> = values.columns().to_vec();
        for (kind, _) in &self.spec.options.includes {
            let a: ArrayRef = match kind {
                Include::Partition => {
                    let mut b = Int32Builder::with_capacity(rows.len());
                    for i in rows {
                        b.append_value(pending.meta[*i].partition);
                    }
                    Arc::new(b.finish())
                }
                Include::Offset => {
                    let mut b = Int64Builder::with_capacity(rows.len());
                    for i in rows {
                        b.append_value(pending.meta[*i].offset);
                    }
                    Arc::new(b.finish())
                }
                Include::Key => {
                    let mut b = BinaryBuilder::with_capacity(rows.len(), rows.len() * 8);
                    for i in rows {
                        match pending.slice(pending.meta[*i].key) {
                            Some(k) => b.append_value(k),
                            None => b.append_null(),
                        }
                    }
                    Arc::new(b.finish())
                }
                Include::Timestamp => {
                    let mut b = TimestampMicrosecondBuilder::with_capacity(rows.len());
                    for i in rows {
                        match pending.meta[*i].timestamp {
                            Some(ms) => b.append_value(ms.saturating_mul(1000)),
                            None => b.append_null(),
                        }
                    }
                    let a: ArrayRef = Arc::new(b.finish());
                    cast(&a, &Include::Timestamp.sql_type().arrow_type())?
                }
            };
            cols.push(a);
        }
        let schema = schema_of(
            self.spec
                .columns
                .iter()
                .map(|c| (c.name.as_str(), &c.ty, c.nullable)),
        );
        Ok(RecordBatch::try_new(schema, cols)?)
    }
}
