//! Ad-hoc queries: DataFusion sees Weir's relations through a catalog provider whose
//! `public` schema resolves names against [`Catalog`] at planning time and whose
//! `pg_catalog` schema is generated from it. A table scan streams the table from a store
//! read view taken at planning time (`scan_exec.rs`); a view scan reads the contents
//! pinned for the query.
//!
//! This module must not mutate anything: writes go through `plan::dml` and the table store.

pub mod index_join;
pub mod memory;
pub mod scan_exec;
pub mod subscribe;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::catalog::{CatalogProvider, SchemaProvider, Session, TableProvider};
use datafusion::datasource::MemTable;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::context::{SessionConfig, SessionContext};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown, TableType};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::scalar::ScalarValue;

use crate::catalog::pg_catalog::GeneratedSchema;
use crate::catalog::{Catalog, DATABASE_NAME, functions};
use crate::dataflow::runtime::Dataflow;
use crate::state::table::TableStore;
use crate::state::zset::ZSetRead;

pub const DEFAULT_SCHEMA: &str = "public";
/// Marks the lookup side of a temporal join (`FOR SYSTEM_TIME AS OF PROCTIME()`).
pub const TEMPORAL_PREFIX: &str = "__weir_temporal__";

/// View contents pinned for the query being planned: every view a query reads is taken at
/// one epoch (see `Dataflow::snapshot`).
#[derive(Default)]
pub struct PinnedViews {
    views: parking_lot::Mutex<crate::dataflow::runtime::ViewContents>,
}

impl PinnedViews {
    pub fn pin(&self, views: crate::dataflow::runtime::ViewContents) {
        *self.views.lock() = views;
    }
    pub fn clear(&self) {
        self.views.lock().clear();
    }
    fn get(&self, oid: u32) -> Option<Arc<ZSetRead>> {
        self.views.lock().get(&oid).cloned()
    }
}

/// Build the DataFusion context of one connection.
pub fn session_context(
    catalog: Arc<Catalog>,
    dataflow: Arc<Dataflow>,
    pinned: Arc<PinnedViews>,
    memory: Arc<memory::StatementMemoryPool>,
    spill_dir: &std::path::Path,
    role: RoleOf,
) -> SessionContext {
    let mut config = SessionConfig::new()
        .with_default_catalog_and_schema(DATABASE_NAME, DEFAULT_SCHEMA)
        .with_information_schema(false)
        .with_create_default_catalog_and_schema(false)
        .with_target_partitions(2);
    {
        let opts = config.options_mut();
        opts.sql_parser.dialect = datafusion::config::Dialect::PostgreSQL;
        opts.sql_parser.parse_float_as_decimal = true;
        opts.sql_parser.map_string_types_to_utf8view = false;
        opts.sql_parser.enable_ident_normalization = true;
        // a rule that fails (DataFusion's LATERAL decorrelation does on some filters) leaves
        // the plan as it was: what it could not rewrite runs per row (`plan::apply`)
        opts.optimizer.skip_failed_rules = true;
        // DataFusion checks an aggregate's physical input against its logical one field
        // metadata and all; a UNION of three or more inputs of different types (`SELECT
        // f UNION SELECT f UNION SELECT id`) has its declared types merged differently on
        // the two sides, and the check failed an answerable query with an internal error
        opts.execution.skip_physical_aggregate_schema_check = true;
        opts.execution.time_zone = Some(crate::sql::types::SESSION_ZONE.to_owned());
        crate::sql::time_zone::set_plan_zone(opts, None);
    }
    use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
    use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
    // the pool is what bounds a statement, so every fallback keeps it
    let with_disk = |mode: DiskManagerMode| -> DfResult<Arc<RuntimeEnv>> {
        RuntimeEnvBuilder::new()
            .with_memory_pool(memory.clone())
            .with_disk_manager_builder(DiskManagerBuilder::default().with_mode(mode))
            .build_arc()
    };
    let runtime = with_disk(DiskManagerMode::Directories(vec![spill_dir.to_owned()]))
        .or_else(|e| {
            tracing::warn!(error = %e, dir = %spill_dir.display(), "cannot spill to the data directory; using the system's temporary directory");
            with_disk(DiskManagerMode::OsTmpDirectory)
        })
        .or_else(|e| {
            tracing::warn!(error = %e, "cannot spill at all; statements over work_mem fail");
            with_disk(DiskManagerMode::Disabled)
        });
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the query runtime");
            Arc::new(RuntimeEnv::default())
        }
    };
    let mut builder = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features();
    // Postgres' operator rules first: DataFusion's own planners would take `array ||
    // 'literal'` as array_append (Postgres: array_cat) before ours saw it; ours plans
    // only binary operators and passes the rest on
    if let Some(planners) = builder.expr_planners() {
        planners.insert(0, Arc::new(functions::WeirExprPlanner));
    }
    // a float beside a numeric resolves as the float, before DataFusion's type coercion
    // would make both decimals (`catalog/float_over_numeric.rs`)
    let mut analyzer = datafusion::optimizer::Analyzer::new();
    let at = analyzer
        .rules
        .iter()
        .position(|r| r.name() == "type_coercion")
        .unwrap_or(0);
    analyzer.rules.insert(
        at,
        Arc::new(crate::catalog::float_over_numeric::FloatOverNumeric),
    );
    // values of different kinds in one UNION column, CASE, COALESCE are refused as
    // Postgres refuses them, before the coercion would make them text
    // (`catalog/matched_types.rs`)
    analyzer
        .rules
        .insert(at, Arc::new(crate::catalog::matched_types::MatchedTypes));
    // an Aggregate over an Unnest grouped as written, before anything reads or rewrites
    // its GROUP BY (`plan/unnest_keys.rs`)
    analyzer
        .rules
        .insert(0, Arc::new(crate::plan::unnest_keys::GroupKeysOverUnnest));
    *builder.analyzer() = Some(analyzer);
    let state = builder
        .with_type_planner(Arc::new(functions::WeirTypePlanner {
            catalog: Some(catalog.clone()),
        }))
        .with_analyzer_rule(Arc::new(crate::catalog::pg_semantics::PgSemantics))
        .with_analyzer_rule(Arc::new(crate::plan::apply::SubqueryApply))
        .with_optimizer_rules(crate::plan::apply::optimizer_rules())
        .with_query_planner(Arc::new(crate::plan::match_recognize::WeirQueryPlanner))
        .with_physical_optimizer_rule(Arc::new(index_join::IndexJoin))
        .build();
    let ctx = SessionContext::new_with_state(state);
    let pg = Arc::new(GeneratedSchema::pg_catalog(catalog.clone()));
    let information_schema = Arc::new(crate::catalog::information_schema::schema(catalog.clone()));
    // the system relations' columns for pg_attribute (once per process: they are fixed)
    crate::catalog::pg_catalog::set_system_schemas(|namespace, name| {
        let schema = if namespace == crate::catalog::INFORMATION_SCHEMA_NAMESPACE_OID {
            &information_schema
        } else {
            &pg
        };
        schema.build_batch(name).ok().flatten().map(|b| b.schema())
    });
    ctx.register_catalog(
        DATABASE_NAME,
        Arc::new(WeirCatalogProvider {
            public: Arc::new(PublicSchema {
                catalog: catalog.clone(),
                pg_catalog: pg.clone(),
                dataflow,
                pinned,
                role,
            }),
            pg_catalog: pg,
            information_schema,
        }),
    );
    functions::register_sequences(&ctx, catalog.clone());
    functions::register(&ctx, catalog);
    crate::catalog::pg_semantics::register(&ctx);
    crate::catalog::value_limits::register(&ctx);
    crate::sql::windows::register(&ctx);
    ctx.register_udtf(
        crate::plan::match_recognize::TABLE_FUNCTION,
        Arc::new(crate::plan::match_recognize::MatchRecognizeFunction),
    );
    crate::sql::json::register(&ctx);
    crate::sql::json_build::register(&ctx);
    crate::sql::enum_functions::register(&ctx);
    crate::sql::ordered_set::register(&ctx);
    crate::sql::pg_functions::register(&ctx);
    crate::sql::variance::register(&ctx);
    crate::sql::regression::register(&ctx);
    crate::sql::extension_functions::register(&ctx);
    crate::sql::inet::register(&ctx);
    ctx
}

struct WeirCatalogProvider {
    public: Arc<PublicSchema>,
    pg_catalog: Arc<GeneratedSchema>,
    information_schema: Arc<GeneratedSchema>,
}

impl fmt::Debug for WeirCatalogProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WeirCatalogProvider")
    }
}

impl CatalogProvider for WeirCatalogProvider {
    fn schema_names(&self) -> Vec<String> {
        let mut names = vec![
            DEFAULT_SCHEMA.to_owned(),
            "pg_catalog".to_owned(),
            "information_schema".to_owned(),
        ];
        names.extend(
            self.public
                .catalog
                .user_schemas()
                .into_iter()
                .map(|s| s.name),
        );
        names
    }

    fn schema(&self, name: &str) -> Option<Arc<dyn SchemaProvider>> {
        match name {
            DEFAULT_SCHEMA => Some(self.public.clone()),
            "pg_catalog" => Some(self.pg_catalog.clone()),
            "information_schema" => Some(self.information_schema.clone()),
            _ => {
                self.public.catalog.user_schema(name)?;
                Some(Arc::new(UserSchema {
                    name: name.to_owned(),
                    public: self.public.clone(),
                }))
            }
        }
    }
}

/// A user schema (`CREATE SCHEMA app`): its relations, keyed `app.name` in the catalog
/// (`catalog/schemas.rs`).
struct UserSchema {
    name: String,
    public: Arc<PublicSchema>,
}

impl fmt::Debug for UserSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserSchema({})", self.name)
    }
}

#[async_trait]
impl SchemaProvider for UserSchema {
    fn table_names(&self) -> Vec<String> {
        self.public
            .catalog
            .entries()
            .iter()
            .filter(|e| e.desc.kind != crate::catalog::RelationKind::Sink)
            .filter_map(|e| {
                let (s, n) = crate::catalog::schemas::split_relation_name(&e.desc.name);
                (s == self.name).then(|| n.to_owned())
            })
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        let name = name.strip_prefix(TEMPORAL_PREFIX).unwrap_or(name);
        self.public
            .relation(&crate::sql::parser::relation_key(Some(&self.name), name))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.public
            .catalog
            .get(&crate::sql::parser::relation_key(Some(&self.name), name))
            .is_some_and(|e| e.desc.kind != crate::catalog::RelationKind::Sink)
    }
}

/// `public`: user relations; unqualified catalog names (`pg_class`) fall through to
/// `pg_catalog`, which Postgres searches implicitly.
struct PublicSchema {
    catalog: Arc<Catalog>,
    pg_catalog: Arc<GeneratedSchema>,
    dataflow: Arc<Dataflow>,
    pinned: Arc<PinnedViews>,
    /// The session's current role: system tables show only what it may read.
    role: RoleOf,
}

/// The current role of a session (`current_user`), asked when a system table is read.
pub type RoleOf = Arc<dyn Fn() -> u32 + Send + Sync>;

impl fmt::Debug for PublicSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PublicSchema")
    }
}

#[async_trait]
impl SchemaProvider for PublicSchema {
    fn table_names(&self) -> Vec<String> {
        self.catalog
            .entries()
            .iter()
            .filter(|e| e.desc.kind != crate::catalog::RelationKind::Sink)
            .filter(|e| !e.desc.name.contains('.'))
            .map(|e| e.desc.name.clone())
            .collect()
    }

    async fn table(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        // `t FOR SYSTEM_TIME AS OF PROCTIME()` (see sql::parser::preprocess): a query reads t
        // as it is now
        let name = name.strip_prefix(TEMPORAL_PREFIX).unwrap_or(name);
        // (a dotted name is a user schema's relation's catalog key, which SQL made here
        // writes as one quoted name: `"app.t"`)
        if let Some(p) = self.relation(name)? {
            return Ok(Some(p));
        }
        if let Some(batch) = crate::catalog::system::build(name, &self.catalog, &self.dataflow)? {
            let batch = crate::catalog::system::visible_rows(batch, &self.catalog, (self.role)())?;
            let mem = MemTable::try_new(batch.schema(), vec![vec![batch]])?;
            return Ok(Some(Arc::new(mem)));
        }
        self.pg_catalog.table(name).await
    }

    fn table_exist(&self, name: &str) -> bool {
        self.catalog
            .get(name)
            .is_some_and(|e| e.desc.kind != crate::catalog::RelationKind::Sink)
            || crate::catalog::system::TABLES.contains(&name)
            || self.pg_catalog.table_exist(name)
    }
}

impl PublicSchema {
    /// A relation by its catalog key (sinks are not read).
    fn relation(&self, name: &str) -> DfResult<Option<Arc<dyn TableProvider>>> {
        if let Some(entry) = self.catalog.get(name)
            && entry.desc.kind != crate::catalog::RelationKind::Sink
        {
            if let Some(table) = &entry.table {
                return Ok(Some(Arc::new(TableScanProvider::new(table.clone()))));
            }
            if entry.desc.kind == crate::catalog::RelationKind::Source {
                return Ok(Some(Arc::new(SourceScanProvider {
                    name: entry.desc.name.clone(),
                    schema: nullable(&entry.desc.schema()),
                })));
            }
            return Ok(Some(Arc::new(ViewScanProvider {
                oid: entry.desc.oid,
                name: entry.desc.name.clone(),
                schema: nullable(&entry.desc.schema()),
                dataflow: self.dataflow.clone(),
                pinned: self.pinned.clone(),
                indexes: entry
                    .desc
                    .index_specs()
                    .map_err(|e| DataFusionError::External(Box::new(e)))?,
            })));
        }
        Ok(None)
    }
}

/// Scans a materialized view's contents at the epoch pinned for the query.
pub struct ViewScanProvider {
    oid: u32,
    name: String,
    schema: SchemaRef,
    dataflow: Arc<Dataflow>,
    pinned: Arc<PinnedViews>,
    /// Its indexes (`CREATE INDEX` on the view).
    indexes: Vec<crate::state::table_index::IndexSpec>,
}

impl fmt::Debug for ViewScanProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ViewScanProvider({})", self.name)
    }
}

#[async_trait]
impl TableProvider for ViewScanProvider {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    /// Filters on the leading column of an index are looked up (Inexact: DataFusion
    /// applies them again).
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        let leading: Vec<usize> = self
            .indexes
            .iter()
            .filter_map(|i| i.columns.first().copied())
            .collect();
        Ok(filters
            .iter()
            .map(|f| match key_values(f, &self.schema) {
                Some((col, _)) if leading.contains(&col) => TableProviderFilterPushDown::Inexact,
                _ => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let pinned = self.pinned.get(self.oid);
        // a query of this view alone is not pinned (`Engine::run_query`): it may read an
        // index, as of now
        if pinned.is_none()
            && let Some((index, probe)) = index_probe(&self.indexes, filters, &self.schema)?
            && let Some(found) = self
                .dataflow
                .view_index_lookup(self.oid, index.oid, &probe)
                .map_err(|e| DataFusionError::External(Box::new(e)))?
        {
            tracing::debug!(view = %self.name, index = %index.name, "point query by index");
            let found = RecordBatch::try_new(self.schema.clone(), found.columns().to_vec())?;
            let mem = MemTable::try_new(self.schema.clone(), vec![vec![found]])?;
            return mem.scan(state, projection, filters, limit).await;
        }
        // read alone and indexed: a join may look its keys up in the indexes
        let keyed =
            (pinned.is_none() && !self.indexes.is_empty()).then(|| scan_exec::KeyedRead::View {
                dataflow: self.dataflow.clone(),
                oid: self.oid,
                indexes: self.indexes.clone(),
            });
        let read = match pinned {
            Some(r) => r,
            None => self
                .dataflow
                .snapshot(&[self.oid])
                .map_err(|e| DataFusionError::External(Box::new(e)))?
                .1
                .remove(&self.oid)
                .unwrap_or_else(|| Arc::new(ZSetRead::empty(&self.name, self.schema.clone()))),
        };
        let scan = scan_exec::ScanExec::try_new(read, self.schema.clone(), projection, limit)?;
        Ok(Arc::new(match keyed {
            Some(k) => scan.with_keyed(k),
            None => scan,
        }))
    }
}

/// A source in a query: it plans (so a view's query over it can be planned and lowered),
/// but a one-shot scan is refused, since a source keeps no rows.
pub struct SourceScanProvider {
    name: String,
    schema: SchemaRef,
}

impl fmt::Debug for SourceScanProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SourceScanProvider({})", self.name)
    }
}

#[async_trait]
impl TableProvider for SourceScanProvider {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        _projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Err(DataFusionError::External(Box::new(
            crate::error::WeirError::not_supported(format!(
                "source \"{}\" keeps no rows and cannot be queried directly",
                self.name
            ))
            .with_hint("Create a materialized view over the source and query the view."),
        )))
    }
}

/// Scans a table: a point lookup by primary key, or a stream of all its rows.
pub struct TableScanProvider {
    pub table: Arc<TableStore>,
    /// Its primary key, for the planner: columns of the row are functionally dependent on
    /// it, so `GROUP BY id` may select the row's other columns, as in Postgres.
    constraints: datafusion::common::Constraints,
}

impl TableScanProvider {
    pub fn new(table: Arc<TableStore>) -> TableScanProvider {
        let constraints = datafusion::common::Constraints::new_unverified(
            table
                .primary_key()
                .map(|k| vec![datafusion::common::Constraint::PrimaryKey(k.to_vec())])
                .unwrap_or_default(),
        );
        TableScanProvider { table, constraints }
    }
}

impl fmt::Debug for TableScanProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TableScanProvider({})", self.table.name())
    }
}

#[async_trait]
impl TableProvider for TableScanProvider {
    /// Columns are reported nullable: NOT NULL is enforced by the table store with
    /// Postgres' error (23502), not by DataFusion while it builds the rows to insert.
    fn schema(&self) -> SchemaRef {
        nullable(&self.table.schema())
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn constraints(&self) -> Option<&datafusion::common::Constraints> {
        Some(&self.constraints)
    }

    /// `column = literal` and `column IN (literals)` filters on the primary key, or on the
    /// leading columns of an index, let a table read those keys instead of all its rows;
    /// DataFusion still applies every filter to what the scan returns (Inexact).
    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        let schema = self.table.schema();
        let mut keyed: Vec<usize> = self.table.primary_key().unwrap_or(&[]).to_vec();
        keyed.extend(
            self.table
                .indexes()
                .iter()
                .filter_map(|i| i.columns.first()),
        );
        Ok(filters
            .iter()
            .map(|f| match key_values(f, &schema) {
                Some((col, _)) if keyed.contains(&col) => TableProviderFilterPushDown::Inexact,
                _ => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let schema = nullable(&self.table.schema());
        if let Some(found) = self.point_lookup(filters)? {
            let found = RecordBatch::try_new(schema.clone(), found.columns().to_vec())?;
            let mem = MemTable::try_new(schema, vec![vec![found]])?;
            return mem.scan(state, projection, filters, limit).await;
        }
        let scan = Arc::new(
            self.table
                .scan()
                .map_err(|e| DataFusionError::External(Box::new(e)))?,
        );
        Ok(Arc::new(
            scan_exec::ScanExec::try_new(scan.clone(), schema, projection, limit)?
                .with_keyed(scan_exec::KeyedRead::Table(scan)),
        ))
    }
}

/// The most keys a point query reads one by one (the product of its IN lists); more are
/// read by a scan.
const MAX_PROBES: usize = 1024;

impl TableScanProvider {
    /// The rows a point query names: by the whole primary key, else by the leading columns
    /// of the index that covers most of them (equalities and IN lists, every combination
    /// of their values), read by key; None when the filters name no keys.
    fn point_lookup(&self, filters: &[Expr]) -> DfResult<Option<RecordBatch>> {
        let schema = self.table.schema();
        let wanted: Vec<(usize, Vec<ScalarValue>)> = filters
            .iter()
            .filter_map(|f| key_values(f, &schema))
            .collect();
        if wanted.is_empty() {
            return Ok(None);
        }
        let values_of = |c: usize| wanted.iter().find(|(col, _)| *col == c).map(|(_, v)| v);
        let err = |e: crate::error::WeirError| DataFusionError::External(Box::new(e));
        if let Some(pk) = self.table.primary_key()
            && let Some(keys) = probes(pk.iter().map(|&c| values_of(c)))?
        {
            tracing::debug!(table = %self.table.name(), "point query by primary key");
            return self.table.lookup(&keys).map_err(err);
        }
        let Some((index, probe)) = index_probe(&self.table.indexes(), filters, &schema)? else {
            return Ok(None);
        };
        tracing::debug!(table = %self.table.name(), index = %index.name, "point query by index");
        self.table.index_lookup(index.oid, &probe).map_err(err)
    }
}

/// The index whose leading columns the filters give most values for (equalities and IN
/// lists), and those values' combinations as one array per column; None when no index
/// fits or there are too many combinations.
fn index_probe(
    indexes: &[crate::state::table_index::IndexSpec],
    filters: &[Expr],
    schema: &SchemaRef,
) -> DfResult<Option<(crate::state::table_index::IndexSpec, Vec<ArrayRef>)>> {
    let wanted: Vec<(usize, Vec<ScalarValue>)> = filters
        .iter()
        .filter_map(|f| key_values(f, schema))
        .collect();
    let values_of = |c: usize| wanted.iter().find(|(col, _)| *col == c).map(|(_, v)| v);
    let best = indexes
        .iter()
        .map(|i| {
            let n = i
                .columns
                .iter()
                .take_while(|&&c| values_of(c).is_some())
                .count();
            (n, i)
        })
        .filter(|(n, _)| *n > 0)
        .max_by_key(|(n, _)| *n);
    let Some((n, index)) = best else {
        return Ok(None);
    };
    Ok(probes(index.columns[..n].iter().map(|&c| values_of(c)))?.map(|p| (index.clone(), p)))
}

/// Every combination of the given columns' values, as one array per column (None when a
/// column has no values or there are more than [`MAX_PROBES`] combinations).
fn probes<'a>(
    columns: impl Iterator<Item = Option<&'a Vec<ScalarValue>>>,
) -> DfResult<Option<Vec<ArrayRef>>> {
    let columns: Option<Vec<&Vec<ScalarValue>>> = columns.collect();
    let Some(columns) = columns else {
        return Ok(None);
    };
    let total = columns
        .iter()
        .try_fold(1usize, |n, v| n.checked_mul(v.len()));
    let Some(total) = total.filter(|t| *t <= MAX_PROBES) else {
        return Ok(None);
    };
    let mut out = Vec::with_capacity(columns.len());
    let mut repeat = total;
    for values in &columns {
        // each value of this column repeats for every combination of the columns after it
        repeat /= values.len().max(1);
        let row: Vec<ScalarValue> = (0..total)
            .map(|i| values[(i / repeat) % values.len()].clone())
            .collect();
        out.push(ScalarValue::iter_to_array(row)?);
    }
    Ok(Some(out))
}

/// `column = literal` (either way round) or `column IN (literals)`, where each literal is of
/// the column's type or converts to it and back unchanged (others can never be equal to a
/// key and are left out): (column index, the values as the column's type). NULLs match
/// nothing and are left out.
fn key_values(f: &Expr, schema: &SchemaRef) -> Option<(usize, Vec<ScalarValue>)> {
    use datafusion::logical_expr::expr::InList;
    let exact = |lit: &ScalarValue, ty: &datafusion::arrow::datatypes::DataType| {
        let v = lit.cast_to(ty).ok()?;
        // only a lossless conversion names the same key
        (v.cast_to(&lit.data_type()).ok()? == *lit).then_some(v)
    };
    match f {
        Expr::InList(InList {
            expr,
            list,
            negated: false,
        }) => {
            let Expr::Column(c) = expr.as_ref() else {
                return None;
            };
            let i = schema.index_of(&c.name).ok()?;
            let ty = schema.field(i).data_type();
            let mut values = Vec::with_capacity(list.len());
            for e in list {
                let Expr::Literal(v, _) = e else {
                    return None;
                };
                if v.is_null() {
                    continue;
                }
                // a value no key can equal leaves the others to look up; a repeated value
                // is looked up once
                if let Some(v) = exact(v, ty)
                    && !values.contains(&v)
                {
                    values.push(v);
                }
            }
            Some((i, values))
        }
        _ => {
            let (i, v) = key_equality(f, schema)?;
            Some((i, vec![v]))
        }
    }
}

/// `column = literal` (either way round) where the literal is of the column's type or
/// converts to it and back unchanged: (column index, the value as the column's type).
fn key_equality(f: &Expr, schema: &SchemaRef) -> Option<(usize, datafusion::scalar::ScalarValue)> {
    use datafusion::logical_expr::{BinaryExpr, Operator};
    let Expr::BinaryExpr(BinaryExpr {
        left,
        op: Operator::Eq,
        right,
    }) = f
    else {
        return None;
    };
    let (col, lit) = match (left.as_ref(), right.as_ref()) {
        (Expr::Column(c), Expr::Literal(v, _)) | (Expr::Literal(v, _), Expr::Column(c)) => (c, v),
        _ => return None,
    };
    let i = schema.index_of(&col.name).ok()?;
    let ty = schema.field(i).data_type();
    if lit.is_null() {
        return None;
    }
    let v = lit.cast_to(ty).ok()?;
    // only a lossless conversion names the same key
    (v.cast_to(&lit.data_type()).ok()? == *lit).then_some((i, v))
}

pub fn nullable(schema: &SchemaRef) -> SchemaRef {
    Arc::new(datafusion::arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<_>>(),
    ))
}

#[cfg(test)]
mod point_query_tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::prelude::{col, lit};
    use datafusion::scalar::ScalarValue;

    #[test]
    fn only_a_lossless_key_equality_is_a_point_query() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        assert_eq!(
            key_equality(&col("id").eq(lit(7i32)), &schema),
            Some((0, ScalarValue::Int32(Some(7))))
        );
        assert_eq!(
            key_equality(&lit(7i64).eq(col("id")), &schema),
            Some((0, ScalarValue::Int32(Some(7))))
        );
        assert_eq!(key_equality(&col("id").eq(lit(2.5f64)), &schema), None);
        assert_eq!(key_equality(&col("id").eq(lit(1i64 << 40)), &schema), None);
        assert_eq!(key_equality(&col("id").gt(lit(7i32)), &schema), None);
        assert_eq!(
            key_equality(&col("id").eq(lit(ScalarValue::Int32(None))), &schema),
            None
        );
        assert_eq!(
            key_equality(&col("name").eq(lit("x")), &schema),
            Some((1, ScalarValue::Utf8(Some("x".into()))))
        );
    }
}
