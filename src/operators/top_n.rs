//! `TopN`: the first rows by an ordering, per partition: `ORDER BY ... LIMIT n [OFFSET m]`
//! (one partition) and `ROW_NUMBER() OVER (PARTITION BY p ORDER BY o) <= n` (with the row
//! number as an output column). Window functions over every row are `over_window.rs`,
//! which keeps its rows in the same `rows` layout.
//!
//! - input: one changelog stream.
//! - output: per partition changed in an epoch, the difference between the rows it showed
//!   and the rows it shows now (rows whose rank changed are retracted and re-emitted with
//!   the new one). Ties in the ordering are broken by the whole row, so the result is
//!   deterministic.
//! - state (state tables): `rows`: per partition every input row (not only the top n, so
//!   that a deleted top row can be replaced), key = partition ++ sort key ++ row, value =
//!   sort key length ++ multiplicity, so a prefix scan reads a partition in output order;
//!   `emitted` (`emitted.rs`): the rows each partition shows; for window top-N,
//!   `window_ends` (partition -> latest window end) and `closing` (window end ++
//!   partition), whose range up to the watermark is the set of partitions to free.
//! - watermark: passed through. A window top-N (partitioned by `window_start` or
//!   `window_end`) tracks each partition's latest `window_end` and, at the end of the epoch
//!   in which the watermark passes it plus the allowed lateness, frees the partition
//!   without retracting its rows (the windowed aggregate below frees the same windows then,
//!   so no change can reach them any more).
//! - checkpoint: the tables above (partitions changed in an epoch are emitted by its end).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, UInt64Array};
use datafusion::arrow::compute::{SortOptions, cast};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::physical_expr::PhysicalExpr;

use crate::dataflow::changelog::Changelog;
use crate::error::Result;
use crate::operators::emitted::{Diff, Emitted};
use crate::operators::{FastSet, Operator, evaluate};
use crate::state::state_table::{StateTable, TableDecl, i64_key};

/// Columns appended to the rows a partition shows.
pub enum Numbering {
    None,
    /// The 1-based row number within the partition.
    RowNumber,
}

pub struct SortKey {
    pub expr: Arc<dyn PhysicalExpr>,
    pub data_type: DataType,
    pub options: SortOptions,
}

pub(crate) const ROWS: TableDecl = TableDecl {
    name: "rows",
    key: "partition ++ sort key ++ row",
    value: "sort key length (u32 LE) ++ multiplicity (i64 LE)",
    ordered: true,
};
const WINDOW_ENDS: TableDecl = TableDecl {
    name: "window_ends",
    key: "partition",
    value: "latest window end (µs, i64 LE)",
    ordered: false,
};
const CLOSING: TableDecl = TableDecl {
    name: "closing",
    key: "window end (order-preserving i64) ++ partition",
    value: "empty",
    ordered: true,
};

pub(crate) fn row_value(sk_len: u32, count: i64) -> [u8; 12] {
    let mut v = [0u8; 12];
    v[..4].copy_from_slice(&sk_len.to_le_bytes());
    v[4..].copy_from_slice(&count.to_le_bytes());
    v
}

/// Add `w` to the multiplicity of `row` (sort key `sk`) in partition `part` of a `rows`
/// table; `key` is left holding the row's key. Returns the new multiplicity.
pub(crate) fn add_row(
    rows: &mut StateTable,
    key: &mut Vec<u8>,
    part: &[u8],
    sk: &[u8],
    row: &[u8],
    w: i64,
) -> i64 {
    key.clear();
    key.extend_from_slice(part);
    key.extend_from_slice(sk);
    key.extend_from_slice(row);
    let count = rows.get(key).map(parse_row_value).map_or(0, |(_, c)| c) + w;
    if count == 0 {
        rows.delete(key);
    } else {
        rows.put(key, &row_value(sk.len() as u32, count));
    }
    count
}

pub(crate) fn parse_row_value(v: &[u8]) -> (usize, i64) {
    let sk = v
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .unwrap_or(0);
    let c = v
        .get(4..12)
        .and_then(|b| b.try_into().ok())
        .map(i64::from_le_bytes)
        .unwrap_or(0);
    (sk as usize, c)
}

pub struct TopN {
    partition_by: Vec<Arc<dyn PhysicalExpr>>,
    part_conv: RowConverter,
    sort_by: Vec<Arc<dyn PhysicalExpr>>,
    sort_conv: RowConverter,
    row_conv: RowConverter,
    out_conv: RowConverter,
    skip: usize,
    fetch: usize,
    /// What is appended to each row shown.
    numbering: Numbering,
    rows: StateTable,
    emitted: Emitted,
    /// Partitions changed in this epoch (emitted and cleared at its end).
    dirty: FastSet<Box<[u8]>>,
    window: Option<WindowFree>,
    schema: SchemaRef,
    text: String,
}

pub(crate) fn micros(a: &ArrayRef) -> Result<ArrayRef> {
    Ok(cast(
        a,
        &DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Microsecond, None),
    )?)
}

/// Freeing of closed windows' partitions.
struct WindowFree {
    /// Input column holding `window_end`.
    end_col: usize,
    lateness_us: i64,
    watermark: Option<i64>,
    ends: StateTable,
    /// Entries may be stale (the partition moved to a later end): checked against `ends`.
    closing: StateTable,
}

impl TopN {
    /// Free partitions whose window closed (see the module header).
    pub fn with_window_end(mut self, end_col: usize, lateness_us: i64) -> Self {
        self.window = Some(WindowFree {
            end_col,
            lateness_us,
            watermark: None,
            ends: StateTable::new(WINDOW_ENDS),
            closing: StateTable::new(CLOSING),
        });
        self
    }

    fn free_closed_windows(&mut self) {
        let Some(wf) = &mut self.window else { return };
        let Some(wm) = wf.watermark else { return };
        // every key `end ++ partition` with end <= watermark - lateness
        let closed = wf.closing.take_up_to(wm.saturating_sub(wf.lateness_us));
        for (end, part) in closed.iter() {
            let latest = wf.ends.get(part).map(crate::state::zset::count_of);
            if latest != Some(end) {
                continue; // the partition moved to a later end
            }
            debug_assert!(!self.dirty.contains(part), "freed after emitting");
            wf.ends.delete(part);
            self.rows.delete_prefix(part);
            self.emitted.forget(part);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn new(
        partition_by: Vec<Arc<dyn PhysicalExpr>>,
        partition_types: Vec<DataType>,
        sort_by: Vec<SortKey>,
        skip: usize,
        fetch: usize,
        numbering: Numbering,
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
            numbering,
            rows: StateTable::new(ROWS),
            emitted: Emitted::new(),
            dirty: FastSet::default(),
            window: None,
            schema,
            text,
        })
    }
}

/// The rows a partition shows now, in order (input rows, repeated by multiplicity): the
/// rows of `part` in `rows` after skipping `skip`, at most `fetch`.
fn visible<'a>(
    rows: &'a mut StateTable,
    part: &'a [u8],
    skip: usize,
    fetch: usize,
) -> Vec<&'a [u8]> {
    {
        let mut out = Vec::new();
        let mut skipped = 0usize;
        'outer: for (key, v) in rows.prefix(part) {
            let (sk_len, count) = parse_row_value(v);
            for _ in 0..count.max(0) {
                if skipped < skip {
                    skipped += 1;
                    continue;
                }
                if out.len() >= fetch {
                    break 'outer;
                }
                out.push(&key[part.len() + sk_len..]);
            }
        }
        out
    }
}

impl Operator for TopN {
    fn name(&self) -> &'static str {
        "TopN"
    }

    fn sharding(&self, _port: usize) -> crate::operators::Sharding {
        crate::operators::Sharding::by(&self.partition_by)
    }

    fn details(&self) -> String {
        self.text.clone()
    }

    fn output_schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn state_rows(&self) -> usize {
        self.rows.len()
    }

    fn state_tables(&mut self) -> Vec<&mut StateTable> {
        let mut t = vec![&mut self.rows, self.emitted.state_table()];
        if let Some(wf) = &mut self.window {
            t.push(&mut wf.ends);
            t.push(&mut wf.closing);
        }
        t
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
        // no ORDER BY (`OVER ()`): every row has the empty sort key
        let sorts = if scols.is_empty() {
            None
        } else {
            Some(self.sort_conv.convert_columns(&scols)?)
        };
        let rows = self.row_conv.convert_columns(batch.columns())?;
        let ends = match &self.window {
            Some(wf) => Some(micros(batch.column(wf.end_col))?),
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
            let sk: &[u8] = match &sorts {
                Some(s) => s.row(i).data(),
                None => &[],
            };
            add_row(&mut self.rows, &mut key, part, sk, rows.row(i).data(), *w);
            if !self.dirty.contains(part) {
                self.dirty.insert(part.into());
            }
            if let (Some(wf), Some(ends)) = (&mut self.window, ends)
                && ends.is_valid(i)
            {
                let end = ends.value(i);
                let known = wf.ends.get(part).map(crate::state::zset::count_of);
                if known.is_none_or(|k| end > k) {
                    wf.ends.put(part, &end.to_le_bytes());
                    let mut c = i64_key(end).to_vec();
                    c.extend_from_slice(part);
                    wf.closing.put(&c, &[]);
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
        let mut dirty: Vec<Box<[u8]>> = self.dirty.drain().collect();
        dirty.sort_unstable();
        let mut diff = Diff::default();
        let row_parser = self.row_conv.parser();
        for part in dirty {
            let now = visible(&mut self.rows, &part, self.skip, self.fetch);
            if now.is_empty() {
                self.emitted.replace(&part, &[], &mut diff);
                continue;
            }
            let mut cols = self
                .row_conv
                .convert_rows(now.iter().map(|r| row_parser.parse(r)))?;
            let n_in = cols.len();
            match &self.numbering {
                Numbering::None => {}
                Numbering::RowNumber => {
                    let rn: ArrayRef = Arc::new(UInt64Array::from_iter_values(
                        (1..=now.len() as u64).map(|r| r + self.skip as u64),
                    ));
                    cols.push(rn);
                }
            }
            // the declared types of the appended columns
            for (i, c) in cols.iter_mut().enumerate().skip(n_in) {
                let t = self.schema.field(i).data_type();
                if c.data_type() != t {
                    *c = cast(c, t)?;
                }
            }
            let out = self.out_conv.convert_columns(&cols)?;
            let new_out: Vec<&[u8]> = out.iter().map(|r| r.data()).collect();
            self.emitted.replace(&part, &new_out, &mut diff);
        }
        let out = diff.into_changelogs(&self.out_conv, &self.schema)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::changelog::tests::{changelog, schema};
    use crate::dataflow::graph::{Graph, NodeKind};
    use crate::state::fjall_store::FjallStore;
    use crate::state::store::{Durability, Store, WriteBatch};
    use datafusion::physical_expr::expressions::Column;

    /// Top 2 by `v` descending per `k`, as a one-operator graph.
    fn graph() -> Graph {
        let input = schema("k:i64 v:i64");
        let op = TopN::new(
            vec![Arc::new(Column::new("k", 0))],
            vec![DataType::Int64],
            vec![SortKey {
                expr: Arc::new(Column::new("v", 1)),
                data_type: DataType::Int64,
                options: SortOptions {
                    descending: true,
                    nulls_first: false,
                },
            }],
            0,
            2,
            Numbering::None,
            input.clone(),
            input.clone(),
            "top 2".into(),
        )
        .unwrap();
        let mut g = Graph::new();
        let src = g.add(
            NodeKind::Source {
                relation: 1,
                name: "t".into(),
                late: None,
                lookup: false,
            },
            vec![],
            input.clone(),
        );
        g.output = g.add(NodeKind::Operator(Box::new(op)), vec![src], input);
        g
    }

    fn run(g: &mut Graph, rows: &str) -> Vec<String> {
        let mut inputs = std::collections::HashMap::new();
        inputs.insert(
            1u32,
            vec![crate::dataflow::graph::SourceBatch {
                changelog: changelog("k:i64 v:i64", rows),
                watermark_before: None,
            }],
        );
        let out = g.run_epoch(&inputs, &Default::default()).unwrap();
        let mut lines: Vec<String> = out
            .changes
            .iter()
            .flat_map(|c| {
                let rows =
                    crate::dataflow::changelog::tests::rows_of(std::slice::from_ref(&c.data));
                let w: Vec<i64> = c.weights.values().to_vec();
                rows.into_iter().zip(w).map(|(r, w)| format!("{w:+} {r}"))
            })
            .collect();
        lines.sort();
        lines
    }

    #[test]
    fn state_restored_from_the_store_continues_exactly() {
        let mut live = graph();
        assert_eq!(
            run(&mut live, "+ 1 10 / + 1 20 / + 1 30 / + 2 5"),
            vec!["+1 1 20", "+1 1 30", "+1 2 5"]
        );
        let dir = tempfile::tempdir().unwrap();
        let store = FjallStore::open(dir.path()).unwrap();
        let mut batch = WriteBatch::default();
        let stats = live.flush_state(b"v1/", &mut batch, None).unwrap();
        assert!(stats.keys >= 4, "{stats:?}");
        store.commit(batch, Durability::Sync).unwrap();
        // nothing changed: nothing more to write
        let mut again = WriteBatch::default();
        assert_eq!(live.flush_state(b"v1/", &mut again, None).unwrap().keys, 0);

        let mut restored = graph();
        restored.load_state(&store as &dyn Store, b"v1/").unwrap();
        // deleting the top row brings the third one up, in both
        let change = "- 1 30 / + 2 7";
        let expected = vec!["+1 1 10", "+1 2 7", "-1 1 30"];
        assert_eq!(run(&mut live, change), expected);
        assert_eq!(run(&mut restored, change), expected);
    }
}
