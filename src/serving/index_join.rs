//! Joins that use a table's primary key or a secondary index (`CREATE INDEX`), or a
//! materialized view's index: an index nested-loop join, as Postgres plans one when the
//! other side is small.
//!
//! The [`IndexJoin`] rule (run after DataFusion's physical optimizer) finds a hash join
//! whose probe side is a full scan (through repartitions, filters and projections) of a
//! relation its rows can be read by key in ([`KeyedRead`]: a table, or a view its query
//! reads alone), joined on plain columns that cover the table's primary key or the
//! leading columns of one of its indexes, and whose result never shows the probe side's
//! unmatched rows (inner, left, left semi/anti/mark and right semi joins; not a null-aware
//! anti join, whose answer depends on the probe side's NULLs). It puts an
//! [`IndexJoinExec`] over the join. At execution that node reads the build side, takes its
//! distinct non-NULL keys and reads the matching rows by key (a table: from the scan's own
//! read view, what the scan would have read; a view: at its current epoch), then runs the
//! same join (same keys, filter, type and projection) over those rows in place of the
//! scan. Rows a key cannot find cannot join, so the answer is the join's.
//!
//! More than [`MAX_KEYS`] distinct keys, or keys for more than a quarter of the scanned
//! rows, and it scans as the join would have (the build side is read once either way).

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, new_empty_array};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{JoinType, NullEquality};
use datafusion::config::ConfigOptions;
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::physical_expr::{PhysicalExpr, PhysicalExprRef};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::{
    Boundedness, EmissionType, replace_children_if_necessary,
};
use datafusion::physical_plan::expressions::Column;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties, SendableRecordBatchStream, execute_stream,
};
use futures::{StreamExt, TryStreamExt};

use crate::serving::scan_exec::{KeyedRead, ScanExec};

/// The most distinct keys looked up one by one; more and the table is scanned.
pub const MAX_KEYS: usize = 10_000;

/// What the keys are read by.
#[derive(Clone, Debug)]
enum Lookup {
    PrimaryKey,
    Index { oid: u32, name: String },
}

/// The physical optimizer rule: an [`IndexJoinExec`] over each hash join it applies to.
#[derive(Debug)]
pub struct IndexJoin;

impl PhysicalOptimizerRule for IndexJoin {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|p| {
            Ok(match IndexJoinExec::over(&p) {
                Some(node) => Transformed::yes(Arc::new(node) as Arc<dyn ExecutionPlan>),
                None => Transformed::no(p),
            })
        })
        .map(|t| t.data)
    }
    fn name(&self) -> &str {
        "weir_index_join"
    }
    fn schema_check(&self) -> bool {
        true
    }
}

/// The probe side's table scan, reached through repartitions, filters and projections,
/// and for each column of `plan`'s output the scan column it is (None: computed).
fn probe_scan(plan: &Arc<dyn ExecutionPlan>) -> Option<(&ScanExec, Vec<Option<usize>>)> {
    if let Some(scan) = plan.downcast_ref::<ScanExec>() {
        let n = scan.projected_schema().fields().len();
        return Some((scan, (0..n).map(Some).collect()));
    }
    let children = plan.children();
    let [child] = children.as_slice() else {
        return None;
    };
    let (scan, below) = probe_scan(child)?;
    let through = |i: usize| below.get(i).copied().flatten();
    let columns = if plan.is::<RepartitionExec>() || plan.is::<CooperativeExec>() {
        below
    } else if let Some(f) = plan.downcast_ref::<FilterExec>() {
        match f.projection() {
            Some(p) => p.iter().map(|&i| through(i)).collect(),
            None => below,
        }
    } else if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        p.expr()
            .iter()
            .map(|e| {
                e.expr
                    .downcast_ref::<Column>()
                    .and_then(|c| through(c.index()))
            })
            .collect()
    } else {
        return None;
    };
    Some((scan, columns))
}

/// `plan` with its table scan (see [`probe_scan`]) replaced by `rows`.
fn with_scan_replaced(
    plan: &Arc<dyn ExecutionPlan>,
    rows: &Arc<dyn ExecutionPlan>,
) -> DfResult<Arc<dyn ExecutionPlan>> {
    if plan.is::<ScanExec>() {
        return Ok(rows.clone());
    }
    let child = plan
        .children()
        .first()
        .map(|c| (*c).clone())
        .ok_or_else(|| DataFusionError::Internal("index join: no scan below".into()))?;
    replace_children_if_necessary(plan.clone(), vec![with_scan_replaced(&child, rows)?])
}

/// Key types whose stored key encoding equals SQL equality (not floats: -0.0 and NaN).
fn lookup_type(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Date32
            | DataType::Timestamp(..)
            | DataType::Decimal128(..)
    )
}

/// A hash join whose probe side is read by key from a table's primary key or index.
#[derive(Debug)]
pub struct IndexJoinExec {
    /// The [`HashJoinExec`] as DataFusion planned it.
    join: Arc<dyn ExecutionPlan>,
    lookup: Lookup,
    /// For each column the lookup reads by (key or index order), its place in `on`.
    keys: Vec<usize>,
    table: String,
    properties: Arc<PlanProperties>,
}

impl IndexJoinExec {
    /// The node over `plan`, when `plan` is a hash join it applies to.
    fn over(plan: &Arc<dyn ExecutionPlan>) -> Option<IndexJoinExec> {
        let hj = plan.downcast_ref::<HashJoinExec>()?;
        let probe_side_hidden = matches!(
            hj.join_type(),
            JoinType::Inner
                | JoinType::Left
                | JoinType::LeftSemi
                | JoinType::LeftAnti
                | JoinType::LeftMark
                | JoinType::RightSemi
        );
        if !probe_side_hidden
            || hj.null_aware
            || hj.null_equality() != NullEquality::NullEqualsNothing
            || matches!(
                hj.properties().output_partitioning(),
                Partitioning::Hash(..)
            )
        {
            return None;
        }
        let (scan, at_scan) = probe_scan(hj.right())?;
        let (read, columns) = scan.keyed_read()?;
        let left_schema = hj.left().schema();
        // the table column each join key reads, when it is a plain column of a type the
        // build side gives it in
        let key_columns: Vec<Option<usize>> = hj
            .on()
            .iter()
            .map(|(l, r)| {
                let c = at_scan
                    .get(r.downcast_ref::<Column>()?.index())
                    .copied()??;
                let t = scan.projected_schema().field(c).data_type();
                let same = l.data_type(&left_schema).ok()? == *t;
                (same && lookup_type(t)).then_some(columns[c])
            })
            .collect();
        let place = |col: usize| key_columns.iter().position(|k| *k == Some(col));
        let table = scan.relation().0;
        if let Some(pk) = read.primary_key()
            && let Some(keys) = pk.iter().map(|&c| place(c)).collect::<Option<Vec<_>>>()
        {
            return Some(Self::new(plan, Lookup::PrimaryKey, keys, table));
        }
        let (keys, index) = read
            .indexes()
            .into_iter()
            .map(|i| {
                let keys: Vec<usize> = i.columns.iter().map_while(|&c| place(c)).collect();
                (keys, i)
            })
            .filter(|(keys, _)| !keys.is_empty())
            .max_by_key(|(keys, _)| keys.len())?;
        let lookup = Lookup::Index {
            oid: index.oid,
            name: index.name,
        };
        Some(Self::new(plan, lookup, keys, table))
    }

    fn new(
        join: &Arc<dyn ExecutionPlan>,
        lookup: Lookup,
        keys: Vec<usize>,
        table: &str,
    ) -> IndexJoinExec {
        let properties = PlanProperties::new(
            join.equivalence_properties().clone(),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        IndexJoinExec {
            join: join.clone(),
            lookup,
            keys,
            table: table.to_owned(),
            properties: Arc::new(properties),
        }
    }

    fn hash_join(&self) -> DfResult<&HashJoinExec> {
        self.join
            .downcast_ref::<HashJoinExec>()
            .ok_or_else(|| DataFusionError::Internal("index join over a non-hash join".into()))
    }
}

impl DisplayAs for IndexJoinExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        match &self.lookup {
            Lookup::PrimaryKey => write!(
                f,
                "IndexJoinExec: table={}, lookup=primary key, max_keys={MAX_KEYS}",
                self.table
            ),
            Lookup::Index { name, .. } => write!(
                f,
                "IndexJoinExec: table={}, lookup=index {name}, max_keys={MAX_KEYS}",
                self.table
            ),
        }
    }
}

impl ExecutionPlan for IndexJoinExec {
    fn name(&self) -> &'static str {
        "IndexJoinExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.join]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    #[allow(deprecated)]
    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let [join] = children.as_slice() else {
            return Err(DataFusionError::Internal(
                "an index join has one child".into(),
            ));
        };
        match IndexJoinExec::over(join) {
            Some(node) => Ok(Arc::new(node)),
            None => Ok(join.clone()),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "IndexJoinExec has one partition, not {partition}"
            )));
        }
        let hj = self.hash_join()?;
        let left = hj.left().clone();
        let right = hj.right().clone();
        let left_keys: Vec<PhysicalExprRef> =
            self.keys.iter().map(|&k| hj.on()[k].0.clone()).collect();
        let scan = probe_scan(&right)
            .and_then(|(s, _)| {
                let (read, columns) = s.keyed_read()?;
                Some((
                    read.clone(),
                    columns,
                    s.projected_schema().clone(),
                    s.relation().1,
                ))
            })
            .ok_or_else(|| DataFusionError::Internal("index join without its scan".into()))?;
        let join = self.join.clone();
        let lookup = self.lookup.clone();
        let table = self.table.clone();
        let schema = self.schema();
        let run = async move {
            // the build side, counted against the statement's memory while it is read
            // here (the join counts it again as it builds its table from it)
            let reservation = MemoryConsumer::new("IndexJoinExec").register(context.memory_pool());
            let mut built = Vec::new();
            let mut stream = execute_stream(left.clone(), context.clone())?;
            while let Some(b) = stream.next().await {
                let b = b?;
                reservation.try_grow(b.get_array_memory_size())?;
                built.push(b);
            }
            drop(stream);
            let left_schema = left.schema();
            let (read, columns, scan_schema, rows) = scan;
            // (keys for more than a quarter of the rows: scanning reads less)
            let limit = MAX_KEYS.min(rows as usize / 4);
            let keys = distinct_keys(&built, &left_schema, &left_keys, limit)?;
            let probe: Arc<dyn ExecutionPlan> = match keys {
                Some(keys) => {
                    let n = keys.first().map_or(0, |k| k.len());
                    let found = tokio::task::spawn_blocking(move || {
                        looked_up(&read, &lookup, &keys, &columns, &scan_schema)
                    })
                    .await
                    .map_err(|e| DataFusionError::External(Box::new(e)))??;
                    tracing::debug!(%table, keys = n, rows = found.num_rows(), "index join");
                    let found: Arc<dyn ExecutionPlan> = MemorySourceConfig::try_new_exec(
                        &[vec![found.clone()]],
                        found.schema(),
                        None,
                    )?;
                    with_scan_replaced(&right, &found)?
                }
                _ => {
                    tracing::debug!(%table, "index join: too many keys, scanning");
                    right
                }
            };
            let built: Arc<dyn ExecutionPlan> =
                MemorySourceConfig::try_new_exec(&[built], left_schema, None)?;
            let hj = join.downcast_ref::<HashJoinExec>().ok_or_else(|| {
                DataFusionError::Internal("index join over a non-hash join".into())
            })?;
            drop(reservation);
            let rejoined = hj
                .builder()
                .with_new_children(vec![built, probe])?
                .with_partition_mode(PartitionMode::CollectLeft)
                .reset_state()
                .build_exec()?;
            execute_stream(rejoined, context)
        };
        let stream = futures::stream::once(run).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            schema,
            stream.boxed(),
        )))
    }
}

/// The distinct rows of the key expressions over `batches` (of `schema`) without a NULL,
/// one array per key (empty ones of the keys' types when there are no rows); None as soon
/// as there are more than `limit`. Batch by batch: a build side with too many keys is
/// not encoded whole.
fn distinct_keys(
    batches: &[RecordBatch],
    schema: &SchemaRef,
    exprs: &[PhysicalExprRef],
    limit: usize,
) -> DfResult<Option<Vec<ArrayRef>>> {
    let types = exprs
        .iter()
        .map(|e| e.data_type(schema))
        .collect::<DfResult<Vec<_>>>()?;
    if types.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let conv = RowConverter::new(types.iter().cloned().map(SortField::new).collect())?;
    // (an allocation per distinct key, at most `limit`)
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    for b in batches {
        let columns = exprs
            .iter()
            .map(|e| e.evaluate(b)?.into_array(b.num_rows()))
            .collect::<DfResult<Vec<_>>>()?;
        let rows = conv.convert_columns(&columns)?;
        for i in 0..b.num_rows() {
            // NULL equals no key
            if columns.iter().any(|c| c.is_null(i)) {
                continue;
            }
            let row = rows.row(i).data();
            if !seen.contains(row) {
                if seen.len() == limit {
                    return Ok(None);
                }
                seen.insert(row.to_vec());
            }
        }
    }
    if seen.is_empty() {
        return Ok(Some(types.iter().map(new_empty_array).collect()));
    }
    let parser = conv.parser();
    Ok(Some(
        conv.convert_rows(seen.iter().map(|r| parser.parse(r)))?,
    ))
}

/// The table's rows for `keys`, as the scan would have yielded them (its columns, its
/// schema).
fn looked_up(
    read: &KeyedRead,
    lookup: &Lookup,
    keys: &[ArrayRef],
    columns: &[usize],
    schema: &SchemaRef,
) -> DfResult<RecordBatch> {
    let err = |e: crate::error::WeirError| DataFusionError::External(Box::new(e));
    let found = match lookup {
        Lookup::PrimaryKey => read.lookup(None, keys).map_err(err)?,
        Lookup::Index { oid, .. } => read.lookup(Some(*oid), keys).map_err(err)?,
    }
    .ok_or_else(|| DataFusionError::Internal("index join: the key or index is gone".into()))?;
    let cols = columns.iter().map(|&c| found.column(c).clone()).collect();
    Ok(RecordBatch::try_new(schema.clone(), cols)?)
}
