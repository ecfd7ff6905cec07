//! `MatchRecognize`: `src MATCH_RECOGNIZE (PARTITION BY k ORDER BY ts MEASURES ... ONE ROW
//! PER MATCH [AFTER MATCH SKIP ...] PATTERN (...) [WITHIN interval] DEFINE ...)`
//! (`plan/match_recognize.rs` has the SQL and the semantics): per partition, the rows in
//! `ts` order (ties by the row's bytes) are scanned for matches of the pattern, one output
//! row of measures per match.
//!
//! - input: one changelog stream (inserts; over tables also deletes).
//! - output: per partition changed in an epoch, the difference between the match rows it
//!   showed and the ones it has now (each match row carries its match number in front).
//!   Without a watermark every row counts and the output always equals the query over the
//!   input (a delete or an out-of-order row re-scans the partition, so its matches can
//!   change). With one (the ORDER BY column is the view's watermarked column and the input
//!   only inserts), only rows no admitted row can precede are scanned (`ts < watermark -
//!   allowed_lateness`; with `late_events = 'correct'`: `ts < watermark`, and an admitted
//!   late row that makes or breaks a match retracts / emits its rows): a match is emitted
//!   once the rows that decide it are final, so under `drop` the output only inserts.
//! - matching: a backtracking run of the compiled pattern ([`Inst`]) from each start row
//!   in order, greedy quantifiers and the leftmost alternative preferred, as the SQL
//!   standard orders matches. A run that needs a row not final yet waits (the scan stops
//!   there until the watermark moves). `WITHIN` bounds a match to rows with `ts <
//!   first ts + interval`; `$` matches where no further row of the partition is within
//!   that bound, so `PATTERN (a quiet* $) WITHIN INTERVAL '2 days'` finds an `a` that no
//!   row breaking `quiet` followed within 2 days (an absence, emitted when the watermark
//!   passes the bound). DEFINE conditions over the current row (and `PREV`) are evaluated
//!   once per batch over Arrow columns; those with `FIRST`/`LAST` per step.
//! - state (state tables): `rows`, `deadlines`, `next_deadline` as `event_rows.rs` keeps
//!   them (partition ++ ts ++ row -> multiplicity; when a partition next needs a look);
//!   `progress`: partition -> rows kept only as `PREV` context before the
//!   next start row, matches before it; `emitted` (`emitted.rs`): match number ++ output
//!   row.
//! - watermark: rows before a point where a scan decided by rows below `watermark -
//!   allowed_lateness` alone restarted (no match spans it) are freed (but the `PREV`
//!   context), and their
//!   matches stop being tracked (they stay in the view). Each partition registers the
//!   watermark at which it next needs a look (its first row not yet final, the `WITHIN`
//!   bound of a waiting run), so a watermark step revisits only those partitions.
//! - checkpoint: the five tables.

use std::ops::Bound;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, Int64Array, StringArray, UInt32Array,
};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::changelog::Changelog;
use crate::error::{Result, WeirError, sqlstate};
use crate::operators::aggregate::AggSpec;
use crate::operators::emitted::{Diff, Emitted};
use crate::operators::event_rows::EventRows;
use crate::operators::{Operator, evaluate, true_mask};
use crate::state::state_table::{StateTable, TableDecl, i64_key};

const PROGRESS: TableDecl = TableDecl {
    name: "progress",
    key: "partition",
    value: "context rows kept (u32 LE) ++ matches before the next start (i64 LE)",
    ordered: false,
};
/// Backtracking steps one start row may take before the pattern is refused as too costly.
const STEP_BUDGET: usize = 10_000_000;

/// One instruction of a compiled pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Inst {
    /// The row at the position is classified as this variable if its DEFINE holds.
    Var(u16),
    /// Try the first branch; on failure the second.
    Split(usize, usize),
    Jmp(usize),
    /// `$`: no further row of the partition within the match's bound.
    End,
    Match,
}

/// Which row a column reference reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RowRef {
    /// The row being classified (DEFINE only).
    Current,
    /// The first row classified as the variable (None: of the match).
    First(Option<u16>),
    /// The last row classified as the variable (None: of the match).
    Last(Option<u16>),
}

/// A column of a row chosen by position in the match, `back` rows before it (`PREV`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ColRef {
    pub row: RowRef,
    pub back: usize,
    pub col: usize,
}

/// A variable's DEFINE: a predicate over the input columns followed by its references.
pub struct Define {
    pub expr: Arc<dyn PhysicalExpr>,
    pub refs: Vec<ColRef>,
    /// Reads only the current row and rows before it (`PREV`): evaluated per batch.
    pub per_batch: bool,
    pub schema: SchemaRef,
}

/// What a measure expression reads, one column each.
pub enum MeasureRef {
    Col(ColRef),
    /// An aggregate over the match's rows of a variable (None: all of them).
    Agg {
        var: Option<u16>,
        spec: AggSpec,
    },
    MatchNumber,
    Classifier,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Skip {
    PastLastRow,
    ToNextRow,
    /// To the first / last row classified as the variable; the row after the match's
    /// first when that would not move forward (the standard raises an error there, which
    /// would stop a view).
    ToFirst(u16),
    ToLast(u16),
}

/// The compiled `MATCH_RECOGNIZE`, shared by the view operator and the one-shot query.
pub struct Recognizer {
    pub partition: Vec<Arc<dyn PhysicalExpr>>,
    pub partition_types: Vec<DataType>,
    /// The ORDER BY column (times as i64: µs for timestamps and dates).
    pub time: Arc<dyn PhysicalExpr>,
    pub within: Option<i64>,
    pub vars: Vec<String>,
    pub program: Vec<Inst>,
    pub defines: Vec<Option<Define>>,
    pub refs: Vec<MeasureRef>,
    pub refs_schema: SchemaRef,
    pub measures: Vec<Arc<dyn PhysicalExpr>>,
    pub skip: Skip,
    pub input_schema: SchemaRef,
    /// Partition columns, then measures.
    pub output_schema: SchemaRef,
    /// The most rows `PREV` reaches back.
    pub max_back: usize,
    pub uses_match_number: bool,
    pub text: String,
}

/// A match: rows `start..end`, each classified.
#[derive(Debug, Clone)]
pub struct Match {
    pub start: usize,
    pub end: usize,
    pub classes: Vec<u16>,
}

enum Outcome {
    Found(usize, Vec<u16>),
    None,
    /// The run needs a row that is not final yet.
    Wait,
}

/// The result of scanning one partition.
pub struct Scan {
    pub matches: Vec<Match>,
    /// Start rows the scan tried, in order (the rows it resumed at after each step).
    pub landings: Vec<usize>,
    /// A start row whose run waits for rows not final yet.
    pub waiting: Option<usize>,
}

/// One partition's rows in order, and what is known about them.
pub struct Rows<'a> {
    pub batch: &'a RecordBatch,
    pub ts: &'a [i64],
    /// Rows `..final_end` are final: no row will come before them.
    pub final_end: usize,
    /// None: every row is here (nothing more comes). Some(f): rows still to come have
    /// `ts >= f`.
    pub frontier: Option<i64>,
}

impl Rows<'_> {
    fn in_bound(&self, within: Option<i64>, start: usize, pos: usize) -> bool {
        within.is_none_or(|w| self.ts[pos] - self.ts[start] < w)
    }

    /// Whether no row still to come can be within the bound of a match from `start`.
    fn closed(&self, within: Option<i64>, start: usize) -> bool {
        match (self.frontier, within) {
            (None, _) => true,
            (Some(f), Some(w)) => f >= self.ts[start].saturating_add(w),
            (Some(_), None) => false,
        }
    }
}

impl Recognizer {
    /// Times of a batch as i64 (µs for timestamps and dates), with NULLs.
    pub fn times(&self, batch: &RecordBatch) -> Result<Int64Array> {
        crate::operators::asof_join::times(&evaluate(&self.time, batch)?)
    }

    /// Evaluate the DEFINEs that read only the current row and rows before it, once
    /// for the whole partition.
    fn per_batch(&self, batch: &RecordBatch) -> Result<Vec<Option<BooleanArray>>> {
        self.defines
            .iter()
            .map(|d| match d {
                Some(d) if d.per_batch => {
                    let ctx = context(batch, &d.schema, &d.refs, |r, i| i.checked_sub(r.back))?;
                    let m = evaluate(&d.expr, &ctx)?;
                    let m = m
                        .as_any()
                        .downcast_ref::<BooleanArray>()
                        .ok_or_else(|| WeirError::internal("DEFINE is not boolean"))?;
                    Ok(Some(true_mask(m)))
                }
                _ => Ok(None),
            })
            .collect()
    }

    /// Whether row `pos` is classified as `var` after rows `start..pos` got `classes`.
    fn holds(
        &self,
        rows: &Rows,
        pre: &[Option<BooleanArray>],
        var: u16,
        start: usize,
        pos: usize,
        classes: &[u16],
    ) -> Result<bool> {
        let v = var as usize;
        let Some(d) = &self.defines[v] else {
            return Ok(true);
        };
        if let Some(m) = &pre[v] {
            return Ok(m.value(pos));
        }
        let idx: Vec<Option<u32>> = d
            .refs
            .iter()
            .map(|r| resolve(r, start, classes, Some((pos, var))).map(|i| i as u32))
            .collect();
        let one = rows.batch.slice(pos, 1);
        let mut cols: Vec<ArrayRef> = one.columns().to_vec();
        for (r, i) in d.refs.iter().zip(idx) {
            cols.push(take(
                rows.batch.column(r.col),
                &UInt32Array::from(vec![i]),
                None,
            )?);
        }
        let ctx = RecordBatch::try_new_with_options(
            d.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        let m = evaluate(&d.expr, &ctx)?;
        let m = m
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| WeirError::internal("DEFINE is not boolean"))?;
        Ok(m.is_valid(0) && m.value(0))
    }

    /// The preferred match starting at `start`, if the final rows decide it.
    fn run(&self, rows: &Rows, pre: &[Option<BooleanArray>], start: usize) -> Result<Outcome> {
        let mut stack: Vec<(usize, usize)> = Vec::new();
        let mut classes: Vec<u16> = Vec::new();
        let (mut pc, mut pos) = (0usize, start);
        let mut steps = 0usize;
        loop {
            steps += 1;
            if steps > STEP_BUDGET {
                return Err(WeirError::new(
                    sqlstate::PROGRAM_LIMIT_EXCEEDED,
                    format!(
                        "MATCH_RECOGNIZE pattern needs more than {STEP_BUDGET} steps from one row: simplify the pattern or bound it with WITHIN"
                    ),
                ));
            }
            let ok = match self.program[pc] {
                Inst::Var(v) => {
                    if pos < rows.final_end {
                        rows.in_bound(self.within, start, pos)
                            && self.holds(rows, pre, v, start, pos, &classes)?
                    } else if rows.closed(self.within, start) {
                        false
                    } else {
                        return Ok(Outcome::Wait);
                    }
                }
                Inst::End => {
                    if pos < rows.final_end {
                        !rows.in_bound(self.within, start, pos)
                    } else if rows.closed(self.within, start) {
                        true
                    } else {
                        return Ok(Outcome::Wait);
                    }
                }
                Inst::Split(a, b) => {
                    stack.push((b, pos));
                    pc = a;
                    continue;
                }
                Inst::Jmp(a) => {
                    pc = a;
                    continue;
                }
                Inst::Match => return Ok(Outcome::Found(pos, classes)),
            };
            if ok {
                if let Inst::Var(v) = self.program[pc] {
                    classes.push(v);
                    pos += 1;
                }
                pc += 1;
                continue;
            }
            match stack.pop() {
                Some((p, q)) => {
                    pc = p;
                    pos = q;
                    classes.truncate(q - start);
                }
                None => return Ok(Outcome::None),
            }
        }
    }

    /// Scan a partition's rows from start row `from`.
    pub fn scan(&self, rows: &Rows, from: usize) -> Result<Scan> {
        let pre = self.per_batch(rows.batch)?;
        let mut out = Scan {
            matches: Vec::new(),
            landings: Vec::new(),
            waiting: None,
        };
        let mut s = from;
        while s < rows.final_end {
            out.landings.push(s);
            match self.run(rows, &pre, s)? {
                Outcome::Found(end, classes) => {
                    if end <= s {
                        return Err(WeirError::internal("MATCH_RECOGNIZE matched no rows"));
                    }
                    out.matches.push(Match {
                        start: s,
                        end,
                        classes,
                    });
                    let m = out.matches.last().map(|m| &m.classes);
                    let to = |found: Option<usize>| found.map_or(s + 1, |k| (s + k).max(s + 1));
                    s = match self.skip {
                        Skip::PastLastRow => end,
                        Skip::ToNextRow => s + 1,
                        Skip::ToFirst(v) => to(m.and_then(|c| c.iter().position(|x| *x == v))),
                        Skip::ToLast(v) => to(m.and_then(|c| c.iter().rposition(|x| *x == v))),
                    };
                }
                Outcome::None => s += 1,
                Outcome::Wait => {
                    out.waiting = Some(s);
                    return Ok(out);
                }
            }
        }
        out.landings.push(s);
        Ok(out)
    }

    /// One output row per match (partition columns, then measures), numbered from
    /// `number_base + 1`.
    pub fn output(
        &self,
        batch: &RecordBatch,
        matches: &[Match],
        number_base: i64,
    ) -> Result<RecordBatch> {
        let n = matches.len();
        let starts = UInt32Array::from_iter_values(matches.iter().map(|m| m.start as u32));
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.output_schema.fields().len());
        for p in &self.partition {
            cols.push(take(&evaluate(p, batch)?, &starts, None)?);
        }
        let mut refs: Vec<ArrayRef> = Vec::with_capacity(self.refs.len());
        for (r, field) in self.refs.iter().zip(self.refs_schema.fields()) {
            let a: ArrayRef = match r {
                MeasureRef::Col(c) => {
                    let idx = UInt32Array::from(
                        matches
                            .iter()
                            .map(|m| resolve(c, m.start, &m.classes, None).map(|i| i as u32))
                            .collect::<Vec<_>>(),
                    );
                    take(batch.column(c.col), &idx, None)?
                }
                MeasureRef::MatchNumber => Arc::new(Int64Array::from_iter_values(
                    (0..n as i64).map(|i| number_base + i + 1),
                )),
                MeasureRef::Classifier => {
                    Arc::new(StringArray::from_iter_values(matches.iter().map(|m| {
                        m.classes
                            .last()
                            .map_or("", |c| self.vars[*c as usize].as_str())
                    })))
                }
                MeasureRef::Agg { var, spec } => {
                    let mut values: Vec<ScalarValue> = Vec::with_capacity(n);
                    for m in matches {
                        let idx = UInt32Array::from_iter_values(
                            m.classes
                                .iter()
                                .enumerate()
                                .filter(|(_, c)| var.is_none_or(|v| **c == v))
                                .map(|(k, _)| (m.start + k) as u32),
                        );
                        let rows = datafusion::arrow::compute::take_record_batch(batch, &idx)?;
                        let args = spec
                            .func
                            .expressions()
                            .iter()
                            .map(|e| evaluate(e, &rows))
                            .collect::<Result<Vec<_>>>()?;
                        let mut acc = spec.func.create_accumulator()?;
                        acc.update_batch(&args)?;
                        values.push(acc.evaluate()?);
                    }
                    if values.is_empty() {
                        datafusion::arrow::array::new_empty_array(field.data_type())
                    } else {
                        ScalarValue::iter_to_array(values)?
                    }
                }
            };
            refs.push(if a.data_type() != field.data_type() {
                cast(&a, field.data_type())?
            } else {
                a
            });
        }
        let ctx = RecordBatch::try_new_with_options(
            self.refs_schema.clone(),
            refs,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        for (m, field) in self.measures.iter().zip(
            self.output_schema
                .fields()
                .iter()
                .skip(self.partition.len()),
        ) {
            let a = evaluate(m, &ctx)?;
            cols.push(if a.data_type() != field.data_type() {
                cast(&a, field.data_type())?
            } else {
                a
            });
        }
        Ok(RecordBatch::try_new_with_options(
            self.output_schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?)
    }
}

/// The row a reference reads, for a run from `start` whose rows so far got `classes`;
/// `current` is the row being classified and its variable (DEFINE), None in MEASURES
/// (the match is complete: `classes` covers it).
fn resolve(
    r: &ColRef,
    start: usize,
    classes: &[u16],
    current: Option<(usize, u16)>,
) -> Option<usize> {
    let at = |k: usize| start + k;
    let base = match r.row {
        RowRef::Current => current.map(|(p, _)| p),
        RowRef::First(None) => Some(start),
        RowRef::Last(None) => match current {
            Some((p, _)) => Some(p),
            None => classes.len().checked_sub(1).map(at),
        },
        RowRef::First(Some(w)) => classes
            .iter()
            .position(|c| *c == w)
            .map(at)
            .or_else(|| current.filter(|(_, v)| *v == w).map(|(p, _)| p)),
        RowRef::Last(Some(w)) => match current {
            Some((p, v)) if v == w => Some(p),
            _ => classes.iter().rposition(|c| *c == w).map(at),
        },
    }?;
    base.checked_sub(r.back)
}

/// `batch`'s columns followed by one column per reference, each row's reference
/// resolved by `row_of(reference, row)`.
fn context(
    batch: &RecordBatch,
    schema: &SchemaRef,
    refs: &[ColRef],
    row_of: impl Fn(&ColRef, usize) -> Option<usize>,
) -> Result<RecordBatch> {
    let n = batch.num_rows();
    let mut cols: Vec<ArrayRef> = batch.columns().to_vec();
    for r in refs {
        let idx = UInt32Array::from(
            (0..n)
                .map(|i| row_of(r, i).map(|x| x as u32))
                .collect::<Vec<_>>(),
        );
        cols.push(take(batch.column(r.col), &idx, None)?);
    }
    Ok(RecordBatch::try_new_with_options(
        schema.clone(),
        cols,
        &RecordBatchOptions::new().with_row_count(Some(n)),
    )?)
}

/// The view operator: see the file header.
pub struct MatchRecognize {
    rec: Recognizer,
    key_conv: RowConverter,
    row_conv: RowConverter,
    out_conv: RowConverter,
    /// Watermark mode: (allowed lateness µs, late_events = 'correct').
    event_time: Option<(i64, bool)>,
    watermark: Option<i64>,
    /// Rows per partition in time order, changed partitions, deadlines (`event_rows.rs`).
    state: EventRows,
    progress: StateTable,
    emitted: Emitted,
}

fn sort_fields(s: &SchemaRef) -> Vec<SortField> {
    s.fields()
        .iter()
        .map(|f| SortField::new(f.data_type().clone()))
        .collect()
}

impl MatchRecognize {
    pub fn new(rec: Recognizer) -> Result<Self> {
        Ok(MatchRecognize {
            key_conv: RowConverter::new(
                rec.partition_types
                    .iter()
                    .map(|t| SortField::new(t.clone()))
                    .collect(),
            )?,
            row_conv: RowConverter::new(sort_fields(&rec.input_schema))?,
            out_conv: RowConverter::new(sort_fields(&rec.output_schema))?,
            rec,
            event_time: None,
            watermark: None,
            state: EventRows::new(),
            progress: StateTable::new(PROGRESS),
            emitted: Emitted::new(),
        })
    }

    /// Scan only rows the watermark made final, and free what is settled (the ORDER BY
    /// column is the watermarked one and the input only inserts).
    pub fn by_watermark(mut self, lateness_us: i64, correct: bool) -> Self {
        self.event_time = Some((lateness_us, correct));
        self
    }

    /// Rows still to come have `ts >=` this (None: no watermark mode).
    fn frontier(&self) -> Option<i64> {
        let (lateness, correct) = self.event_time?;
        Some(match self.watermark {
            None => i64::MIN,
            Some(w) if correct => w,
            Some(w) => w.saturating_sub(lateness),
        })
    }

    /// The watermark at which rows with time `t` are scanned (`frontier > t`).
    fn due(&self, t: i64) -> i64 {
        let (lateness, correct) = self.event_time.unwrap_or((0, false));
        let l = if correct { 0 } else { lateness };
        t.saturating_add(l).saturating_add(1)
    }

    /// Re-scan one partition; add its output change to `diff`.
    fn revisit(&mut self, key: &[u8], diff: &mut Diff) -> Result<()> {
        let (ctx_kept, before) = match self.progress.get(key) {
            Some(v) if v.len() >= 12 => (
                u32::from_le_bytes(v[..4].try_into().unwrap_or_default()) as usize,
                i64::from_le_bytes(v[4..12].try_into().unwrap_or_default()),
            ),
            _ => (0, 0),
        };
        // the partition's rows, expanded by multiplicity, with the entry each came from
        self.state.rows.fetch_prefix(key);
        let mut ts: Vec<i64> = Vec::new();
        let mut entry: Vec<usize> = Vec::new();
        let mut raw: Vec<&[u8]> = Vec::new();
        for (e, (t, row, c)) in self.state.key_rows(key).enumerate() {
            for _ in 0..c.max(0) {
                ts.push(t);
                entry.push(e);
                raw.push(row);
            }
        }
        let parser = self.row_conv.parser();
        let cols = self
            .row_conv
            .convert_rows(raw.iter().map(|r| parser.parse(r)))?;
        let batch = RecordBatch::try_new_with_options(
            self.rec.input_schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(raw.len())),
        )?;
        drop(raw);
        let frontier = self.frontier();
        let final_end = match frontier {
            None => ts.len(),
            Some(f) => ts.partition_point(|t| *t < f),
        };
        let rows = Rows {
            batch: &batch,
            ts: &ts,
            final_end,
            frontier,
        };
        let from = ctx_kept.min(ts.len());
        let scan = self.rec.scan(&rows, from)?;
        let out = self.rec.output(&batch, &scan.matches, before)?;
        let out_rows = self.out_conv.convert_columns(out.columns())?;
        let shown: Vec<Vec<u8>> = (0..out.num_rows())
            .map(|i| {
                let mut v = i64_key(before + i as i64 + 1).to_vec();
                v.extend_from_slice(out_rows.row(i).data());
                v
            })
            .collect();
        let refs: Vec<&[u8]> = shown.iter().map(|v| v.as_slice()).collect();
        self.emitted.replace(key, &refs, diff);
        let Some((lateness, _)) = self.event_time else {
            return Ok(());
        };
        let Some(w) = self.watermark else {
            return Ok(());
        };
        // free up to the last restart point that no match spans, of a scan decided by rows
        // below `watermark - lateness` alone: no admitted row can come before those, or
        // inside a WITHIN bound closed by that limit. (Under 'correct' the scan above also
        // used rows up to the watermark, and a late row can still change what they decided.)
        let limit = w.saturating_sub(lateness);
        let settled_scan;
        let settled = if frontier == Some(limit) {
            &scan
        } else {
            settled_scan = self.rec.scan(
                &Rows {
                    batch: &batch,
                    ts: &ts,
                    final_end: ts.partition_point(|t| *t < limit),
                    frontier: Some(limit),
                },
                from,
            )?;
            &settled_scan
        };
        let boundary = |b: usize| b == 0 || b == ts.len() || entry[b] != entry[b - 1];
        let mut cut: Option<(usize, usize)> = None;
        let mut m = 0;
        let mut max_end = 0;
        for &b in &settled.landings {
            while m < settled.matches.len() && settled.matches[m].start < b {
                max_end = max_end.max(settled.matches[m].end);
                m += 1;
            }
            if b > from && max_end <= b && boundary(b) && ts[b - 1] < limit {
                cut = Some((b, m));
            }
        }
        if let Some((b, m)) = cut {
            let mut keep = b.saturating_sub(self.rec.max_back);
            while keep > 0 && !boundary(keep) {
                keep -= 1;
            }
            if keep >= ts.len() {
                self.state.rows.delete_prefix(key);
            } else if keep > 0 {
                // the state key of the first row kept (its row bytes encoded again)
                let one = batch.slice(keep, 1);
                let row = self.row_conv.convert_columns(one.columns())?;
                let mut first_kept = key.to_vec();
                first_kept.extend_from_slice(&i64_key(ts[keep]));
                first_kept.extend_from_slice(row.row(0).data());
                self.state
                    .rows
                    .delete_range((Bound::Included(key), Bound::Excluded(first_kept.as_slice())));
            }
            let before = before + m as i64;
            self.emitted.forget_before(key, &i64_key(before + 1));
            let ctx = b - keep;
            if ctx == 0 && b == ts.len() && !self.rec.uses_match_number {
                self.progress.delete(key);
            } else {
                let mut v = (ctx as u32).to_le_bytes().to_vec();
                v.extend_from_slice(&before.to_le_bytes());
                self.progress.put(key, &v);
            }
        }
        // when the partition next needs a look
        let mut next: Option<i64> = None;
        let mut consider = |d: i64| next = Some(next.map_or(d, |n: i64| n.min(d)));
        if final_end < ts.len() {
            consider(self.due(ts[final_end]));
        }
        if let (Some(s), Some(wn)) = (scan.waiting, self.rec.within) {
            consider(self.due(ts[s].saturating_add(wn).saturating_sub(1)));
        }
        if frontier != Some(limit) {
            // what the settled scan waits for
            let settled_end = ts.partition_point(|t| *t < limit);
            if settled_end < ts.len() {
                consider(ts[settled_end].saturating_add(lateness).saturating_add(1));
            }
            if let (Some(s), Some(wn)) = (settled.waiting, self.rec.within) {
                consider(ts[s].saturating_add(wn).saturating_add(lateness));
            }
        }
        if let Some(d) = next {
            self.state.register(key, d, self.watermark);
        }
        Ok(())
    }
}

impl Operator for MatchRecognize {
    fn name(&self) -> &'static str {
        "MatchRecognize"
    }

    fn sharding(&self, _port: usize) -> crate::operators::Sharding {
        crate::operators::Sharding::by(&self.rec.partition)
    }

    fn details(&self) -> String {
        self.rec.text.clone()
    }

    fn output_schema(&self) -> &SchemaRef {
        &self.rec.output_schema
    }

    fn state_rows(&self) -> usize {
        self.state.rows.len()
    }

    fn state_tables(&mut self) -> Vec<&mut StateTable> {
        vec![
            &mut self.state.rows,
            &mut self.progress,
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
        let keys = crate::operators::key_rows(&self.rec.partition, &self.key_conv, batch)?;
        let ts = self.rec.times(batch)?;
        let rows = self.row_conv.convert_columns(batch.columns())?;
        // a row without a time has no place in the order
        self.state
            .add(keys.as_ref(), &ts, &rows, input.weights.values());
        Ok(vec![])
    }

    fn on_watermark(&mut self, watermark: i64) -> Result<Vec<Changelog>> {
        if self.event_time.is_none() {
            return Ok(vec![]);
        }
        self.watermark = Some(watermark);
        self.state.due(watermark);
        Ok(vec![])
    }

    fn on_epoch_end(&mut self) -> Result<Vec<Changelog>> {
        let dirty = self.state.take_dirty();
        if dirty.is_empty() {
            return Ok(vec![]);
        }
        let mut diff = Diff::default();
        for key in dirty {
            self.revisit(&key, &mut diff)?;
        }
        // the shown rows carry their match number in front
        let strip = |rows: Vec<Box<[u8]>>| -> Vec<Box<[u8]>> {
            rows.into_iter().map(|r| r[8..].into()).collect()
        };
        let diff = Diff {
            retract: strip(diff.retract),
            insert: strip(diff.insert),
        };
        diff.into_changelogs(&self.out_conv, &self.rec.output_schema)
    }
}

/// Run a `MATCH_RECOGNIZE` over a whole input at once (the one-shot query): rows grouped
/// by partition and ordered as the view orders them, every row final.
pub fn recognize_all(rec: &Recognizer, input: &RecordBatch) -> Result<RecordBatch> {
    let key_conv = RowConverter::new(
        rec.partition_types
            .iter()
            .map(|t| SortField::new(t.clone()))
            .collect(),
    )?;
    let keys = crate::operators::key_rows(&rec.partition, &key_conv, input)?;
    let ts = rec.times(input)?;
    // the view's order (`rows` table): partition, time, then the row's columns, encoded
    // once for the batch
    let mut fields: Vec<SortField> = rec
        .partition_types
        .iter()
        .map(|t| SortField::new(t.clone()))
        .collect();
    fields.push(SortField::new(DataType::Int64));
    fields.extend(sort_fields(&rec.input_schema));
    let order_conv = RowConverter::new(fields)?;
    let mut cols: Vec<ArrayRef> = rec
        .partition
        .iter()
        .map(|e| evaluate(e, input))
        .collect::<Result<Vec<_>>>()?;
    cols.push(Arc::new(ts.clone()));
    cols.extend(input.columns().iter().cloned());
    let sort_rows = order_conv.convert_columns(&cols)?;
    let mut order: Vec<usize> = (0..input.num_rows()).filter(|i| ts.is_valid(*i)).collect();
    order.sort_unstable_by(|a, b| sort_rows.row(*a).cmp(&sort_rows.row(*b)));
    let same_key = |a: usize, b: usize| keys.as_ref().is_none_or(|k| k.row(a) == k.row(b));
    let mut outs: Vec<RecordBatch> = Vec::new();
    let mut g = 0;
    while g < order.len() {
        let mut h = g;
        while h < order.len() && same_key(order[g], order[h]) {
            h += 1;
        }
        let idx = UInt32Array::from_iter_values(order[g..h].iter().map(|i| *i as u32));
        let part = datafusion::arrow::compute::take_record_batch(input, &idx)?;
        let pts: Vec<i64> = order[g..h].iter().map(|i| ts.value(*i)).collect();
        let r = Rows {
            batch: &part,
            ts: &pts,
            final_end: pts.len(),
            frontier: None,
        };
        let scan = rec.scan(&r, 0)?;
        if !scan.matches.is_empty() {
            outs.push(rec.output(&part, &scan.matches, 0)?);
        }
        g = h;
    }
    Ok(datafusion::arrow::compute::concat_batches(
        &rec.output_schema,
        &outs,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `run` over a pattern where every variable's DEFINE is given per row.
    fn rec(program: Vec<Inst>, nvars: usize, within: Option<i64>) -> Recognizer {
        use datafusion::arrow::datatypes::{Field, Schema};
        let input: SchemaRef = Arc::new(Schema::new(vec![Field::new("t", DataType::Int64, false)]));
        Recognizer {
            partition: vec![],
            partition_types: vec![],
            time: Arc::new(datafusion::physical_expr::expressions::Column::new("t", 0)),
            within,
            vars: (0..nvars).map(|i| format!("v{i}")).collect(),
            program,
            defines: (0..nvars).map(|_| None).collect(),
            refs: vec![],
            refs_schema: Arc::new(Schema::empty()),
            measures: vec![],
            skip: Skip::PastLastRow,
            input_schema: input.clone(),
            output_schema: Arc::new(Schema::empty()),
            max_back: 0,
            uses_match_number: false,
            text: String::new(),
        }
    }

    fn batch(ts: &[i64]) -> RecordBatch {
        use datafusion::arrow::datatypes::{Field, Schema};
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("t", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(ts.to_vec()))],
        )
        .unwrap()
    }

    #[test]
    fn greedy_run_waits_for_rows_not_final() {
        // v0+ : Var(0), Split(0, 2), Match
        let r = rec(vec![Inst::Var(0), Inst::Split(0, 2), Inst::Match], 1, None);
        let ts = [1, 2, 3, 4];
        let b = batch(&ts);
        // all final, nothing more comes: one match of all four rows
        let rows = Rows {
            batch: &b,
            ts: &ts,
            final_end: 4,
            frontier: None,
        };
        let s = r.scan(&rows, 0).unwrap();
        assert_eq!(s.matches.len(), 1);
        assert_eq!((s.matches[0].start, s.matches[0].end), (0, 4));
        // the last two rows not final: the greedy run waits, nothing is emitted
        let rows = Rows {
            batch: &b,
            ts: &ts,
            final_end: 2,
            frontier: Some(3),
        };
        let s = r.scan(&rows, 0).unwrap();
        assert!(s.matches.is_empty());
        assert_eq!(s.waiting, Some(0));
    }

    #[test]
    fn end_anchor_within_bound_decides_once_closed() {
        // v0 $ within 10
        let r = rec(vec![Inst::Var(0), Inst::End, Inst::Match], 1, Some(10));
        let ts = [0, 5, 20];
        let b = batch(&ts);
        // row at 5 is inside the first row's bound: no match from 0; from 5 the next row
        // (20) is beyond 5 + 10: match; from 20 the bound is open until the frontier
        let rows = Rows {
            batch: &b,
            ts: &ts,
            final_end: 3,
            frontier: Some(25),
        };
        let s = r.scan(&rows, 0).unwrap();
        assert_eq!(
            s.matches.iter().map(|m| m.start).collect::<Vec<_>>(),
            vec![1]
        );
        assert_eq!(s.waiting, Some(2));
        let rows = Rows {
            batch: &b,
            ts: &ts,
            final_end: 3,
            frontier: Some(30),
        };
        let s = r.scan(&rows, 0).unwrap();
        assert_eq!(
            s.matches.iter().map(|m| m.start).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(s.waiting, None);
    }
}
