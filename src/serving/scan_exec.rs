//! `ScanExec`: DataFusion's leaf for a full read of a table or a view. It streams the rows
//! of a [`BatchSource`] (a table's store read view, or a view's contents at one epoch,
//! taken when the query was planned) from a blocking task into a channel of two batches, so
//! a query over a relation larger than memory holds a couple of batches, not the relation,
//! and store reads never block the async runtime. Its statistics give the exact row count
//! (a bare `count(*)` is answered without reading rows).

use std::fmt;
use std::sync::Arc;

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

use crate::state::rows::BatchSource;
use crate::state::table::TableScan;

pub struct ScanExec {
    scan: Arc<dyn BatchSource>,
    /// The table's schema as the query sees it (columns nullable).
    schema: SchemaRef,
    projection: Option<Vec<usize>>,
    projected: SchemaRef,
    limit: Option<usize>,
    properties: Arc<PlanProperties>,
    /// The same read as `scan` when it is a table's: what an index join looks keys up in
    /// (`serving/index_join.rs`), so its lookups see what the scan would have read.
    table: Option<Arc<TableScan>>,
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
            table: None,
        })
    }

    /// A scan of a table's read (`scan` is that read).
    pub fn with_table(mut self, table: Arc<TableScan>) -> ScanExec {
        self.table = Some(table);
        self
    }

    /// The table read and the columns it yields (positions in the table), for a table
    /// scan without a LIMIT.
    pub fn table_read(&self) -> Option<(&Arc<TableScan>, Vec<usize>)> {
        let t = self.table.as_ref().filter(|_| self.limit.is_none())?;
        let columns = match &self.projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        Some((t, columns))
    }

    /// The scan's output schema (its projection of the table, columns nullable).
    pub fn projected_schema(&self) -> &SchemaRef {
        &self.projected
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
