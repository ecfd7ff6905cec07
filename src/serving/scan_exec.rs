//! `ScanExec`: DataFusion's leaf for a full read of a table or a view. It streams the rows
//! of a [`BatchSource`] (a table's store read view, or a view's contents at one epoch,
//! taken when the query was planned) from a blocking task into a channel of two batches, so
//! a query over a relation larger than memory holds a couple of batches, not the relation,
//! and store reads never block the async runtime. Its statistics give the exact row count
//! (a bare `count(*)` is answered without reading rows).

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{Statistics, project_schema};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::StatisticsArgs;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};

use crate::dataflow::runtime::Dataflow;
use crate::error::Result;
use crate::state::rows::BatchSource;
use crate::state::table::TableScan;
use crate::state::table_index::IndexSpec;

pub struct ScanExec {
    scan: Arc<dyn BatchSource>,
    /// The table's schema as the query sees it (columns nullable).
    schema: SchemaRef,
    projection: Option<Vec<usize>>,
    projected: SchemaRef,
    limit: Option<usize>,
    properties: Arc<PlanProperties>,
    /// What the scanned rows can also be read by key in (an index join,
    /// `serving/index_join.rs`).
    keyed: Option<KeyedRead>,
}

/// Where a scan's rows can be read by key instead of scanned.
#[derive(Clone)]
pub enum KeyedRead {
    /// A table, by its primary key or an index, in the scan's own read view (the same
    /// read as the scan's), so lookups see what the scan would have read.
    Table(Arc<TableScan>),
    /// A materialized view that its query reads alone (not pinned: one view is at one
    /// epoch anyway), by its indexes, at the view's current epoch.
    View {
        dataflow: Arc<Dataflow>,
        oid: u32,
        indexes: Vec<IndexSpec>,
    },
}

impl KeyedRead {
    /// The primary key's columns (tables with one).
    pub fn primary_key(&self) -> Option<Vec<usize>> {
        match self {
            KeyedRead::Table(t) => t.table().primary_key().map(<[usize]>::to_vec),
            KeyedRead::View { .. } => None,
        }
    }

    pub fn indexes(&self) -> Vec<IndexSpec> {
        match self {
            KeyedRead::Table(t) => t.table().indexes(),
            KeyedRead::View { indexes, .. } => indexes.clone(),
        }
    }

    /// The rows whose primary key (`index` None) or leading indexed columns equal a row
    /// of `keys`, with all the relation's columns; None when the key or index is gone.
    pub fn lookup(&self, index: Option<u32>, keys: &[ArrayRef]) -> Result<Option<RecordBatch>> {
        match (self, index) {
            (KeyedRead::Table(t), None) => t.lookup(keys),
            (KeyedRead::Table(t), Some(ix)) => t.index_lookup(ix, keys),
            (KeyedRead::View { .. }, None) => Ok(None),
            (KeyedRead::View { dataflow, oid, .. }, Some(ix)) => {
                dataflow.view_index_lookup(*oid, ix, keys)
            }
        }
    }
}

impl fmt::Debug for ScanExec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScanExec({})", self.scan.name())
    }
}

impl ScanExec {
    pub fn try_new(
        scan: Arc<dyn BatchSource>,
        schema: SchemaRef,
        projection: Option<&Vec<usize>>,
        limit: Option<usize>,
    ) -> DfResult<ScanExec> {
        let projected = project_schema(&schema, projection)?;
        let properties = PlanProperties::new(
            EquivalenceProperties::new(projected.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Ok(ScanExec {
            scan,
            schema,
            projection: projection.cloned(),
            projected,
            limit,
            properties: Arc::new(properties),
            keyed: None,
        })
    }

    /// A scan whose rows can also be read by key in `keyed`.
    pub fn with_keyed(mut self, keyed: KeyedRead) -> ScanExec {
        self.keyed = Some(keyed);
        self
    }

    /// Where the rows can be read by key, and the columns the scan yields (positions in
    /// the relation), for a scan without a LIMIT.
    pub fn keyed_read(&self) -> Option<(&KeyedRead, Vec<usize>)> {
        let t = self.keyed.as_ref().filter(|_| self.limit.is_none())?;
        let columns = match &self.projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        Some((t, columns))
    }

    /// The scan's output schema (its projection of the relation, columns nullable).
    pub fn projected_schema(&self) -> &SchemaRef {
        &self.projected
    }

    /// The relation's name and the rows the scan yields.
    pub fn relation(&self) -> (&str, u64) {
        (self.scan.name(), self.scan.rows())
    }

    fn rows(&self) -> usize {
        let rows = self.scan.rows() as usize;
        self.limit.map_or(rows, |l| l.min(rows))
    }
}

impl DisplayAs for ScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "ScanExec: relation={}, rows={}",
            self.scan.name(),
            self.rows()
        )
    }
}

impl ExecutionPlan for ScanExec {
    fn name(&self) -> &'static str {
        "ScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
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
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "ScanExec has one partition, not {partition}"
            )));
        }
        let mut builder = RecordBatchReceiverStreamBuilder::new(self.projected.clone(), 2);
        let tx = builder.tx();
        let scan = self.scan.clone();
        let schema = self.schema.clone();
        let projection = self.projection.clone();
        let mut left = self.limit.unwrap_or(usize::MAX);
        builder.spawn_blocking(move || {
            for batch in scan.batches() {
                if left == 0 {
                    break;
                }
                let batch = batch.map_err(|e| DataFusionError::External(Box::new(e)))?;
                let batch = RecordBatch::try_new(schema.clone(), batch.columns().to_vec())?;
                let batch = match &projection {
                    Some(p) => batch.project(p)?,
                    None => batch,
                };
                let batch = batch.slice(0, batch.num_rows().min(left));
                left -= batch.num_rows();
                // the receiver went away (LIMIT reached, query canceled): stop reading
                if tx.blocking_send(Ok(batch)).is_err() {
                    break;
                }
            }
            Ok(())
        });
        Ok(builder.build())
    }

    fn statistics_from_inputs(
        &self,
        _inputs: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> DfResult<Arc<Statistics>> {
        let stats =
            Statistics::new_unknown(&self.projected).with_num_rows(Precision::Exact(self.rows()));
        Ok(Arc::new(stats))
    }
}
