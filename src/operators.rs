//! Incremental operators: each consumes changelog batches (rows + weights) and produces the
//! change of its output. One operator per file; each file's header states its input,
//! output, state, watermark behaviour and what a checkpoint would hold.
//!
//! Correctness is stated on weights (DBSP style): if an operator's input relation changes
//! by Δ, it emits exactly the change of its output relation, so a view equals its query
//! over the inputs at every epoch boundary.

pub mod aggregate;
pub mod asof_join;
pub mod emitted;
pub mod event_rows;
pub mod filter;
pub mod float_sum;
pub mod join;
pub mod match_recognize;
pub mod merge;
pub mod over_window;
pub mod project;
pub mod session_window;
pub mod sketch;
pub mod slot_index;
pub mod top_n;
pub mod unnest;

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray};
use datafusion::arrow::compute::{filter, filter_record_batch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::Expr;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::physical_expr::{PhysicalExpr, create_physical_expr};

use crate::dataflow::changelog::Changelog;
use crate::error::Result;

/// Hash maps keyed by row bytes on the hot path use aHash (SipHash costs ~3x more).
pub type FastMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
pub type FastSet<K> = std::collections::HashSet<K, ahash::RandomState>;

/// A view's event-time options, as windowed operators use them.
#[derive(Debug, Clone, Default)]
pub struct WindowOptions {
    /// `allowed_lateness`, µs.
    pub lateness_us: i64,
    /// `EMIT ON WINDOW CLOSE`.
    pub emit_on_close: bool,
    /// `late_events = 'correct'`.
    pub correct: bool,
}

/// How an operator's work splits across a view's shards (`weir serve --workers`): each
/// shard is an instance of the operator with state of its own, and the graph routes every
/// input row to the one shard that owns it (`dataflow/graph.rs`).
#[derive(Clone)]
pub enum Sharding {
    /// One instance sees every row (a global aggregate, a cross join, a top-N over all
    /// rows): the node runs unsharded.
    Single,
    /// No state across rows: any shard may take any row (rows stay where they are).
    Any,
    /// Rows with equal values of these expressions (evaluated on the port's input) belong
    /// to one shard. Every port of a multi-input operator names expressions of the same
    /// types, so equal keys on two ports meet in one shard.
    Key(Vec<Arc<dyn PhysicalExpr>>),
}

impl Sharding {
    /// Rows sharing these key expressions meet in one shard; no key means one instance.
    pub fn by(keys: &[Arc<dyn PhysicalExpr>]) -> Sharding {
        if keys.is_empty() {
            Sharding::Single
        } else {
            Sharding::Key(keys.to_vec())
        }
    }
}

pub trait Operator: Send {
    /// The operator's name in code, shown by EXPLAIN.
    fn name(&self) -> &'static str;
    /// What it computes (expressions, keys), shown by EXPLAIN.
    fn details(&self) -> String;
    fn output_schema(&self) -> &SchemaRef;
    /// Changes arriving on input `port` (0 for single-input operators; 0 = left and
    /// 1 = right for joins). Returns the changes to emit now.
    fn on_changes(&mut self, port: usize, input: Changelog) -> Result<Vec<Changelog>>;
    /// Whether an epoch's input on a port may come in several calls, one per upstream
    /// batch, in order: true when `on_changes` only folds its input into state and emits
    /// at the epoch's end (an aggregate) or maps each batch on its own (projections,
    /// filters, unions, UNNEST). The framework then does not concatenate the batches
    /// first (10% of the dataflow thread on Nexmark q5, whose HOP is a union of five
    /// projections). Others get one call per port per epoch.
    fn takes_parts(&self) -> bool {
        false
    }
    /// The event-time watermark of the input advanced to `watermark` (µs): close windows,
    /// free state that no admitted row can change any more.
    fn on_watermark(&mut self, _watermark: i64) -> Result<Vec<Changelog>> {
        Ok(Vec::new())
    }
    /// End of an epoch: emit what was held back to consolidate within the epoch.
    fn on_epoch_end(&mut self) -> Result<Vec<Changelog>> {
        Ok(Vec::new())
    }
    /// How rows arriving on `port` are split across shards (default: not at all).
    fn sharding(&self, _port: usize) -> Sharding {
        Sharding::Single
    }
    /// Rows of state held.
    fn state_rows(&self) -> usize {
        0
    }
    /// Bytes the operator holds in memory outside its state tables (working forms that do
    /// not spill, such as an aggregate's per-group vectors). The memory budget counts them
    /// as what waiting for spilling cannot free.
    fn resident_bytes(&self) -> usize {
        0
    }
    /// Move about `share` of that working memory into the operator's state tables (which
    /// then spill it); returns the bytes freed as `resident_bytes` counts them.
    fn evict_resident(&mut self, _share: f64) -> usize {
        0
    }
    /// Whether [`evict_resident`](Self::evict_resident) can free the working memory.
    fn resident_spills(&self) -> bool {
        false
    }
    /// The operator's state tables (declared when it is built): the framework flushes
    /// their dirty keys at a checkpoint and reloads them at recovery.
    fn state_tables(&mut self) -> Vec<&mut crate::state::state_table::StateTable> {
        Vec::new()
    }
    /// Before the state tables are flushed: write into them what the operator keeps in a
    /// working form of its own (an aggregate's per-group vectors).
    fn sync_state(&mut self) -> Result<()> {
        Ok(())
    }
    /// After the state tables were reloaded: rebuild the working form from them.
    fn restore_state(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Compile a logical expression against an input schema.
pub fn compile(expr: &Expr, input: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
    Ok(create_physical_expr(
        expr,
        input,
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )?)
}

/// Evaluate an expression to an array with one value per row.
pub fn evaluate(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<ArrayRef> {
    Ok(expr.evaluate(batch)?.into_array(batch.num_rows())?)
}

/// The key of each row of `batch` in row format (None when there are no key expressions:
/// one key for all rows).
pub fn key_rows(
    exprs: &[Arc<dyn PhysicalExpr>],
    conv: &datafusion::arrow::row::RowConverter,
    batch: &RecordBatch,
) -> Result<Option<datafusion::arrow::row::Rows>> {
    if exprs.is_empty() {
        return Ok(None);
    }
    let cols = exprs
        .iter()
        .map(|e| evaluate(e, batch))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(conv.convert_columns(&cols)?))
}

/// A predicate's result as a selection: NULL counts as false.
pub fn true_mask(m: &BooleanArray) -> BooleanArray {
    if m.null_count() > 0 {
        datafusion::arrow::compute::prep_null_mask_filter(m)
    } else {
        m.clone()
    }
}

/// Keep the rows (and their weights) where `mask` is true.
pub fn filter_changelog(cl: &Changelog, mask: &BooleanArray) -> Result<Changelog> {
    let data = filter_record_batch(&cl.data, mask)?;
    let weights = filter(&cl.weights, mask)?;
    let weights = weights
        .as_any()
        .downcast_ref::<datafusion::arrow::array::Int64Array>()
        .expect("filtered Int64Array is Int64Array")
        .clone();
    Ok(Changelog::new(data, weights))
}

/// Give a changelog a schema with the same column types (names and nullability may differ).
pub fn with_schema(cl: Changelog, schema: &SchemaRef) -> Result<Changelog> {
    if cl.data.schema() == *schema {
        return Ok(cl);
    }
    let data = RecordBatch::try_new_with_options(
        schema.clone(),
        cl.data.columns().to_vec(),
        &datafusion::arrow::record_batch::RecordBatchOptions::new()
            .with_row_count(Some(cl.data.num_rows())),
    )?;
    Ok(Changelog::new(data, cl.weights))
}
