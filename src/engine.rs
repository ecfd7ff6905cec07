//! The database: opens the store and catalog, and executes parsed statements for a
//! session. The wire protocol lives in `server`; this is what it calls.

mod alter_table;
mod checks;
mod client;
mod comments;
mod create_table_as;
mod foreign_keys;
mod generated;
mod indexes;
mod merge;
mod on_conflict;
mod plain_views;
pub mod prepared;
mod returning;
mod schemas;
pub use client::CopyRows;
mod domains;
mod schema_undo;
pub mod security;
mod sequences;
mod sinks;
mod sql_functions;
pub(crate) mod table_locks;
mod temp_tables;
mod user_types;
mod views;
mod whole_rows;
mod with_dml;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::StringArray;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::ParamValues;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::logical_expr::{LogicalPlan, Statement as DfStatement};
use datafusion::sql::parser::Statement as DfParserStatement;
use datafusion::sql::sqlparser::ast;
use tracing::{info, warn};

use crate::catalog::rewrite::{null_projection_probe, reads_only_catalog, rewrite_statement};
use crate::catalog::{Catalog, ColumnDesc, RelationDesc, RelationKind, WatermarkDesc};
use crate::connectors;
use crate::dataflow::runtime::Dataflow;
use crate::error::{Result, WeirError, sqlstate};
use crate::plan::dml::plan_change;
use crate::plan::insert_values::literal_rows;
use crate::server::session::{Session, Undo, canonical_name};
use crate::serving::{PinnedViews, session_context};
use crate::sql::parser::{
    CreateSource, CreateTable, Parsed, RelationKindFilter, Statement, WatermarkSpec,
};
use crate::sql::types::SqlType;
use crate::state::fjall_store::FjallStore;
use crate::state::store::Store;
use crate::state::table::{Change, TableStore, append_only_error};

/// What a statement produced.
pub enum Output {
    /// A result set, streamed.
    Rows {
        schema: SchemaRef,
        stream: SendableRecordBatchStream,
    },
    /// A small result set computed in full.
    Batches {
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
        tag: &'static str,
    },
    /// A command with its completion tag (`CREATE TABLE`, `INSERT 0 3`).
    Command(String),
    /// BEGIN or START TRANSACTION (its command tag).
    TransactionStart(&'static str),
    TransactionEnd(&'static str),
    /// A setting changed; reported to the client when it is one clients track.
    SetVariable {
        name: String,
        value: String,
    },
    /// `RESET name` / `RESET ALL` / `RESET ROLE` (tagged RESET, as in Postgres; the
    /// settings it changes back are reported as every statement's are).
    Reset,
    /// `SUBSCRIBE`: a result set that never ends on its own.
    Subscribe(crate::serving::subscribe::SubscribeStream),
    /// `COPY ... FROM STDIN` is waiting for data (kept in the session's `copy_in`) for
    /// this many columns.
    CopyIn {
        columns: usize,
    },
    /// `COPY ... TO STDOUT`.
    CopyOut {
        schema: SchemaRef,
        rows: client::CopyRows,
        options: crate::sql::client_stmts::CopyOptions,
    },
}

/// Field metadata: the OID of the relation a result column comes from, and its attnum.
pub const TABLE_OID_KEY: &str = "weir.table_oid";
pub const ATTNUM_KEY: &str = "weir.attnum";

pub struct Engine {
    pub catalog: Arc<Catalog>,
    pub data_dir: PathBuf,
    pub dataflow: Arc<Dataflow>,
    pub limits: EngineLimits,
    /// Sinks resuming at start (see `sinks.rs`, `read_sink_progress`).
    pub(crate) sink_restarts: parking_lot::Mutex<sinks::SinkRestarts>,
    /// The checkpoint fingerprint of each running materialized view and sink graph (what
    /// its checkpoints carry), by OID: a rename records it in the views that follow.
    pub(crate) fingerprints: parking_lot::Mutex<std::collections::HashMap<u32, String>>,
}

/// Server-wide limits (`weir serve` flags).
#[derive(Debug, Clone)]
pub struct EngineLimits {
    /// Most memory one statement's operators may hold; the largest `work_mem`.
    pub query_memory_limit: usize,
    /// `--max-connections` (shown as `max_connections`).
    pub max_connections: usize,
    /// `--checkpoint-interval` (None: checkpoints are off).
    pub checkpoint_interval: Option<std::time::Duration>,
    /// `--memory-limit`, bytes (None: no limit).
    pub memory_limit: Option<u64>,
    /// `--state-cache-size`, bytes (None: a third of the memory limit; no limit: state
    /// never spills).
    pub state_cache_size: Option<u64>,
    /// `--secrets-key-file` (None: `secrets.key` in the data directory).
    pub secrets_key_file: Option<PathBuf>,
    /// `--workers`: the shards each new view's dataflow runs in.
    pub workers: usize,
}

impl Default for EngineLimits {
    fn default() -> Self {
        EngineLimits {
            query_memory_limit: 2 << 30,
            max_connections: 1000,
            checkpoint_interval: Some(std::time::Duration::from_secs(1)),
            memory_limit: None,
            state_cache_size: None,
            secrets_key_file: None,
            workers: 1,
        }
    }
}

impl Engine {
    pub async fn open(data_dir: &Path) -> Result<Arc<Engine>> {
        Self::open_with(data_dir, EngineLimits::default()).await
    }

    pub async fn open_with(data_dir: &Path, limits: EngineLimits) -> Result<Arc<Engine>> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| WeirError::io(&format!("cannot create {}", data_dir.display()), e))?;
        crate::parallel::set_workers(limits.workers);
        // files statements spilled before a crash are garbage now
        let spill = data_dir.join("spill");
        let _ = std::fs::remove_dir_all(&spill);
        std::fs::create_dir_all(&spill)
            .map_err(|e| WeirError::io(&format!("cannot create {}", spill.display()), e))?;
        let store_memory = match limits.memory_limit.filter(|l| *l != u64::MAX) {
            Some(l) => crate::state::fjall_store::StoreMemory::for_limit(l),
            None => crate::state::fjall_store::StoreMemory::DEFAULT,
        };
        // one block cache for the process: the store's and the spill store's blocks
        let cache = crate::state::fjall_store::BlockCache::new(store_memory.cache);
        // under a memory limit, views' state spills past its budget (state/spill.rs)
        if let Some(limit) = limits.memory_limit.filter(|l| *l != u64::MAX) {
            let budget = limits.state_cache_size.unwrap_or(limit / 3);
            crate::state::spill::set_cache_budget(budget);
            if crate::state::spill::store().is_none() {
                match crate::state::spill::SpillStore::open(
                    &spill.join("state"),
                    &cache,
                    store_memory.memtable,
                ) {
                    Ok(s) => {
                        crate::state::spill::install(s);
                        info!(
                            state_cache_size = %crate::limits::format_size(budget as usize),
                            "views' state beyond the state cache spills to {}",
                            spill.join("state").display()
                        );
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot open the state spill store: state stays in memory");
                    }
                }
            }
        }
        let store: Arc<dyn Store> = Arc::new(FjallStore::open_with(
            &data_dir.join("store"),
            store_memory.memtable,
            cache.clone(),
        )?);
        let catalog = Arc::new(Catalog::open(store.clone())?);
        catalog.open_secrets(limits.secrets_key_file.as_deref(), data_dir)?;
        info!(
            relations = catalog.entries().len(),
            data_dir = %data_dir.display(),
            "catalog loaded"
        );
        let engine = Arc::new(Engine {
            catalog,
            data_dir: data_dir.to_owned(),
            dataflow: Dataflow::start_with(
                limits.checkpoint_interval.map(|i| (store, i)),
                match limits.memory_limit {
                    Some(l) => crate::state::memory::MemoryBudget::start(l),
                    None => crate::state::memory::MemoryBudget::unlimited(),
                },
            ),
            limits,
            sink_restarts: Default::default(),
            fingerprints: Default::default(),
        });
        {
            // at --memory-limit, snapshot caches go first (rebuilt on demand)
            let weak = Arc::downgrade(&engine);
            engine
                .dataflow
                .sources
                .memory
                .on_limit(Box::new(move || match weak.upgrade() {
                    Some(e) => e.dataflow.drop_caches(),
                    None => 0,
                }));
        }
        engine.read_sink_progress();
        engine.drop_leftover_temp_tables().await;
        engine.restore_views().await?;
        for entry in engine.catalog.entries() {
            if let Err(e) = engine.start_table_consumer(&entry) {
                warn!(table = %entry.desc.name, error = %e, "cannot start the table's consumer");
            }
        }
        engine.restore_sinks();
        Ok(engine)
    }

    pub fn new_session(&self) -> Session {
        self.new_session_with_pid(std::process::id() as i32)
    }

    fn new_session_with_pid(&self, pid: i32) -> Session {
        let identity = Arc::new(parking_lot::RwLock::new(
            crate::server::session::Identity::of(crate::catalog::SUPERUSER_OID),
        ));
        let pinned = Arc::new(PinnedViews::default());
        let memory = Arc::new(crate::serving::memory::StatementMemoryPool::new(
            self.limits.query_memory_limit,
        ));
        let session = Session::new(
            session_context(
                self.catalog.clone(),
                self.dataflow.clone(),
                pinned.clone(),
                memory.clone(),
                &self.data_dir.join("spill"),
                {
                    let identity = identity.clone();
                    Arc::new(move || identity.read().current())
                },
            ),
            pinned,
            memory,
            self.limits.clone(),
            identity.clone(),
        );
        crate::sql::transaction_time::register(&session.ctx, session.tx_start.clone());
        crate::sql::transaction_ids::register(&session.ctx, session.tx_start.clone());
        session.register_sleep();
        // current_schema / current_schemas: the session's search path
        {
            let (catalog, settings, identity) = (
                self.catalog.clone(),
                session.settings_handle(),
                identity.clone(),
            );
            crate::catalog::functions::register_search_path(
                &session.ctx,
                self.catalog.clone(),
                Arc::new(move || {
                    let path = settings.read().get("search_path").unwrap_or_default();
                    let user = catalog
                        .role_name(identity.read().session_user)
                        .unwrap_or_default();
                    crate::catalog::schemas::path_schemas(&catalog, &path, &user)
                }),
            );
        }
        crate::catalog::functions::register_identity(
            &session.ctx,
            self.catalog.clone(),
            Arc::new(move || {
                let i = identity.read();
                (i.current(), i.session_user)
            }),
            pid,
        );
        session
    }

    /// A session of `role` (a client that logged in as it).
    pub fn session_for(&self, role: u32, pid: i32) -> Session {
        let mut session = self.new_session_with_pid(pid);
        session.pid = pid;
        crate::server::advisory_locks::set_pid(session.lock_holder, pid);
        *session.identity.write() = crate::server::session::Identity::of(role);
        let name = self.catalog.role_name(role).unwrap_or_default();
        session.set_identity("session_authorization", &name);
        session.set_identity("role", "none");
        session
    }

    /// [`Self::describe`] of an INSERT, UPDATE or DELETE (or of a query: its plan).
    pub(crate) async fn describe_statement(
        &self,
        session: &Session,
        q: &ast::Statement,
    ) -> Result<(Vec<Option<FieldRef>>, Option<SchemaRef>)> {
        if merge::joins_other_relations(q) {
            return self.describe_join_dml(session, q).await;
        }
        // `VALUES ($1, DEFAULT)`: described as it runs, the defaults filled in (DataFusion
        // read `DEFAULT` as a column)
        let filled = self.fill_defaults(q)?;
        let q = filled.as_ref().unwrap_or(q);
        // ON CONFLICT is ours to run (DataFusion plans no such INSERT): the INSERT without
        // it gives the parameters' types (a `$n` only in the clause is typed as declared)
        if matches!(q, ast::Statement::Insert(i) if i.on.is_some()) {
            let mut q = q.clone();
            on_conflict::take_on_conflict(&mut q);
            let r = returning::take_returning(&mut q);
            // (the alias served ON CONFLICT and RETURNING)
            if let ast::Statement::Insert(ins) = &mut q {
                ins.table_alias = None;
            }
            let plan = self.plan_ast(session, &q).await?;
            let params = parameter_types(&plan)?;
            let shown = match &r {
                Some(r) => Some(self.result_schema(&self.returning_plan(session, r).await?)),
                None => None,
            };
            return Ok((params, shown));
        }
        if returning::has_returning(q) {
            let mut q = q.clone();
            let r = returning::take_returning(&mut q)
                .ok_or_else(|| WeirError::internal("RETURNING disappeared"))?;
            let plan = self.plan_ast(session, &q).await?;
            let params = parameter_types(&plan)?;
            let shown = self.returning_plan(session, &r).await?;
            return Ok((params, Some(self.result_schema(&shown))));
        }
        let plan = self.plan_ast(session, q).await?;
        let params = parameter_types(&plan)?;
        let schema = match &plan {
            LogicalPlan::Dml(_) => None,
            p => Some(self.result_schema(p)),
        };
        Ok((params, schema))
    }

    /// Plan a statement without running it: parameter types and the result schema
    /// (None when it returns no rows). Used by the extended protocol's Describe.
    pub async fn describe(
        &self,
        session: &Session,
        parsed: &Parsed,
    ) -> Result<(Vec<Option<FieldRef>>, Option<SchemaRef>)> {
        // a relation the role may not read does not show its columns either (Postgres
        // refuses at Parse)
        self.check_privileges(session, &parsed.stmt)?;
        match &parsed.stmt {
            Statement::Query(q) if with_dml::applies(q) => self.describe_with_dml(session, q).await,
            Statement::Dml(q) | Statement::Query(q) => self.describe_statement(session, q).await,
            Statement::ShowVariable(name) => Ok((vec![], Some(show_schema(name)))),
            Statement::ShowRelations(_) => Ok((vec![], Some(show_relations_schema()))),
            Statement::Subscribe(s) => Ok((vec![], Some(self.subscribe_schema(s)?))),
            // a cursor's parameters are its query's; DECLARE itself returns no rows
            Statement::Declare(d) => match &d.query {
                crate::sql::client_stmts::CursorQuery::Query(q) => {
                    let plan = self.plan_ast(session, q).await?;
                    Ok((parameter_types(&plan)?, None))
                }
                crate::sql::client_stmts::CursorQuery::Subscribe(_) => Ok((vec![], None)),
            },
            Statement::Fetch(f) => Ok((vec![], Some(self.cursor_schema(session, &f.cursor)?))),
            Statement::Execute(e) => {
                let body = self.executable(session, e)?;
                Box::pin(self.describe(session, &body)).await
            }
            Statement::ExplainView(_) => Ok((
                vec![],
                Some(Arc::new(Schema::new(vec![Field::new(
                    "QUERY PLAN",
                    DataType::Utf8,
                    false,
                )]))),
            )),
            _ => Ok((vec![], None)),
        }
    }

    async fn plan_ast(&self, session: &Session, stmt: &ast::Statement) -> Result<LogicalPlan> {
        let mut stmt = stmt.clone();
        self.whole_row_references(&mut stmt);
        self.expand_plain_views(&mut stmt)?;
        self.inline_sql_functions(&mut stmt)?;
        if rewrite_statement(&mut stmt)?.session_windows {
            return Err(WeirError::not_supported(
                "SESSION windows can be used in materialized views only",
            ));
        }
        let state = session.ctx.state();
        let _pending = crate::plan::match_recognize::prepare_statement(
            &mut stmt,
            &state,
            crate::plan::asof::Mode::Query,
        )
        .await?;
        // a result column name twice beside a wildcard (`SELECT *, a FROM t`) is planned
        // again with the other items renamed, once per repeated name
        let mut renames = 0;
        let mut expansions = 0;
        let plan = loop {
            let e = match state
                .statement_to_plan(DfParserStatement::Statement(Box::new(stmt.clone())))
                .await
            {
                Ok(plan) => break plan,
                Err(e) => e,
            };
            match crate::error::repeated_projection_name(&e.to_string()) {
                Some(name)
                    if renames < 16
                        && crate::catalog::rewrite::rename_beside_wildcards(&mut stmt, &name) =>
                {
                    renames += 1;
                }
                // the name comes from a second wildcard: it is expanded, then named (a
                // round per level of subqueries in FROM)
                Some(_) if expansions < 4 => {
                    expansions += 1;
                    if !expand_repeated_wildcards(&state, &mut stmt, expansions).await? {
                        return Err(e.into());
                    }
                }
                _ => return Err(e.into()),
            }
        };
        let plan = crate::catalog::pg_semantics::fix_planned(plan)?;
        crate::plan::asof::plan(plan, crate::plan::asof::Mode::Query)
    }

    pub async fn execute(
        &self,
        session: &mut Session,
        parsed: &Parsed,
        params: Option<ParamValues>,
    ) -> Result<Output> {
        self.execute_with_notices(session, parsed, params, None)
            .await
    }

    /// Execute, sending progress lines of long statements (view backfills) to `notices`.
    /// A schema change inside a transaction block (or a multi-statement query) leaves in
    /// the undo log what reverses it (`engine/schema_undo.rs`).
    pub async fn execute_with_notices(
        &self,
        session: &mut Session,
        parsed: &Parsed,
        params: Option<ParamValues>,
        notices: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        let before = ((session.in_transaction || session.implicit_transaction)
            && changes_schema(&parsed.stmt))
        .then(|| self.schema_mark());
        // (boxed: the statement's future is large, and deep expressions plan on this stack)
        let out = Box::pin(self.execute_statement(session, parsed, params, notices)).await;
        if let (Some(before), Ok(_)) = (&before, &out) {
            let undo = self.schema_undo(before);
            session.undo.extend(undo);
        }
        // a statement outside a block is its own transaction: what it notified is sent
        // when it succeeded
        if !(session.in_transaction || session.implicit_transaction) {
            match &out {
                Ok(_) => session.outbox.commit(session.pid),
                Err(_) => session.outbox.discard(),
            }
        }
        out
    }

    async fn execute_statement(
        &self,
        session: &mut Session,
        parsed: &Parsed,
        params: Option<ParamValues>,
        notices: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        session.settle_function_settings();
        session.sync_time_zone();
        if let Some(what) = write_kind(&parsed.stmt) {
            session.check_writable(what)?;
        }
        crate::metrics::global().query(query_kind(&parsed.stmt));
        self.check_privileges(session, &parsed.stmt)?;
        match &parsed.stmt {
            Statement::Security(s) => {
                let out = self.security(session, s, notices.as_ref()).await?;
                // RESET ROLE / RESET SESSION AUTHORIZATION are tagged RESET, as in Postgres
                let reset = parsed
                    .text
                    .trim_start()
                    .get(..5)
                    .is_some_and(|w| w.eq_ignore_ascii_case("reset"));
                Ok(match out {
                    Output::Command(_) | Output::SetVariable { .. } if reset => Output::Reset,
                    out => out,
                })
            }
            Statement::CreateView(cv) => self.create_view(session, cv, &parsed.text, notices).await,
            Statement::CreatePlainView(v) => self.create_plain_view(session, v, &parsed.text).await,
            Statement::AlterTable(a) => self.alter_table(session, a, notices.as_ref()).await,
            Statement::RenameRelation {
                kind,
                name,
                to,
                if_exists,
            } => self.rename_relation(*kind, name, to, *if_exists, notices.as_ref()),
            Statement::CreateFunction(f) => self.create_sql_function(session, f),
            Statement::DropFunction(d) => self.drop_sql_function(d),
            Statement::CreateSequence(cs) => {
                let o = &cs.options;
                let (min, max) = o.bounds(o.increment.unwrap_or(1) > 0);
                let spec = crate::catalog::sequences::SequenceSpec::new(
                    o.start,
                    o.increment,
                    min,
                    max,
                    o.cycle,
                )?;
                let created = self.create_sequence(
                    &cs.name,
                    cs.if_not_exists,
                    spec,
                    &parsed.text,
                    session.role(),
                )?;
                if !created && let Some(n) = &notices {
                    let _ = n.send(format!("relation \"{}\" already exists, skipping", cs.name));
                }
                if created && let Some(owned_by) = &o.owned_by {
                    self.sequence_owned_by(&cs.name, owned_by.as_ref())?;
                }
                Ok(Output::Command("CREATE SEQUENCE".into()))
            }
            Statement::AlterSequence(a) => self.alter_sequence(a, notices.as_ref()),
            Statement::AddIdentity(a) => self.add_identity(session, a, notices.as_ref()),
            Statement::AlterIdentity(a) => self.alter_identity(a, notices.as_ref()),
            Statement::ExplainView(cv) => self.explain_view(session, cv).await,
            Statement::ExplainAnalyzeView(name) => self.explain_analyze_view(name),
            Statement::Flush => {
                self.flush().await?;
                Ok(Output::Command("FLUSH".into()))
            }
            Statement::SetConstraints { names, deferred } => {
                self.set_constraints(session, names.as_deref(), *deferred, notices.as_ref())
                    .await
            }
            // Weir keeps no planner statistics to gather (ANALYZE), and its store
            // reclaims the space of deleted rows as it compacts (VACUUM): both check the
            // relations they name, as Postgres does, and have nothing more to do
            Statement::Maintenance { vacuum, tables } => {
                let verb = if *vacuum { "VACUUM" } else { "ANALYZE" };
                if *vacuum && session.in_transaction {
                    return Err(WeirError::new(
                        sqlstate::ACTIVE_SQL_TRANSACTION,
                        "VACUUM cannot run inside a transaction block",
                    ));
                }
                for t in tables {
                    if self.catalog.get(t).is_none() {
                        return Err(WeirError::undefined_table(t));
                    }
                }
                Ok(Output::Command(verb.into()))
            }
            // the store keeps indexes current and rows in key order itself: REINDEX and
            // CLUSTER check what they name, as Postgres does, and have nothing to do
            Statement::Reindex {
                what,
                name,
                concurrently,
            } => {
                let in_block = |what: &str| {
                    WeirError::new(
                        sqlstate::ACTIVE_SQL_TRANSACTION,
                        format!("{what} cannot run inside a transaction block"),
                    )
                };
                if session.in_transaction && *concurrently {
                    return Err(in_block("REINDEX CONCURRENTLY"));
                }
                let n = name.as_deref().unwrap_or_default();
                let is_relation = |n: &str| {
                    self.catalog.get(n).is_some_and(|e| {
                        e.desc.kind.is_table() || e.desc.kind == RelationKind::MaterializedView
                    })
                };
                match what.as_str() {
                    "index" if self.catalog.index_by_name(n).is_some() => {}
                    "index" if self.catalog.get(n).is_some() => {
                        return Err(WeirError::new(
                            sqlstate::WRONG_OBJECT_TYPE,
                            format!("\"{n}\" is not an index"),
                        ));
                    }
                    "table" if is_relation(n) => {}
                    "table" if self.catalog.name_in_use(n) => {
                        return Err(WeirError::new(
                            sqlstate::WRONG_OBJECT_TYPE,
                            format!("\"{n}\" is not a table or materialized view"),
                        ));
                    }
                    "index" | "table" => return Err(WeirError::undefined_table(n)),
                    kind => {
                        if session.in_transaction {
                            return Err(in_block(&format!("REINDEX {}", kind.to_uppercase())));
                        }
                        match (kind, name.as_deref()) {
                            ("schema", Some("public" | "pg_catalog" | "information_schema")) => {}
                            ("schema", other) => {
                                return Err(WeirError::new(
                                    sqlstate::INVALID_SCHEMA_NAME,
                                    format!(
                                        "schema \"{}\" does not exist",
                                        other.unwrap_or_default()
                                    ),
                                ));
                            }
                            (_, None) => {}
                            (_, Some(db)) if db == crate::catalog::DATABASE_NAME => {}
                            (_, Some(_)) => {
                                return Err(WeirError::not_supported(
                                    "can only reindex the currently open database",
                                ));
                            }
                        }
                    }
                }
                Ok(Output::Command("REINDEX".into()))
            }
            Statement::Cluster { table, index } => {
                let Some(t) = table else {
                    if session.in_transaction {
                        return Err(WeirError::new(
                            sqlstate::ACTIVE_SQL_TRANSACTION,
                            "CLUSTER cannot run inside a transaction block",
                        ));
                    }
                    return Ok(Output::Command("CLUSTER".into()));
                };
                let entry = self
                    .catalog
                    .get(t)
                    .ok_or_else(|| WeirError::undefined_table(t))?;
                if !entry.desc.kind.is_table() && entry.desc.kind != RelationKind::MaterializedView
                {
                    return Err(WeirError::new(
                        sqlstate::WRONG_OBJECT_TYPE,
                        format!("\"{t}\" is not a table or materialized view"),
                    ));
                }
                if let Some(i) = index
                    && !entry.desc.all_indexes().iter().any(|x| &x.name == i)
                {
                    return Err(WeirError::new(
                        sqlstate::UNDEFINED_OBJECT,
                        format!("index \"{i}\" for table \"{t}\" does not exist"),
                    ));
                }
                Ok(Output::Command("CLUSTER".into()))
            }
            Statement::Refresh(name) => {
                let entry = self
                    .catalog
                    .get(name)
                    .ok_or_else(|| WeirError::undefined_table(name))?;
                if entry.desc.kind != RelationKind::MaterializedView {
                    return Err(WeirError::not_supported(format!(
                        "\"{name}\" is not a materialized view"
                    )));
                }
                self.flush().await?;
                Ok(Output::Command("REFRESH MATERIALIZED VIEW".into()))
            }
            Statement::Checkpoint => {
                self.dataflow.checkpoint().await?;
                Ok(Output::Command("CHECKPOINT".into()))
            }
            Statement::Query(q) if with_dml::applies(q) => {
                self.run_with_dml(session, q, params).await
            }
            Statement::Query(q) => match self.run_query(session, q, params).await {
                Ok(out) => Ok(out),
                Err(e) => self.catalog_probe(session, q, e).await,
            },
            Statement::Dml(q) => self.execute_dml_fitted(session, q, params).await,
            Statement::Comment(c) => self.comment_on(session, c),
            Statement::Merge(m) => self.merge(session, m).await,
            Statement::Lock(l) => self.lock_tables(session, l).await,
            Statement::Truncate(tables, cascade, restart) => {
                self.truncate(session, tables, *cascade, *restart, notices.as_ref())
                    .await
            }
            Statement::BulkInsert(scan) => self.bulk_insert(session, scan).await,
            Statement::CreateTable(ct) => {
                // LIKE's columns written out, and the types only the catalog knows (enums)
                let mut ct = match &ct.like {
                    Some(like) => self.expand_like(ct, like)?,
                    None => ct.as_ref().clone(),
                };
                let mut domains = Vec::new();
                for col in &mut ct.columns {
                    // a domain's column: of its base type, with its default when it has
                    // none of its own
                    if let Some(d) = self.catalog.domain_of(&col.ty) {
                        col.ty = d.base.clone();
                        let inherits =
                            col.default.is_none() && col.identity.is_none() && d.default.is_some();
                        if inherits {
                            col.default.clone_from(&d.default);
                        }
                        domains.push(crate::catalog::domains::ColumnDomain {
                            column: col.name.clone(),
                            oid: d.oid,
                            default: inherits,
                        });
                    }
                    self.catalog.resolve_sql_type(&mut col.ty)?;
                }
                ct.domains.extend(domains);
                let ct = &ct;
                if !ct.checks.is_empty() {
                    self.check_table_checks(&session.ctx, ct)?;
                }
                let generated = ct.generated();
                if !generated.is_empty() {
                    if !ct.with_options.is_empty() {
                        return Err(WeirError::not_supported(
                            "a connector table cannot have generated columns (compute them in a view)",
                        ));
                    }
                    let columns = table_columns(ct);
                    generated::compile(&session.ctx, &ct.name, &columns, &generated)?;
                }
                let existed = self.catalog.get(&ct.name).is_some();
                if existed
                    && ct.if_not_exists
                    && let Some(n) = &notices
                {
                    let _ = n.send(format!("relation \"{}\" already exists, skipping", ct.name));
                }
                let uniques = self.unique_indexes(ct)?;
                self.check_constant_defaults(session, ct).await?;
                self.create_table(ct, &parsed.text, session.role())?;
                if let Some(on_commit) = ct.temporary
                    && !existed
                {
                    session.temp_tables.push((ct.name.clone(), on_commit));
                }
                if !existed {
                    // UNIQUE constraints: a unique index each, named as Postgres names them
                    for ci in &uniques {
                        Box::pin(self.create_index(session, ci, None)).await?;
                    }
                }
                Ok(Output::Command("CREATE TABLE".into()))
            }
            Statement::CreateSink(cs) => self.create_sink(session, cs, &parsed.text).await,
            Statement::CreateSource(cs) => {
                self.create_source(cs, &parsed.text, session.role())?;
                Ok(Output::Command("CREATE SOURCE".into()))
            }
            Statement::Drop(d) if d.kind == crate::sql::parser::DropKind::Index => {
                // an index that keeps a UNIQUE constraint goes with the constraint only
                for n in &d.names {
                    if let Some((e, _)) = self.catalog.index_by_name(n)
                        && e.desc.indexes.iter().any(|i| &i.name == n && i.constraint)
                    {
                        return Err(WeirError::new(
                            sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                            format!(
                                "cannot drop index {n} because constraint {n} on table {} requires it",
                                e.desc.name
                            ),
                        )
                        .with_hint(format!(
                            "You can drop constraint {n} on table {} instead.",
                            e.desc.name
                        )));
                    }
                    if let Some((e, ix)) = self.catalog.index_by_name(n)
                        && let Some((child, fk)) =
                            self.foreign_key_needing_index(&e.desc, n, &ix.columns)
                    {
                        return Err(WeirError::new(
                            sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                            format!("cannot drop index {n} because other objects depend on it"),
                        )
                        .with_detail(format!(
                            "constraint {fk} on table {child} depends on index {n}"
                        ))
                        .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
                    }
                }
                self.drop_indexes(session, &d.names, d.if_exists, notices.as_ref())
                    .await
            }
            Statement::Drop(d) if d.kind == crate::sql::parser::DropKind::Type => {
                self.drop_types(session, &d.names, d.if_exists, d.cascade, notices.as_ref())
                    .await
            }
            Statement::CreateEnumType { name, labels } => {
                self.create_enum_type(session, name, labels)
            }
            Statement::CreateDomain(d) => self.create_domain(session, d),
            Statement::AlterDomain { name, op } => {
                self.alter_domain(session, name, op, notices.as_ref()).await
            }
            Statement::DropDomain {
                names,
                if_exists,
                cascade,
            } => {
                self.drop_domains(session, names, *if_exists, *cascade, notices.as_ref())
                    .await
            }
            Statement::AlterColumnSetting {
                table,
                if_exists,
                column,
                what,
                value,
            } => {
                self.alter_column_setting(table, *if_exists, column, what, value, notices.as_ref())
            }
            Statement::StorageParameters {
                relation,
                kind,
                if_exists,
                set,
            } => self.storage_parameters(
                relation,
                kind,
                *if_exists,
                set.as_deref(),
                notices.as_ref(),
            ),
            Statement::AlterType { name, op } => {
                self.alter_type(session, name, op, notices.as_ref()).await
            }
            Statement::Drop(d) => {
                let in_block = session.in_transaction || session.implicit_transaction;
                self.drop_relations(
                    &d.names,
                    d.kind,
                    d.if_exists,
                    d.cascade,
                    notices.as_ref(),
                    in_block,
                )
                .await
            }
            Statement::CreateIndex(ci) => self.create_index(session, ci, notices.as_ref()).await,
            Statement::ShowRelations(which) => {
                let names: Vec<String> = self
                    .catalog
                    .entries()
                    .iter()
                    .filter(|e| match which {
                        RelationKindFilter::Tables => e.desc.kind.is_table(),
                        RelationKindFilter::Sources => e.desc.kind == RelationKind::Source,
                        RelationKindFilter::MaterializedViews => {
                            e.desc.kind == RelationKind::MaterializedView
                        }
                        RelationKindFilter::Sinks => e.desc.kind == RelationKind::Sink,
                    })
                    .map(|e| e.desc.name.clone())
                    .collect();
                let schema = show_relations_schema();
                let batch =
                    RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(names))])?;
                Ok(Output::Batches {
                    schema,
                    batches: vec![batch],
                    tag: "SHOW",
                })
            }
            Statement::ShowVariable(name) => {
                if name == "all" {
                    let all = session.all();
                    let schema = Arc::new(Schema::new(vec![
                        Field::new("name", DataType::Utf8, false),
                        Field::new("setting", DataType::Utf8, false),
                        Field::new("description", DataType::Utf8, false),
                    ]));
                    let batch = RecordBatch::try_new(
                        schema.clone(),
                        vec![
                            Arc::new(StringArray::from_iter_values(all.iter().map(|(k, _)| k))),
                            Arc::new(StringArray::from_iter_values(all.iter().map(|(_, v)| v))),
                            Arc::new(StringArray::from_iter_values(all.iter().map(|_| ""))),
                        ],
                    )?;
                    return Ok(Output::Batches {
                        schema,
                        batches: vec![batch],
                        tag: "SHOW",
                    });
                }
                let value = session.get(name).ok_or_else(|| {
                    WeirError::new(
                        sqlstate::UNDEFINED_OBJECT,
                        format!("unrecognized configuration parameter \"{name}\""),
                    )
                })?;
                let schema = show_schema(name);
                let batch = RecordBatch::try_new(
                    schema.clone(),
                    vec![Arc::new(StringArray::from(vec![value]))],
                )?;
                Ok(Output::Batches {
                    schema,
                    batches: vec![batch],
                    tag: "SHOW",
                })
            }
            Statement::SetVariable { name, value, local } => {
                let n = Session::normalize(name);
                // `SET role = x` is SET ROLE; `SET session_authorization = x` likewise
                if n == "role" || n == "session_authorization" {
                    use crate::sql::security::SecurityStmt;
                    let v = value.trim().trim_matches('\'');
                    let default =
                        v.eq_ignore_ascii_case("none") || v.eq_ignore_ascii_case("default");
                    let target = (!default).then(|| v.to_owned());
                    let stmt = if n == "role" {
                        SecurityStmt::SetRole(target)
                    } else {
                        SecurityStmt::SetSessionAuthorization(target)
                    };
                    return self.security(session, &stmt, None).await;
                }
                match session.set_in_block(&n, value, *local)? {
                    Some(stored) => Ok(Output::SetVariable {
                        name: canonical_name(&n).to_owned(),
                        value: stored,
                    }),
                    None => {
                        if let Some(tx) = &notices {
                            let _ = tx.send(
                                "WARNING: SET LOCAL can only be used in transaction blocks"
                                    .to_owned(),
                            );
                        }
                        Ok(Output::Command("SET".into()))
                    }
                }
            }
            Statement::ResetVariable(name) => {
                session.reset(name);
                Ok(Output::Reset)
            }
            Statement::NoOp("DISCARD TEMP") => {
                let temp: Vec<String> = session.temp_tables.drain(..).map(|(n, _)| n).collect();
                self.drop_temp_tables(&temp).await;
                Ok(Output::Command("DISCARD TEMP".into()))
            }
            Statement::NoOp(tag) => Ok(Output::Command((*tag).to_owned())),
            Statement::Begin(modes) => {
                // the command tag names the statement as written
                let tag = if parsed
                    .text
                    .trim_start()
                    .get(..5)
                    .is_some_and(|w| w.eq_ignore_ascii_case("start"))
                {
                    "START TRANSACTION"
                } else {
                    "BEGIN"
                };
                if session.in_transaction {
                    // Postgres warns and stays in the block
                    if let Some(n) = notices.as_ref() {
                        let _ =
                            n.send("WARNING: there is already a transaction in progress".into());
                    }
                    return Ok(Output::TransactionStart(tag));
                }
                check_tx_modes(modes)?;
                session.begin_block(modes.read_only);
                Ok(Output::TransactionStart(tag))
            }
            Statement::SetTransaction {
                session_default,
                modes,
            } => {
                check_tx_modes(modes)?;
                // outside a block it changes nothing: Postgres warns
                if !*session_default
                    && !session.in_transaction
                    && let Some(n) = notices.as_ref()
                {
                    let _ = n.send(
                        "WARNING: SET TRANSACTION can only be used in transaction blocks".into(),
                    );
                }
                if *session_default {
                    if let Some(i) = &modes.isolation {
                        session.set("default_transaction_isolation", i)?;
                    }
                    if let Some(r) = modes.read_only {
                        session.set(
                            "default_transaction_read_only",
                            if r { "on" } else { "off" },
                        )?;
                    }
                } else if let Some(r) = modes.read_only {
                    session.set_read_only(r)?;
                }
                Ok(Output::Command("SET".into()))
            }
            Statement::Commit => {
                no_transaction_warning(session, notices.as_ref());
                // deferred constraints are checked now: one that fails rolls the block back
                if session.in_transaction
                    && !session.aborted
                    && let Err(e) = self.check_deferred(session, None).await
                {
                    session.end_block_settings(false);
                    session.end_block();
                    self.rollback(session).await?;
                    return Err(e);
                }
                // COMMIT of a failed block rolls it back, as in Postgres
                let tag = if session.aborted {
                    self.rollback(session).await?;
                    "ROLLBACK"
                } else {
                    self.commit_undo(session);
                    "COMMIT"
                };
                session.end_block_settings(tag == "COMMIT");
                session.end_block();
                Ok(Output::TransactionEnd(tag))
            }
            Statement::Rollback => {
                no_transaction_warning(session, notices.as_ref());
                session.end_block_settings(false);
                session.end_block();
                session.outbox.discard();
                let kept = self.rollback_until(session, 0).await?;
                kept_changes_warning(&kept, notices.as_ref());
                Ok(Output::TransactionEnd("ROLLBACK"))
            }
            Statement::Savepoint(name) => self.savepoint(session, name),
            Statement::Release(name) => self.release(session, name),
            Statement::RollbackTo(name) => self.rollback_to(session, name, notices.as_ref()).await,
            Statement::Subscribe(s) => Ok(Output::Subscribe(self.subscribe(s)?)),
            Statement::Declare(d) => self.declare(session, d, params).await,
            Statement::Fetch(f) => self.fetch(session, f).await,
            Statement::Close(name) => self.close(session, name.as_deref()),
            Statement::Copy(c) => self.copy(session, c).await,
            Statement::CreateTableAs(c) => self.create_table_as(session, c, notices).await,
            Statement::Prepare(p) => self.prepare(session, p).await,
            Statement::Execute(e) => {
                let body = self.executable(session, e)?;
                Box::pin(self.execute_with_notices(session, &body, None, notices)).await
            }
            Statement::Deallocate(name) => self.deallocate(session, name.as_deref()),
            Statement::CreateSchema {
                name,
                if_not_exists,
                owner,
            } => self.create_schema(
                session,
                name,
                *if_not_exists,
                owner.as_deref(),
                notices.as_ref(),
            ),
            Statement::AlterSchema { name, to } => self.alter_schema(session, name, to),
            Statement::CommentOnSchema { name, text } => {
                self.comment_on_schema(session, name, text.as_deref())
            }
            Statement::DropSchema {
                names,
                if_exists,
                cascade,
            } => {
                self.drop_schemas(session, names, *if_exists, *cascade, notices.as_ref())
                    .await
            }
            Statement::CreateExtension {
                name,
                if_not_exists,
                schema,
                version,
            } => schemas::create_extension(
                &self.catalog,
                name,
                *if_not_exists,
                schema.as_deref(),
                version.as_deref(),
                notices.as_ref(),
            ),
            Statement::DropExtension { names, if_exists } => {
                schemas::drop_extension(&self.catalog, names, *if_exists, notices.as_ref())
            }
            Statement::DiscardAll => {
                if session.in_transaction {
                    return Err(WeirError::new(
                        sqlstate::ACTIVE_SQL_TRANSACTION,
                        "DISCARD ALL cannot run inside a transaction block",
                    ));
                }
                session.reset("all");
                session.cursors.clear();
                session.prepared.clear();
                let temp: Vec<String> = session.temp_tables.drain(..).map(|(n, _)| n).collect();
                self.drop_temp_tables(&temp).await;
                session.inbox.unlisten(None);
                Ok(Output::Command("DISCARD ALL".into()))
            }
            // the block's one statement as if sent alone; an error its handler names is
            // ignored (`sql/do_block.rs`)
            Statement::Do(block) => {
                let inner = crate::sql::parser::parse(&block.statement)?;
                let [one] = inner.as_slice() else {
                    return Err(WeirError::not_supported("DO with other than one statement"));
                };
                match Box::pin(self.execute_with_notices(session, one, None, notices)).await {
                    Ok(_) => Ok(Output::Command("DO".into())),
                    Err(e) if block.ignored.contains(&e.code) => Ok(Output::Command("DO".into())),
                    Err(e) => Err(e),
                }
            }
            Statement::Listen(channel) => {
                session.inbox.listen(channel)?;
                Ok(Output::Command("LISTEN".into()))
            }
            Statement::Unlisten(channel) => {
                session.inbox.unlisten(channel.as_deref());
                Ok(Output::Command("UNLISTEN".into()))
            }
            Statement::Notify { channel, payload } => {
                session.outbox.notify(channel, payload)?;
                Ok(Output::Command("NOTIFY".into()))
            }
        }
    }

    async fn run_query(
        &self,
        session: &Session,
        q: &ast::Statement,
        params: Option<ParamValues>,
    ) -> Result<Output> {
        // every view the query reads, at one epoch; a query of one view with indexes is
        // not pinned, so that it can look an index up (one view is at one epoch anyway)
        let views: Vec<Arc<crate::catalog::Entry>> = referenced_relations(q)
            .iter()
            .filter_map(|n| self.catalog.get(n))
            .filter(|e| e.desc.kind == RelationKind::MaterializedView)
            .collect();
        let indexed_alone = matches!(views.as_slice(), [v] if !v.desc.indexes.is_empty());
        let views: Vec<u32> = views.iter().map(|e| e.desc.oid).collect();
        if !views.is_empty() && !indexed_alone {
            let (_, pinned) = self.dataflow.snapshot(&views)?;
            session.pinned.pin(pinned);
        }
        let result = self.run_query_pinned(session, q, params).await;
        session.pinned.clear();
        result
    }

    async fn run_query_pinned(
        &self,
        session: &Session,
        q: &ast::Statement,
        params: Option<ParamValues>,
    ) -> Result<Output> {
        let plan = self.plan_ast(session, q).await?;
        let plan = match params {
            Some(p) => plan.with_param_values(p)?,
            None => plan,
        };
        if !matches!(plan, LogicalPlan::Explain(_)) && is_side_effecting(&plan) {
            return Err(WeirError::not_supported("this statement is not supported"));
        }
        let schema = self.result_schema(&plan);
        let df = session.ctx.execute_logical_plan(plan).await?;
        let stream = df.execute_stream().await?;
        Ok(Output::Rows { schema, stream })
    }

    /// The materialized view `name`, for a statement that reads only views (SUBSCRIBE, a
    /// sink); `hint` says what to do with another kind of relation.
    pub(crate) fn materialized_view(
        &self,
        name: &str,
        hint: String,
    ) -> Result<Arc<crate::catalog::Entry>> {
        let entry = self
            .catalog
            .get(name)
            .ok_or_else(|| WeirError::undefined_table(name))?;
        if entry.desc.kind != RelationKind::MaterializedView {
            return Err(WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!(
                    "\"{name}\" is a {}, not a materialized view",
                    entry.desc.kind.noun()
                ),
            )
            .with_hint(hint));
        }
        Ok(entry)
    }

    /// A plan's output columns, each marked with the table column it reads when it is a
    /// plain column of a table, source or view (the table OID and attribute number clients
    /// see in RowDescription, as Postgres reports them).
    /// (Also a column renamed, or read through a subquery: `SELECT name AS "Name"`, `SELECT
    /// x.name FROM (SELECT name FROM t) x` are `t.name` to Postgres' clients.)
    fn result_schema(&self, plan: &LogicalPlan) -> SchemaRef {
        let fields: Vec<Field> = plan
            .schema()
            .iter()
            .map(|(q, f)| {
                let mut f = f.as_ref().clone();
                let column = datafusion::common::Column::new(q.cloned(), f.name());
                if let Some((q, name)) = column_origin(plan, &column)
                    && matches!(q.schema(), None | Some("public"))
                    && let Some(e) = self.catalog.get(q.table())
                    && e.desc.kind != RelationKind::Sink
                    && let Some(pos) = e.desc.columns.iter().position(|c| c.name == name)
                {
                    let mut md = f.metadata().clone();
                    md.insert(TABLE_OID_KEY.into(), e.desc.oid.to_string());
                    md.insert(ATTNUM_KEY.into(), (pos + 1).to_string());
                    f = f.with_metadata(md);
                }
                f
            })
            .collect();
        Arc::new(Schema::new_with_metadata(
            fields,
            plan.schema().as_arrow().metadata().clone(),
        ))
    }

    /// Undo the session's uncommitted changes, newest first. Each undo is itself a durable
    /// change (views see the retractions).
    pub async fn rollback(&self, session: &mut Session) -> Result<()> {
        session.outbox.discard();
        self.rollback_until(session, 0).await.map(|_| ())
    }

    /// Undo changes until `keep` remain in the undo log (a savepoint's mark), newest
    /// first. Returns the schema changes passed that could not be undone.
    pub(crate) async fn rollback_until(
        &self,
        session: &mut Session,
        keep: usize,
    ) -> Result<Vec<String>> {
        let mut irreversible = Vec::new();
        while session.undo.len() > keep {
            let Some(entry) = session.undo.pop() else {
                break;
            };
            match entry {
                Undo::Rows(table, hold) => {
                    let _writer = table_locks::lock_for_undo(session, &table).await;
                    let t = table.clone();
                    tokio::task::spawn_blocking(move || t.revert(&hold))
                        .await
                        .map_err(|e| WeirError::internal(format!("rollback task failed: {e}")))??;
                }
                Undo::Schema(sql) => {
                    // run as a statement of its own (it records no undo of its own)
                    let (in_block, implicit) =
                        (session.in_transaction, session.implicit_transaction);
                    session.in_transaction = false;
                    session.implicit_transaction = false;
                    let result = Box::pin(self.run_undo_statement(session, &sql)).await;
                    session.in_transaction = in_block;
                    session.implicit_transaction = implicit;
                    result?;
                }
                Undo::Irreversible(what) => irreversible.push(what),
                Undo::Reattach(oid) => {
                    if let Some(what) = self.reattach(oid) {
                        irreversible.push(what);
                    }
                }
                Undo::Unrewrite(r) => {
                    if let Some(what) = self.unrewrite(session, &r).await {
                        irreversible.push(what);
                    }
                }
            }
        }
        Ok(irreversible)
    }

    /// Put back a table the block rewrote, as it was (`Catalog::undo_rewrite`), and
    /// rebuild the materialized views over it from their inputs. When that cannot be (the
    /// table is gone or its name taken, by another session) the rewrite stays, its old
    /// rows are purged and the reason is returned, for the ROLLBACK's WARNING.
    async fn unrewrite(
        &self,
        session: &Session,
        r: &crate::server::session::Rewrite,
    ) -> Option<String> {
        let table = self
            .catalog
            .get_by_oid(r.new_oid)
            .and_then(|e| e.table.clone());
        let _writer = match &table {
            Some(t) => table_locks::lock_for_undo(session, t).await,
            None => None,
        };
        let views = self.views_over(r.new_oid);
        let result = match self.stop_views(&views).await {
            Ok(()) => self.catalog.undo_rewrite(r.old_oid, r.new_oid, &r.others),
            Err(e) => Err(e),
        };
        drop(_writer);
        let oids: Vec<u32> = views.iter().map(|v| v.desc.oid).collect();
        if let Err(e) = self.rebuild_views(&oids, None).await {
            tracing::warn!(error = %e, "a view over a restored table could not be rebuilt");
        }
        let e = result.err()?;
        tracing::warn!(error = %e, "a rolled back table rewrite could not be undone");
        if let Err(e) = self.catalog.finish_rewrite(r.old_oid) {
            tracing::warn!(error = %e, "could not purge a rewritten table's old rows");
        }
        Some(e.message)
    }

    /// Bring back a relation the block dropped; when that cannot be (a relation of its
    /// name was made meanwhile) the drop is finished and the statement returned, for the
    /// ROLLBACK's WARNING.
    fn reattach(&self, oid: u32) -> Option<String> {
        let e = self.catalog.reattach_relation(oid).err()?;
        tracing::warn!(error = %e, "a rolled back DROP could not be undone");
        if let Err(e) = self.catalog.finish_drop(oid) {
            tracing::warn!(error = %e, "could not finish a dropped relation");
        }
        Some(e.message)
    }

    /// A transaction's end as committed: the notifications it made are sent, the drops
    /// it made are finished (their catalog entries and data go), the old rows of the
    /// tables it rewrote are purged, and nothing is left to undo.
    pub fn commit_undo(&self, session: &mut Session) {
        session.outbox.commit(session.pid);
        for entry in std::mem::take(&mut session.undo) {
            let finished = match entry {
                Undo::Reattach(oid) => self.catalog.finish_drop(oid),
                Undo::Unrewrite(r) => self.catalog.finish_rewrite(r.old_oid),
                _ => Ok(()),
            };
            if let Err(e) = finished {
                tracing::warn!(error = %e, "could not finish a dropped relation or a rewrite");
            }
        }
    }

    /// One statement of the undo log.
    async fn run_undo_statement(&self, session: &mut Session, sql: &str) -> Result<()> {
        for parsed in crate::sql::parser::parse(sql)? {
            self.execute(session, &parsed, None).await.map_err(|e| {
                WeirError::internal(format!("undoing a schema change ({sql}) failed: {e}"))
            })?;
        }
        Ok(())
    }

    /// Undo the log of a transaction block whose connection went away (newest first), in
    /// a session of its own.
    pub async fn rollback_detached(&self, mut undo: Vec<Undo>) {
        let mut session = self.new_session();
        while let Some(entry) = undo.pop() {
            match entry {
                Undo::Rows(table, hold) => {
                    let _writer = table.writer.lock().await;
                    let t = table.clone();
                    let result = tokio::task::spawn_blocking(move || t.revert(&hold)).await;
                    if let Ok(Err(e)) = result {
                        tracing::warn!(table = %table.name(), error = %e, "rollback on disconnect failed");
                    }
                }
                Undo::Schema(sql) => {
                    if let Err(e) = Box::pin(self.run_undo_statement(&mut session, &sql)).await {
                        tracing::warn!(error = %e, "rollback on disconnect failed");
                    }
                }
                Undo::Irreversible(what) => {
                    tracing::warn!(statement = %what, "a transaction block rolled back on disconnect kept a schema change it cannot undo");
                }
                Undo::Reattach(oid) => {
                    self.reattach(oid);
                }
                Undo::Unrewrite(r) => {
                    self.unrewrite(&session, &r).await;
                }
            }
        }
    }

    /// A catalog query that did not plan: answer it exactly if the rows it selects from are
    /// empty (see [`null_projection_probe`]), else report the planning error.
    async fn catalog_probe(
        &self,
        session: &Session,
        q: &ast::Statement,
        error: WeirError,
    ) -> Result<Output> {
        if !reads_only_catalog(q) {
            return Err(error);
        }
        let Some(probe) = null_projection_probe(q) else {
            return Err(error);
        };
        let Ok(plan) = self.plan_ast(session, &probe).await else {
            return Err(error);
        };
        let schema = Arc::new(plan.schema().as_arrow().clone());
        let batches = collect_plan(session, plan).await?;
        if batches.iter().any(|b| b.num_rows() > 0) {
            return Err(error);
        }
        Ok(Output::Batches {
            schema,
            batches: vec![],
            tag: "SELECT",
        })
    }

    async fn execute_dml(
        &self,
        session: &mut Session,
        q: &ast::Statement,
        params: Option<ParamValues>,
    ) -> Result<Output> {
        if let ast::Statement::Insert(ins) = q {
            crate::plan::insert_values::columns_once(ins.columns.iter().map(|c| {
                c.0.last()
                    .and_then(|p| p.as_ident())
                    .map(crate::sql::parser::normalize_ident)
                    .unwrap_or_default()
            }))?;
        }
        let filled = self.fill_defaults(q)?;
        let q = filled.as_ref().unwrap_or(q);
        let on_conflict =
            matches!(q, ast::Statement::Insert(i) if i.on.is_some() || i.table_alias.is_some());
        if returning::has_returning(q) || on_conflict {
            return self.execute_returning(session, q, params).await;
        }
        if let ast::Statement::Insert(ins) = q {
            // literal rows skip planning
            if params.is_none()
                && let Some(entry) = self.insert_target(ins)
                && let Some(table) = entry.table.clone()
            {
                refuse_connector_table(&entry.desc, "INSERT into")?;
                let _writer = lock_writer(session, &table).await?;
                if let Some(batch) = literal_rows(ins, &entry.desc, &session.time_zone()) {
                    return self
                        .apply(session, &table, Change::Insert(vec![batch]), "INSERT")
                        .await;
                }
            }
        }
        let d = self.plan_dml(session, q, params).await?;
        self.apply(session, &d.table, d.change, d.verb).await
    }

    /// [`Self::execute_dml`], where an `INSERT ... query` whose query's width does not fit
    /// (DataFusion's planning error) is refused as Postgres refuses it, or read as Postgres
    /// reads it (see [`Self::insert_select_targets`]).
    async fn execute_dml_fitted(
        &self,
        session: &mut Session,
        q: &ast::Statement,
        params: Option<ParamValues>,
    ) -> Result<Output> {
        self.refuse_view_target(q)?;
        let expanded = merge::expand_tuple_assignments(q)?;
        let q = expanded.as_ref().unwrap_or(q);
        self.check_target_columns(q)?;
        if let ast::Statement::Update(u) = q
            && u.from.is_some()
        {
            return self.update_from(session, u, params).await;
        }
        if let ast::Statement::Delete(d) = q
            && d.using.is_some()
        {
            return self.delete_using(session, d, params).await;
        }
        match self.execute_dml(session, q, params.clone()).await {
            Err(e)
                if e.message
                    .starts_with("Column count doesn't match insert query")
                    || e.message.starts_with("Source table contains") =>
            {
                match self.insert_select_targets(session, q).await? {
                    Some(fixed) => self.execute_dml(session, &fixed, params).await,
                    None => Err(e),
                }
            }
            r => r,
        }
    }

    /// INSERT, UPDATE or DELETE of a plain view: 55000, as Postgres says it of a view it
    /// cannot update (a view is expanded where it is read, and none is automatically
    /// updatable here).
    fn refuse_view_target(&self, q: &ast::Statement) -> Result<()> {
        let (name, verb) = match q {
            ast::Statement::Insert(ins) => match &ins.table {
                ast::TableObject::TableName(n) => (n, "insert into"),
                _ => return Ok(()),
            },
            ast::Statement::Update(u) => match &u.table.relation {
                ast::TableFactor::Table { name, .. } => (name, "update"),
                _ => return Ok(()),
            },
            ast::Statement::Delete(d) => match &d.from {
                ast::FromTable::WithFromKeyword(t) | ast::FromTable::WithoutKeyword(t) => {
                    match t.first().map(|t| &t.relation) {
                        Some(ast::TableFactor::Table { name, .. }) => (name, "delete from"),
                        _ => return Ok(()),
                    }
                }
            },
            _ => return Ok(()),
        };
        let Ok(name) = crate::sql::parser::relation_name(name) else {
            return Ok(());
        };
        match self.catalog.get(&name) {
            Some(e) if e.desc.kind == RelationKind::View => Err(WeirError::new(
                "55000",
                format!("cannot {verb} view \"{name}\""),
            )
            .with_detail(
                "Views are not automatically updatable here: write to the tables they read.",
            )),
            _ => Ok(()),
        }
    }

    /// The columns an INSERT lists or an UPDATE sets exist in the table: Postgres' 42703
    /// names the relation (`column "x" of relation "t" does not exist`).
    fn check_target_columns(&self, q: &ast::Statement) -> Result<()> {
        let (table, targets): (&ast::ObjectName, Vec<&ast::ObjectName>) = match q {
            ast::Statement::Insert(ins) => match &ins.table {
                ast::TableObject::TableName(n) => (n, ins.columns.iter().collect()),
                _ => return Ok(()),
            },
            ast::Statement::Update(u) => match &u.table.relation {
                ast::TableFactor::Table { name, .. } if u.table.joins.is_empty() => (
                    name,
                    u.assignments
                        .iter()
                        .flat_map(|a| match &a.target {
                            ast::AssignmentTarget::ColumnName(c) => vec![c],
                            ast::AssignmentTarget::Tuple(cs) => cs.iter().collect(),
                        })
                        .collect(),
                ),
                _ => return Ok(()),
            },
            _ => return Ok(()),
        };
        let Some(entry) = crate::sql::parser::relation_name(table)
            .ok()
            .and_then(|n| self.catalog.get(&n))
        else {
            return Ok(());
        };
        for t in targets {
            // `SET t.col = ...` / `(col)`: the last part names the column
            let Some(col) = t.0.last().and_then(|p| p.as_ident()) else {
                continue;
            };
            let col = crate::sql::parser::normalize_ident(col);
            if !entry.desc.columns.iter().any(|c| c.name == col) {
                return Err(WeirError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!(
                        "column \"{col}\" of relation \"{}\" does not exist",
                        entry.desc.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// An INSERT's target table's catalog entry (None for another statement or an unknown
    /// target, which planning reports).
    fn insert_target(&self, ins: &ast::Insert) -> Option<Arc<crate::catalog::Entry>> {
        let ast::TableObject::TableName(n) = &ins.table else {
            return None;
        };
        crate::sql::parser::relation_name(n)
            .ok()
            .and_then(|n| self.catalog.get(&n))
    }

    /// `INSERT INTO t [(cols)] query` whose query has another number of columns than the
    /// targets: Postgres' error, or (no column list, fewer columns than the table) the
    /// statement with the table's first columns listed, as Postgres reads it.
    async fn insert_select_targets(
        &self,
        session: &Session,
        q: &ast::Statement,
    ) -> Result<Option<ast::Statement>> {
        let ast::Statement::Insert(ins) = q else {
            return Ok(None);
        };
        let (Some(source), Some(entry)) = (&ins.source, self.insert_target(ins)) else {
            return Ok(None);
        };
        let width = self
            .plan_ast(session, &ast::Statement::Query(source.clone()))
            .await?
            .schema()
            .fields()
            .len();
        if !insert_fills_first_columns(width, ins, &entry.desc)? {
            return Ok(None);
        }
        let mut ins = ins.clone();
        ins.columns = entry.desc.columns[..width]
            .iter()
            .map(|c| ast::ObjectName::from(vec![ast::Ident::with_quote('"', c.name.clone())]))
            .collect();
        Ok(Some(ast::Statement::Insert(ins)))
    }

    /// `TRUNCATE t [, ...] [CASCADE]`: every table checked first (it exists, is a table rows
    /// may be deleted from; a table another table's foreign key references is truncated
    /// with it: listed, or added by CASCADE), then each emptied by a DELETE (in a
    /// transaction block, undone with it), referencing tables before those they reference.
    async fn truncate(
        &self,
        session: &mut Session,
        tables: &[String],
        cascade: bool,
        restart_identity: bool,
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        let mut tables: Vec<String> = tables.to_vec();
        let mut k = 0;
        while k < tables.len() {
            for (child, _) in self.foreign_keys_to(&tables[k]) {
                if tables.contains(&child.name) {
                    continue;
                }
                if !cascade {
                    return Err(WeirError::new(
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        "cannot truncate a table referenced in a foreign key constraint",
                    )
                    .with_detail(format!(
                        "Table \"{}\" references \"{}\".",
                        child.name, tables[k]
                    ))
                    .with_hint(format!(
                        "Truncate table \"{}\" at the same time, or use TRUNCATE ... CASCADE.",
                        child.name
                    )));
                }
                if !self.catalog.has_privilege(
                    session.role(),
                    &child,
                    crate::catalog::roles::Privilege::Delete,
                ) {
                    return Err(WeirError::new(
                        sqlstate::INSUFFICIENT_PRIVILEGE,
                        format!("permission denied for table {}", child.name),
                    ));
                }
                if let Some(p) = notices {
                    let _ = p.send(format!("truncate cascades to table \"{}\"", child.name));
                }
                tables.push(child.name);
            }
            k += 1;
        }
        // referencing tables first: a table goes once no remaining one references it
        let mut ordered: Vec<String> = Vec::with_capacity(tables.len());
        let mut left = tables.clone();
        while !left.is_empty() {
            let free = left.iter().position(|t| {
                !self
                    .foreign_keys_to(t)
                    .iter()
                    .any(|(c, _)| &c.name != t && left.contains(&c.name))
            });
            // (a cycle of foreign keys: in the order given)
            ordered.push(left.remove(free.unwrap_or(0)));
        }
        let tables = ordered;
        for name in &tables {
            let entry = self
                .catalog
                .get(name)
                .ok_or_else(|| WeirError::undefined_table(name))?;
            if entry.table.is_none() {
                return Err(WeirError::new(
                    sqlstate::WRONG_OBJECT_TYPE,
                    format!("\"{name}\" is not a table"),
                ));
            }
            refuse_connector_table(&entry.desc, "TRUNCATE")?;
            if entry.desc.kind == RelationKind::AppendOnlyTable {
                return Err(append_only_error(name, "TRUNCATE"));
            }
        }
        for name in &tables {
            let delete = crate::sql::parser::parse(&format!(
                "DELETE FROM {}",
                crate::sql::pg_text::quote_ident(name)
            ))?;
            if let Some(Statement::Dml(q)) = delete.into_iter().next().map(|p| p.stmt) {
                Box::pin(self.execute_dml(session, &q, None)).await?;
            }
        }
        // RESTART IDENTITY: the sequences the tables own (serial, identity, OWNED BY) start
        // over (not undone by a ROLLBACK: sequences are not transactional here)
        if restart_identity {
            for name in &tables {
                let Some(entry) = self.catalog.get(name) else {
                    continue;
                };
                for (k, seq) in &entry.desc.options {
                    if k == "weir.owned_sequence"
                        && let Some(s) = self.catalog.get(seq)
                        && s.desc.kind == RelationKind::Sequence
                    {
                        let spec =
                            crate::catalog::sequences::SequenceSpec::from_options(&s.desc.options);
                        self.catalog.setval(s.desc.oid, spec.start, false)?;
                    }
                }
            }
        }
        Ok(Output::Command("TRUNCATE TABLE".into()))
    }

    /// A DML statement with RETURNING and/or an INSERT with ON CONFLICT: the change,
    /// resolved against stored keys, applied, then the RETURNING list over its rows.
    async fn execute_returning(
        &self,
        session: &mut Session,
        q: &ast::Statement,
        params: Option<ParamValues>,
    ) -> Result<Output> {
        let mut q = q.clone();
        let on = on_conflict::take_on_conflict(&mut q);
        let r = returning::take_returning(&mut q);
        // the alias served ON CONFLICT and RETURNING; the INSERT itself needs none
        if let ast::Statement::Insert(ins) = &mut q {
            ins.table_alias = None;
        }
        // a bad RETURNING list fails before anything is written
        if let Some(r) = &r {
            self.returning_plan(session, r).await?;
        }
        let PlannedDml {
            table,
            change,
            verb,
            _writer,
        } = self.plan_dml(session, &q, params.clone()).await?;
        // the rows as written: with their generated columns (EXCLUDED and RETURNING read
        // them), computed once here (the change is then applied as it is)
        let change = match self.catalog.get(&table.name()) {
            Some(e) => generated::fill_change(&session.ctx, &e.desc, change)?,
            None => change,
        };
        // (which written rows an upsert wrote over a stored one: RETURNING's `xmax`)
        let mut updated_rows: Vec<bool> = Vec::new();
        let (changes, written) = match (on, change) {
            (Some((on, alias)), Change::Insert(proposed)) => {
                let name = table.name().clone();
                // the proposed rows meet the table's CHECKs before conflicts are looked at
                // (Postgres checks them first), then the rows written do (`apply_change`)
                if let Some(entry) = self.catalog.get(&name) {
                    checks::enforce(
                        &session.ctx,
                        &self.catalog,
                        &entry.desc,
                        &proposed.iter().collect::<Vec<_>>(),
                    )?;
                }
                let (changes, written, updated) = self
                    .resolve_conflicts(
                        session,
                        &table,
                        &name,
                        &on_conflict::Clause {
                            on: &on,
                            alias,
                            params: params.as_ref(),
                        },
                        proposed,
                    )
                    .await?;
                updated_rows = updated;
                (changes, vec![written])
            }
            (_, change) => {
                let written = match &change {
                    Change::Insert(b) => b.clone(),
                    Change::Update { new, .. } => new.clone(),
                    Change::Delete(b) => b.clone(),
                    _ => vec![],
                };
                (vec![(change, verb)], written)
            }
        };
        let count: usize = written.iter().map(|b| b.num_rows()).sum();
        if changes.len() == 1 {
            for (change, verb) in changes {
                self.apply_filled_change(session, &table, change, verb, None)
                    .await?;
            }
            drop(_writer);
        } else {
            self.apply_as_one_statement(session, &table, changes, _writer, true)
                .await?;
        }
        let Some(r) = r else {
            return Ok(Output::Command(match verb {
                "INSERT" => format!("INSERT 0 {count}"),
                v => format!("{v} {count}"),
            }));
        };
        let (schema, batches) = self
            .returning_rows(session, &r, written, &updated_rows)
            .await?;
        Ok(Output::Batches {
            schema,
            batches,
            tag: match verb {
                "INSERT" => "INSERT 0",
                "UPDATE" => "UPDATE",
                _ => "DELETE",
            },
        })
    }

    /// Plan a DML statement into the change it makes (the rows it reads are read under the
    /// table's writer lock, which the caller holds while it applies them).
    async fn plan_dml(
        &self,
        session: &mut Session,
        q: &ast::Statement,
        params: Option<ParamValues>,
    ) -> Result<PlannedDml> {
        let mut q = q.clone();
        self.normalize_insert_literals(&mut q);
        self.update_generated_columns(&mut q)?;
        let plan = self.plan_ast(session, &q).await?;
        let plan = match params {
            Some(p) => plan.with_param_values(p)?,
            None => plan,
        };
        let LogicalPlan::Dml(dml) = plan else {
            return Err(WeirError::internal("DML statement did not plan to DML"));
        };
        let name = crate::sql::parser::reference_key(&dml.table_name);
        let entry = self
            .catalog
            .get(&name)
            .ok_or_else(|| WeirError::undefined_table(&name))?;
        assignments_convert(&dml.input, &entry.desc)?;
        let table = entry.table.clone().ok_or_else(|| {
            WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!("cannot change {} \"{name}\"", entry.desc.kind.noun()),
            )
        })?;
        let verb = match dml.op {
            datafusion::logical_expr::WriteOp::Insert(_) => "INSERT",
            datafusion::logical_expr::WriteOp::Update => "UPDATE",
            datafusion::logical_expr::WriteOp::Delete => "DELETE",
            _ => "DML",
        };
        refuse_connector_table(
            &entry.desc,
            match verb {
                "INSERT" => "INSERT into",
                "UPDATE" => "UPDATE",
                _ => "DELETE from",
            },
        )?;
        if entry.desc.kind == RelationKind::AppendOnlyTable && verb != "INSERT" {
            return Err(append_only_error(&name, verb));
        }
        // one writer per table at a time: the rows a statement reads are the rows it changes
        let writer = lock_writer(session, &table).await?;
        // reading the rows to change may stop anywhere; applying them may not
        let interrupt = session.interrupt.clone();
        let change = tokio::select! {
            c = plan_change(&session.ctx, &dml, &table) => c?,
            _ = interrupt.cancelled() => return Err(interrupt.error()),
        };
        Ok(PlannedDml {
            table,
            change,
            verb,
            _writer: writer,
        })
    }

    /// An UPDATE's assignments to a stored generated column: `= DEFAULT` is kept as the
    /// column itself (the write computes it again), anything else is refused as Postgres
    /// refuses it (428C9).
    fn update_generated_columns(&self, q: &mut ast::Statement) -> Result<()> {
        let ast::Statement::Update(u) = q else {
            return Ok(());
        };
        let ast::TableFactor::Table { name, .. } = &u.table.relation else {
            return Ok(());
        };
        let Some(entry) = crate::sql::parser::relation_name(name)
            .ok()
            .and_then(|n| self.catalog.get(&n))
        else {
            return Ok(());
        };
        let is_default = |e: &ast::Expr| {
            matches!(e, ast::Expr::Identifier(id)
                if id.quote_style.is_none() && id.value.eq_ignore_ascii_case("default"))
        };
        for a in u.assignments.iter_mut() {
            let ast::AssignmentTarget::ColumnName(target) = &a.target else {
                continue;
            };
            let Some(column) = target
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(crate::sql::parser::normalize_ident)
            else {
                continue;
            };
            if entry.desc.generation_expr(&column).is_none() {
                // `SET c = DEFAULT`: the column's default (NULL without one)
                if is_default(&a.value) {
                    a.value = match entry.desc.defaults.iter().find(|(c, _)| *c == column) {
                        Some((_, d)) => crate::sql::parser::parse_expr_text(d)?,
                        None => ast::Expr::value(ast::Value::Null),
                    };
                }
                continue;
            }
            match &a.value {
                ast::Expr::Identifier(id)
                    if id.quote_style.is_none() && id.value.eq_ignore_ascii_case("default") =>
                {
                    a.value = ast::Expr::Identifier(ast::Ident::with_quote('"', column));
                }
                _ => return Err(generated::not_default_error(&column, true)),
            }
        }
        Ok(())
    }

    /// A large literal INSERT read without a syntax tree (`sql::bulk_insert`); the general
    /// path when one of its columns needs it.
    async fn bulk_insert(
        &self,
        session: &mut Session,
        scan: &crate::sql::bulk_insert::ScannedInsert,
    ) -> Result<Output> {
        let entry = self
            .catalog
            .get(&scan.table)
            .ok_or_else(|| WeirError::undefined_table(&scan.table))?;
        let table = entry.table.clone().ok_or_else(|| {
            WeirError::new(
                sqlstate::WRONG_OBJECT_TYPE,
                format!(
                    "cannot change {} \"{}\"",
                    entry.desc.kind.noun(),
                    scan.table
                ),
            )
        })?;
        refuse_connector_table(&entry.desc, "INSERT into")?;
        // a table with column defaults takes the general path, which fills them
        let rows = if entry.desc.defaults.is_empty() && entry.desc.generated.is_empty() {
            crate::plan::insert_values::scanned_rows(scan, &entry.desc)?
        } else {
            None
        };
        match rows {
            Some(batch) => {
                let _writer = lock_writer(session, &table).await?;
                self.apply(session, &table, Change::Insert(vec![batch]), "INSERT")
                    .await
            }
            None => {
                let mut parsed = crate::sql::parser::parse_tree(&scan.source, usize::MAX)?;
                match parsed.pop().map(|p| p.stmt) {
                    Some(Statement::Dml(q)) if parsed.is_empty() => {
                        Box::pin(self.execute_dml(session, &q, None)).await
                    }
                    _ => Err(WeirError::internal("a scanned INSERT did not parse as one")),
                }
            }
        }
    }

    /// Apply a change (the caller holds the table's writer lock) and keep its undo inside a
    /// transaction.
    async fn apply(
        &self,
        session: &mut Session,
        table: &Arc<TableStore>,
        change: Change,
        verb: &str,
    ) -> Result<Output> {
        let (rows, _) = self
            .apply_change(session, table, change, verb, None)
            .await?;
        Ok(Output::Command(match verb {
            "INSERT" => format!("INSERT 0 {rows}"),
            v => format!("{v} {rows}"),
        }))
    }

    /// [`apply`](Self::apply); `part`: the change is a part of a statement applied as
    /// several (a COPY's chunk, see `TableStore::apply_part`; `Some(None)` for its first),
    /// whose undo is kept outside a transaction too. Returns the rows and the change's log
    /// position.
    pub(crate) async fn apply_change(
        &self,
        session: &mut Session,
        table: &Arc<TableStore>,
        change: Change,
        verb: &str,
        part: Option<Option<u64>>,
    ) -> Result<(usize, Option<u64>)> {
        // stored generated columns take their values from the rows written (before the
        // CHECKs, which read them)
        let change = match self.catalog.get(&table.name()) {
            Some(e) => generated::fill_change(&session.ctx, &e.desc, change)?,
            None => change,
        };
        self.apply_filled_change(session, table, change, verb, part)
            .await
    }

    /// Apply `changes` to `table` one after another as one statement: if one fails, those
    /// before it are undone too (MERGE's deleted, updated and inserted rows; ON CONFLICT
    /// DO UPDATE's updated and inserted rows on a table without a primary key). `writer`:
    /// the table's writer lock the rows were read under, released before an undo (which
    /// takes it). `filled`: the rows carry their generated columns already.
    pub(crate) async fn apply_as_one_statement(
        &self,
        session: &mut Session,
        table: &Arc<TableStore>,
        changes: Vec<(Change, &'static str)>,
        writer: Option<table_locks::WriterLock>,
        filled: bool,
    ) -> Result<()> {
        let mark = session.undo.len();
        let was_implicit = session.implicit_transaction;
        session.implicit_transaction = true;
        let mut result = Ok(());
        for (change, verb) in changes {
            let applied = match filled {
                true => {
                    self.apply_filled_change(session, table, change, verb, None)
                        .await
                }
                false => self.apply_change(session, table, change, verb, None).await,
            };
            if let Err(e) = applied {
                result = Err(e);
                break;
            }
        }
        session.implicit_transaction = was_implicit;
        drop(writer);
        match result {
            Err(e) => {
                self.rollback_until(session, mark).await?;
                Err(e)
            }
            Ok(()) => {
                if !(session.in_transaction || was_implicit) {
                    // committed: the undo entries go
                    session.undo.truncate(mark);
                }
                Ok(())
            }
        }
    }

    /// [`apply_change`](Self::apply_change) of a change whose rows carry their generated
    /// columns already (a DML statement computes them before RETURNING and ON CONFLICT
    /// read them).
    pub(crate) async fn apply_filled_change(
        &self,
        session: &mut Session,
        table: &Arc<TableStore>,
        change: Change,
        verb: &str,
        part: Option<Option<u64>>,
    ) -> Result<(usize, Option<u64>)> {
        // the last point where the statement can stop without having changed anything
        session.interrupt.check()?;
        session.check_writable(verb)?;
        let entry = self.catalog.get(&table.name());
        if let Some(entry) = &entry
            && (!entry.desc.checks.is_empty() || !entry.desc.domains.is_empty())
        {
            let written: Vec<&datafusion::arrow::array::RecordBatch> = match &change {
                Change::Insert(b) => b.iter().collect(),
                Change::Update { new, .. } => new.iter().collect(),
                Change::Upsert { upserts, .. } => vec![upserts],
                _ => vec![],
            };
            checks::enforce(&session.ctx, &self.catalog, &entry.desc, &written)?;
        }
        // foreign keys: checked, and the changes their actions make elsewhere
        let effects = match &entry {
            Some(e) => self.foreign_key_effects(session, &e.desc, &change).await?,
            None => vec![],
        };
        // and what is checked again once it is applied (concurrent writers)
        let recheck = entry
            .as_ref()
            .and_then(|e| self.foreign_key_recheck(&e.desc, &change));
        if matches!(change, Change::Insert(_)) {
            self.wait_for_memory(session, verb, table).await?;
        }
        let keep = part.is_some() || session.in_transaction || session.implicit_transaction;
        // the effects that come first, the change, the effects that follow it; a failure
        // undoes what was applied
        let (after, before): (Vec<_>, Vec<_>) = effects.into_iter().partition(|e| e.after);
        let mut undo: Vec<(Arc<TableStore>, crate::state::table::LogHold)> = Vec::new();
        // the referencing tables' writer locks, held until all is applied
        let mut _writers = Vec::new();
        let mut main = None;
        let mut result: Result<()> = Ok(());
        let steps = before
            .into_iter()
            .map(Some)
            .chain(std::iter::once(None))
            .chain(after.into_iter().map(Some));
        let mut change = Some(change);
        for step in steps {
            let (t, c, is_main) = match step {
                Some(e) => {
                    _writers.push(e._writer);
                    // a referencing table's rows a CASCADE / SET NULL changes: its generated
                    // columns computed again
                    let c = match self.catalog.get(&e.table.name()) {
                        Some(child) => generated::fill_change(&session.ctx, &child.desc, e.change)?,
                        None => e.change,
                    };
                    (e.table, c, false)
                }
                None => match change.take() {
                    Some(c) => (table.clone(), c, true),
                    None => break,
                },
            };
            let t2 = t.clone();
            let applied = tokio::task::spawn_blocking(move || match (is_main, part) {
                (true, Some(first)) => t2.apply_part(c, first),
                _ => t2.apply(c),
            })
            .await
            .map_err(|e| WeirError::internal(format!("write task failed: {e}")))
            .and_then(|r| r);
            match applied {
                Ok(mut a) => {
                    if is_main {
                        main = Some((a.rows, a.hold.as_ref().map(|h| h.seq)));
                    }
                    if let Some(h) = a.hold.take() {
                        undo.push((t, h));
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok()
            && let (Some(e), Some(r)) = (&entry, &recheck)
            && let Err(err) = self.recheck_foreign_keys(session, &e.desc, r).await
        {
            result = Err(err);
        }
        if let Err(e) = result {
            // (a failed change applied nothing of its own)
            for (t, hold) in undo.into_iter().rev() {
                let _ = tokio::task::spawn_blocking(move || t.revert(&hold)).await;
            }
            return Err(e);
        }
        if keep {
            session
                .undo
                .extend(undo.into_iter().map(|(t, h)| Undo::Rows(t, h)));
        }
        main.ok_or_else(|| WeirError::internal("a change was not applied"))
    }

    /// Over --memory-limit, rows added wait until memory is freed (backpressure); a
    /// cancel or timeout stops the wait.
    pub(crate) async fn wait_for_memory(
        &self,
        session: &Session,
        verb: &str,
        table: &TableStore,
    ) -> Result<()> {
        if self.dataflow.sources.memory.must_wait() {
            info!(verb, table = %table.name(), "waiting: the server is at its --memory-limit");
            let interrupt = session.interrupt.clone();
            self.dataflow
                .sources
                .memory
                .wait(|| interrupt.check())
                .await?;
        }
        Ok(())
    }

    /// String literals in `INSERT ... VALUES` bound for INTERVAL and BYTEA columns, in the
    /// forms DataFusion reads (Postgres prints `1 day 02:03:04` and `\x0102`, and clients
    /// send back what they read).
    fn normalize_insert_literals(&self, q: &mut ast::Statement) {
        if let ast::Statement::Update(upd) = q {
            let ast::TableFactor::Table { name, .. } = &upd.table.relation else {
                return;
            };
            let Some(entry) = crate::sql::parser::relation_name(name)
                .ok()
                .and_then(|n| self.catalog.get(&n))
            else {
                return;
            };
            for a in upd.assignments.iter_mut() {
                let ast::AssignmentTarget::ColumnName(col) = &a.target else {
                    continue;
                };
                let Some(id) = col.0.last().and_then(|p| p.as_ident()) else {
                    continue;
                };
                let n = crate::sql::parser::normalize_ident(id);
                match entry
                    .desc
                    .columns
                    .iter()
                    .find(|c| c.name == n)
                    .map(|c| &c.ty)
                {
                    Some(SqlType::Interval) => {
                        crate::catalog::rewrite::normalize_interval_literal(&mut a.value)
                    }
                    Some(SqlType::Bytea) => {
                        crate::catalog::rewrite::normalize_bytea_literal(&mut a.value)
                    }
                    _ => {}
                }
            }
            return;
        }
        let ast::Statement::Insert(ins) = q else {
            return;
        };
        let ast::TableObject::TableName(name) = &ins.table else {
            return;
        };
        let Ok(name) = crate::sql::parser::relation_name(name) else {
            return;
        };
        let Some(entry) = self.catalog.get(&name) else {
            return;
        };
        let columns: Vec<&ColumnDesc> = if ins.columns.is_empty() {
            entry.desc.columns.iter().collect()
        } else {
            ins.columns
                .iter()
                .filter_map(|c| {
                    let id = c.0.last()?.as_ident()?;
                    let n = crate::sql::parser::normalize_ident(id);
                    entry.desc.columns.iter().find(|d| d.name == n)
                })
                .collect()
        };
        let Some(source) = &mut ins.source else {
            return;
        };
        let ast::SetExpr::Values(values) = source.body.as_mut() else {
            return;
        };
        for row in values.rows.iter_mut() {
            for (i, e) in row.iter_mut().enumerate() {
                match columns.get(i).map(|c| &c.ty) {
                    Some(SqlType::Interval) => {
                        crate::catalog::rewrite::normalize_interval_literal(e)
                    }
                    Some(SqlType::Bytea) => crate::catalog::rewrite::normalize_bytea_literal(e),
                    _ => {}
                }
            }
        }
    }

    fn create_source(&self, cs: &CreateSource, text: &str, owner: u32) -> Result<()> {
        if let Some(c) = cs.columns.iter().find(|c| {
            matches!(&c.ty, SqlType::Enum(_))
                || matches!(&c.ty, SqlType::Array(e) if matches!(e.as_ref(), SqlType::Enum(_)))
        }) {
            return Err(WeirError::not_supported(format!(
                "column \"{}\" of source \"{}\": enum types are for table columns, not sources",
                c.name, cs.name
            ))
            .with_hint("Declare the column text; a view can cast it (::type) where it is read."));
        }
        let o = self.connector_options(&cs.with_options)?;
        let connector = o
            .get("connector")
            .map(|c| c.to_lowercase())
            .ok_or_else(|| {
                WeirError::invalid_parameter(format!(
                    "source \"{}\" needs a connector: WITH (connector = 'nexmark' | 'datagen', ...)",
                    cs.name
                ))
            })?;
        let mut seen = std::collections::HashSet::new();
        for c in &cs.columns {
            if !seen.insert(c.name.as_str()) {
                return Err(WeirError::new(
                    sqlstate::DUPLICATE_COLUMN,
                    format!("column \"{}\" specified more than once", c.name),
                ));
            }
        }
        let declared: Vec<ColumnDesc> = cs
            .columns
            .iter()
            .map(|c| ColumnDesc {
                name: c.name.clone(),
                ty: c.ty.clone(),
                nullable: !c.not_null,
            })
            .collect();
        let columns = connectors::source_columns(&connector, &o, &declared)?;
        connectors::check_options(&connector, &o, &columns)?;
        let mut options: Vec<(String, String)> = cs.with_options.clone();
        if connectors::is_generator(&connector) {
            if let Some((f, e)) = &cs.format {
                return Err(WeirError::invalid_parameter(format!(
                    "FORMAT {} ENCODE {} does not apply to the {connector} connector, which makes rows itself",
                    f.to_uppercase(),
                    e.to_uppercase()
                )));
            }
            // the options must make a working generator now, not when a view first reads it
            connectors::generator(&connector, &o, &columns)?;
            connectors::rate_limit(&connector, &o)?;
        } else {
            let (f, e) = cs
                .format
                .clone()
                .unwrap_or_else(|| ("plain".into(), "json".into()));
            if f != "plain" {
                return Err(WeirError::not_supported(format!(
                    "FORMAT {} is for tables (CREATE TABLE ... FORMAT UPSERT | DEBEZIUM); a source is FORMAT PLAIN",
                    f.to_uppercase()
                )));
            }
            if e != "json" && e != "csv" && e != "avro" {
                return Err(WeirError::not_supported(format!(
                    "ENCODE {} is not supported yet (ENCODE JSON, CSV and AVRO are)",
                    e.to_uppercase()
                )));
            }
            for (prefix, enc) in [("csv.", "csv"), ("schema.", "avro")] {
                if e != enc
                    && let Some(k) = o.keys().find(|k| k.starts_with(prefix))
                {
                    return Err(WeirError::invalid_parameter(format!(
                        "option \"{k}\" is for ENCODE {}",
                        enc.to_uppercase()
                    )));
                }
            }
            options.push(("format".into(), f));
            options.push(("encode".into(), e));
            // options and columns must make a working consumer and decoder now
            connectors::kafka::KafkaSpec::new(&self.connector_options(&options)?, &columns)?;
        }
        let watermark = cs
            .watermark
            .as_ref()
            .map(|w| watermark_desc(w, &columns))
            .transpose()?;
        for (k, v) in options.iter_mut() {
            if k == "connector" {
                *v = connector.clone();
            }
        }
        let created = self.catalog.create(&cs.name, cs.if_not_exists, |oid| {
            Ok(RelationDesc {
                oid,
                name: cs.name.clone(),
                kind: RelationKind::Source,
                columns,
                primary_key: vec![],
                watermark,
                definition: text.to_owned(),
                query: None,
                dependencies: vec![],
                options,
                emit_on_window_close: false,
                append_only: true,
                owner,
                acl: None,
                defaults: vec![],
                indexes: vec![],
                checks: vec![],
                foreign_keys: vec![],
                comments: Default::default(),
                not_valid: vec![],
                generated: vec![],
                time_zone: None,
                domains: vec![],
                restores_from: vec![],
            })
        })?;
        if created {
            info!(source = %cs.name, %connector, "created source");
        }
        Ok(())
    }

    /// The unique indexes that keep a new table's UNIQUE constraints (Postgres' names:
    /// `t_a_b_key`, numbered when taken), checked before the table is created.
    fn unique_indexes(&self, ct: &CreateTable) -> Result<Vec<crate::sql::parser::CreateIndex>> {
        if ct.uniques.is_empty() {
            return Ok(vec![]);
        }
        if ct.append_only || !ct.with_options.is_empty() {
            return Err(WeirError::not_supported(format!(
                "UNIQUE constraints on {} table \"{}\" are not supported",
                if ct.append_only {
                    "APPEND ONLY"
                } else {
                    "connector"
                },
                ct.name
            )));
        }
        let mut out: Vec<crate::sql::parser::CreateIndex> = Vec::new();
        for u in &ct.uniques {
            // as Postgres: a constraint the primary key or an earlier one already keeps is
            // not made twice
            if u.name.is_none()
                && (u.columns == ct.primary_key || out.iter().any(|o| o.columns == u.columns))
            {
                continue;
            }
            for c in &u.columns {
                if !ct.columns.iter().any(|d| &d.name == c) {
                    return Err(WeirError::new(
                        sqlstate::UNDEFINED_COLUMN,
                        format!("column \"{c}\" named in key does not exist"),
                    ));
                }
            }
            let taken = |n: &str| {
                self.catalog
                    .name_in_use(&crate::sql::parser::sibling_key(&ct.name, n))
                    || n == ct.name
                    || out.iter().any(|o| o.name.as_deref() == Some(n))
            };
            let name = match &u.name {
                Some(n) if taken(n) => {
                    return Err(WeirError::new(
                        sqlstate::DUPLICATE_TABLE,
                        format!("relation \"{n}\" already exists"),
                    ));
                }
                Some(n) => n.clone(),
                None => crate::sql::parser::free_name(
                    &format!(
                        "{}_{}_key",
                        crate::sql::parser::bare_relation_name(&ct.name),
                        u.columns.join("_")
                    ),
                    taken,
                ),
            };
            out.push(crate::sql::parser::CreateIndex {
                name: Some(name),
                table: ct.name.clone(),
                columns: u.columns.clone(),
                expressions: Vec::new(),
                predicate: None,
                unique: true,
                if_not_exists: false,
                constraint: true,
                nulls_not_distinct: u.nulls_not_distinct,
            });
        }
        Ok(out)
    }

    /// A new table's CHECK constraints plan over its columns (`engine::checks`); a connector
    /// table, whose rows arrive without a statement, takes none.
    fn check_table_checks(
        &self,
        ctx: &datafusion::prelude::SessionContext,
        ct: &CreateTable,
    ) -> Result<()> {
        if !ct.with_options.is_empty() {
            return Err(WeirError::not_supported(
                "a connector table cannot have CHECK constraints (filter its rows in a view)",
            ));
        }
        if ct.checks.len() > crate::catalog::MAX_CHECKS {
            return Err(WeirError::new(
                sqlstate::PROGRAM_LIMIT_EXCEEDED,
                format!(
                    "a table can have at most {} CHECK constraints",
                    crate::catalog::MAX_CHECKS
                ),
            ));
        }
        let schema = datafusion::arrow::datatypes::Schema::new(
            ct.columns
                .iter()
                .map(|c| c.ty.field(&c.name, true))
                .collect::<Vec<_>>(),
        );
        let checks: Vec<(String, String)> = ct
            .checks
            .iter()
            .map(|c| (c.name.clone(), c.expr.clone()))
            .collect();
        checks::compile(ctx, &ct.name, &schema, &checks).map(|_| ())
    }

    /// A column default that is a quoted literal (`DEFAULT 'x'`, `DEFAULT 'x'::int`) must
    /// read as the column's type: Postgres reads such a literal when it parses the CREATE
    /// and refuses `a int DEFAULT 'x'` there (22P02), not at the first INSERT. (Other
    /// defaults, `DEFAULT 99999999999` in an integer column too, fail per row, as there.)
    async fn check_constant_defaults(&self, session: &Session, ct: &CreateTable) -> Result<()> {
        for c in &ct.columns {
            if let Some(d) = &c.default {
                self.check_default(session, d, &c.ty).await?;
            }
        }
        Ok(())
    }

    /// A column default checked as Postgres checks it when it is declared (CREATE TABLE,
    /// ADD COLUMN, SET DEFAULT), without running it (a sequence's `nextval` is not drawn):
    /// no subquery (0A000), functions, operators and types that exist (planned as a cast to
    /// the column's type), and quoted literals that read as the type they are cast to
    /// (`'abc'` for an integer column: 22P02; Postgres reads them then too).
    pub(crate) async fn check_default(
        &self,
        session: &Session,
        default: &str,
        ty: &crate::sql::types::SqlType,
    ) -> Result<()> {
        let e = crate::sql::parser::parse_expr_text(default)?;
        let mut subquery = false;
        let mut literal_casts = Vec::new();
        let literal = |e: &ast::Expr| {
            matches!(e, ast::Expr::Value(v) if matches!(v.value,
                ast::Value::SingleQuotedString(_) | ast::Value::EscapedStringLiteral(_)))
        };
        let _ = ast::visit_expressions(&e, |x: &ast::Expr| {
            match x {
                ast::Expr::Subquery(_)
                | ast::Expr::Exists { .. }
                | ast::Expr::InSubquery { .. } => subquery = true,
                ast::Expr::Cast { expr, .. } if literal(expr) => literal_casts.push(x.to_string()),
                _ => {}
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        if subquery {
            return Err(WeirError::not_supported(
                "cannot use subquery in DEFAULT expression",
            ));
        }
        let whole = format!("CAST(({default}) AS {})", ty.display_name());
        let q = crate::sql::parser::parse_query(&format!("SELECT {whole}"))?;
        self.plan_ast(session, &ast::Statement::Query(q)).await?;
        if literal(&e) {
            literal_casts.push(whole);
        }
        for c in literal_casts {
            self.run_scalar(session, &format!("SELECT {c}")).await?;
        }
        Ok(())
    }

    fn create_table(&self, ct: &CreateTable, text: &str, owner: u32) -> Result<()> {
        if ct.with_options.is_empty()
            && let Some((f, _)) = &ct.format
        {
            return Err(WeirError::syntax(format!(
                "FORMAT {} needs a connector: WITH (connector = 'kafka', ...)",
                f.to_uppercase()
            )));
        }
        if ct.columns.is_empty() {
            return Err(WeirError::new(
                sqlstate::INVALID_TABLE_DEFINITION,
                format!("table \"{}\" must have at least one column", ct.name),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for c in &ct.columns {
            crate::catalog::check_column_name(&c.name)?;
            if !seen.insert(c.name.as_str()) {
                return Err(WeirError::new(
                    sqlstate::DUPLICATE_COLUMN,
                    format!("column \"{}\" specified more than once", c.name),
                ));
            }
        }
        for k in &ct.primary_key {
            if !seen.contains(k.as_str()) {
                return Err(WeirError::new(
                    sqlstate::UNDEFINED_COLUMN,
                    format!("column \"{k}\" named in key does not exist"),
                ));
            }
        }
        if ct.append_only && !ct.primary_key.is_empty() {
            return Err(WeirError::new(
                sqlstate::INVALID_TABLE_DEFINITION,
                "an APPEND ONLY table cannot have a PRIMARY KEY",
            ));
        }
        if ct.watermark.is_some() && !ct.append_only {
            return Err(WeirError::new(
                sqlstate::INVALID_TABLE_DEFINITION,
                "WATERMARK requires an APPEND ONLY table",
            ));
        }
        let columns = table_columns(ct);
        let watermark = ct
            .watermark
            .as_ref()
            .map(|w| watermark_desc(w, &columns))
            .transpose()?;
        let kind = if ct.append_only {
            RelationKind::AppendOnlyTable
        } else {
            RelationKind::Table
        };
        let options = if ct.with_options.is_empty() {
            vec![]
        } else {
            self.connector_table_options(ct, &columns)?
        };
        // serial and identity columns: a sequence each, named as Postgres names it, whose
        // nextval is the column's default (the table owns it: dropped with it)
        let mut defaults: Vec<(String, String)> = ct
            .columns
            .iter()
            .filter_map(|c| c.default.clone().map(|d| (c.name.clone(), d)))
            .collect();
        let mut options = options;
        if ct.temporary.is_some() {
            options.push((crate::catalog::TEMPORARY_OPTION.into(), "on".into()));
        }
        if let Some(n) = &ct.primary_key_name
            && *n != format!("{}_pkey", crate::sql::parser::bare_relation_name(&ct.name))
        {
            options.push(("weir.pkey_name".into(), n.clone()));
        }
        let mut owned = Vec::new();
        if self.catalog.get(&ct.name).is_none() {
            for c in &ct.columns {
                let Some(id) = &c.identity else { continue };
                let seq = format!("{}_{}_seq", ct.name, c.name);
                let max = match c.ty {
                    SqlType::Int2 => i16::MAX as i64,
                    SqlType::Int4 => i32::MAX as i64,
                    _ => i64::MAX,
                };
                let o = &id.options;
                let type_max = (o.increment.unwrap_or(1) > 0).then_some(max);
                let spec = crate::catalog::sequences::SequenceSpec::new(
                    o.start,
                    o.increment,
                    o.min,
                    o.max.or(type_max),
                    o.cycle,
                )?;
                owned.push((seq.clone(), spec));
                defaults.push((
                    c.name.clone(),
                    crate::catalog::sequences::nextval_default(&seq),
                ));
                options.push(("weir.owned_sequence".into(), seq));
                if id.always {
                    options.push(("weir.identity_always".into(), c.name.clone()));
                } else if !id.serial {
                    options.push(("weir.identity_by_default".into(), c.name.clone()));
                }
            }
        }
        for (seq, _) in &owned {
            if self.catalog.get(seq).is_some() {
                return Err(WeirError::new(
                    sqlstate::DUPLICATE_TABLE,
                    format!("relation \"{seq}\" already exists"),
                ));
            }
        }
        let foreign_keys = if self.catalog.get(&ct.name).is_none() {
            self.table_foreign_keys(ct)?
        } else {
            vec![]
        };
        let created = self.catalog.create(&ct.name, ct.if_not_exists, |oid| {
            Ok(RelationDesc {
                oid,
                name: ct.name.clone(),
                kind,
                columns,
                primary_key: ct.primary_key.clone(),
                watermark,
                definition: text.to_owned(),
                query: None,
                dependencies: vec![],
                options,
                emit_on_window_close: false,
                append_only: ct.append_only,
                owner,
                acl: None,
                defaults,
                indexes: vec![],
                checks: ct
                    .checks
                    .iter()
                    .map(|c| (c.name.clone(), c.expr.clone()))
                    .collect(),
                foreign_keys,
                comments: Default::default(),
                not_valid: vec![],
                generated: ct.generated(),
                time_zone: None,
                domains: ct.domains.clone(),
                restores_from: vec![],
            })
        })?;
        if created {
            for (seq, spec) in owned {
                self.create_sequence(&seq, false, spec, "", owner)?;
            }
            info!(table = %ct.name, "created table");
            if let Some(entry) = self.catalog.get(&ct.name) {
                self.start_table_consumer(&entry)?;
            }
        }
        Ok(())
    }

    /// A new table's FOREIGN KEY constraints, checked against the tables they reference (or
    /// the new table itself) and named.
    fn table_foreign_keys(&self, ct: &CreateTable) -> Result<Vec<crate::catalog::ForeignKeyDesc>> {
        if ct.foreign_keys.is_empty() {
            return Ok(vec![]);
        }
        if !ct.with_options.is_empty() {
            return Err(WeirError::not_supported(
                "a connector table cannot have FOREIGN KEY constraints (its rows arrive without a statement to refuse)",
            ));
        }
        let me = foreign_keys::KeyShape {
            name: ct.name.clone(),
            columns: ct
                .columns
                .iter()
                .map(|c| (c.name.clone(), c.ty.clone()))
                .collect(),
            primary_key: ct.primary_key.clone(),
            uniques: ct.uniques.iter().map(|u| u.columns.clone()).collect(),
        };
        let mut out: Vec<crate::catalog::ForeignKeyDesc> = Vec::new();
        for spec in &ct.foreign_keys {
            let fk = self.resolve_foreign_key(&me, spec, |n| {
                out.iter().any(|f| f.name == n)
                    || ct.checks.iter().any(|c| c.name == n)
                    || self.constraint_name_in_use(&ct.name, n)
            })?;
            if out.iter().any(|f| f.name == fk.name) {
                return Err(WeirError::new(
                    sqlstate::DUPLICATE_OBJECT,
                    format!(
                        "constraint \"{}\" for relation \"{}\" already exists",
                        fk.name, ct.name
                    ),
                ));
            }
            out.push(fk);
        }
        Ok(out)
    }

    /// Whether a relation or a foreign key of `table`'s schema already has this name
    /// (Postgres picks the names of constraints it names itself among the schema's).
    pub(crate) fn constraint_name_in_use(&self, table: &str, n: &str) -> bool {
        let schema = crate::catalog::schemas::split_relation_name(table).0;
        self.catalog
            .name_in_use(&crate::sql::parser::sibling_key(table, n))
            || self.catalog.entries().iter().any(|e| {
                crate::catalog::schemas::split_relation_name(&e.desc.name).0 == schema
                    && e.desc.foreign_keys.iter().any(|f| f.name == n)
            })
    }

    /// Check a connector table's options (`WITH (connector = 'kafka', ...) FORMAT UPSERT |
    /// DEBEZIUM ENCODE JSON`) and return them as stored.
    fn connector_table_options(
        &self,
        ct: &CreateTable,
        columns: &[ColumnDesc],
    ) -> Result<Vec<(String, String)>> {
        let o = self.connector_options(&ct.with_options)?;
        let connector = o.get("connector").map(|c| c.to_lowercase());
        if connector.as_deref() != Some("kafka") {
            return Err(WeirError::not_supported(match connector {
                Some(c) => format!("a table cannot be fed by the {c} connector (kafka can)"),
                None => format!(
                    "table option \"{}\" is not supported (a table fed by Kafka says WITH (connector = 'kafka', ...))",
                    ct.with_options[0].0
                ),
            }));
        }
        let (f, e) = ct.format.clone().ok_or_else(|| {
            WeirError::syntax(
                "a table fed by Kafka needs FORMAT UPSERT ENCODE JSON or FORMAT DEBEZIUM ENCODE JSON",
            )
        })?;
        let Some(format) = connectors::upsert::TableFormat::parse(&f) else {
            return Err(WeirError::not_supported(format!(
                "a table fed by Kafka is FORMAT UPSERT or DEBEZIUM, not {} (a stream of plain events is a CREATE SOURCE)",
                f.to_uppercase()
            )));
        };
        if e != "json" {
            return Err(WeirError::not_supported(format!(
                "ENCODE {} is not supported yet (ENCODE JSON is)",
                e.to_uppercase()
            )));
        }
        if ct.append_only || ct.watermark.is_some() {
            return Err(WeirError::new(
                sqlstate::INVALID_TABLE_DEFINITION,
                "a table fed by FORMAT UPSERT or DEBEZIUM changes rows: it cannot be APPEND ONLY or have a WATERMARK",
            ));
        }
        connectors::check_options("kafka", &o, columns)?;
        if let Some(k) = o.keys().find(|k| k.starts_with("include.")) {
            return Err(WeirError::invalid_parameter(format!(
                "option \"{k}\" is for sources"
            )));
        }
        let key: Vec<usize> = ct
            .primary_key
            .iter()
            .filter_map(|k| columns.iter().position(|c| &c.name == k))
            .collect();
        connectors::upsert::ChangeDecoder::new(format, columns, &key)?;
        connectors::kafka::KafkaSpec::new(&o, columns)?;
        let mut options: Vec<(String, String)> = ct
            .with_options
            .iter()
            .map(|(k, v)| {
                let v = if k == "connector" {
                    "kafka".to_owned()
                } else {
                    v.clone()
                };
                (k.clone(), v)
            })
            .collect();
        options.push(("format".into(), f));
        options.push(("encode".into(), e));
        Ok(options)
    }

    /// Start the Kafka consumer of a connector table (at CREATE and at every start).
    pub(crate) fn start_table_consumer(&self, entry: &crate::catalog::Entry) -> Result<()> {
        let Some(table) = entry.table.clone() else {
            return Ok(());
        };
        let o = self.connector_options(&entry.desc.options)?;
        let Some(format) = o
            .get("format")
            .and_then(|f| connectors::upsert::TableFormat::parse(f))
        else {
            return Ok(());
        };
        let crate::state::table::TableKind::Keyed { pk } = entry.desc.table_kind() else {
            return Err(WeirError::internal("a connector table without a key"));
        };
        let decoder = connectors::upsert::ChangeDecoder::new(format, &entry.desc.columns, &pk)?;
        let spec = connectors::kafka::KafkaSpec::new(&o, &entry.desc.columns)?;
        self.dataflow.sources.start_table(table, spec, decoder);
        info!(table = %entry.desc.name, "kafka table consumer started");
        Ok(())
    }
}

/// `SELECT *, *`: each wildcard after the first in a top-level select list is planned
/// alone over the same FROM and replaced by the columns it stands for (see
/// `rewrite::repeated_wildcard_probes`). Whether any was.
async fn expand_repeated_wildcards(
    state: &datafusion::execution::SessionState,
    stmt: &mut ast::Statement,
    round: usize,
) -> Result<bool> {
    let mut columns = Vec::new();
    for probe in crate::catalog::rewrite::repeated_wildcard_probes(stmt) {
        // a probe over a select list not expanded yet (an inner one's wildcards repeat)
        // fails: that list waits for the next round
        let Ok(plan) = state
            .statement_to_plan(DfParserStatement::Statement(Box::new(probe)))
            .await
        else {
            columns.push(None);
            continue;
        };
        columns.push(Some(
            plan.schema()
                .iter()
                .map(|(qualifier, field)| {
                    let mut parts: Vec<String> = qualifier.map(|q| q.to_vec()).unwrap_or_default();
                    parts.push(field.name().clone());
                    parts
                })
                .collect(),
        ));
    }
    Ok(crate::catalog::rewrite::expand_repeated_wildcards(
        stmt, columns, round,
    ))
}

/// How many columns a query's select list has, when the syntax alone tells (no `*`):
/// the leftmost SELECT of a set operation decides, as in Postgres.
/// The columns an INSERT's rows fill: those it lists, or the table's first ones, as many as
/// its rows have (a VALUES row's width, a query's columns).
fn insert_columns(
    columns: &[ast::ObjectName],
    rows: &ast::SetExpr,
    desc: &crate::catalog::RelationDesc,
) -> Vec<String> {
    if !columns.is_empty() {
        return columns
            .iter()
            .map(|c| crate::sql::parser::relation_name(c).unwrap_or_else(|_| c.to_string()))
            .collect();
    }
    let width = match rows {
        ast::SetExpr::Values(v) => v.rows.first().map_or(0, |r| r.content.len()),
        body => query_width(body).unwrap_or(0),
    };
    desc.columns
        .iter()
        .take(width)
        .map(|c| c.name.clone())
        .collect()
}

fn query_width(body: &ast::SetExpr) -> Option<usize> {
    match body {
        ast::SetExpr::Select(s) => s
            .projection
            .iter()
            .all(|i| {
                matches!(
                    i,
                    ast::SelectItem::UnnamedExpr(_) | ast::SelectItem::ExprWithAlias { .. }
                )
            })
            .then_some(s.projection.len()),
        ast::SetExpr::Query(q) => query_width(&q.body),
        ast::SetExpr::SetOperation { left, .. } => query_width(left),
        ast::SetExpr::Values(v) => v.rows.first().map(|r| r.content.len()),
        _ => None,
    }
}

impl Engine {
    /// `LOCK TABLE` (see `table_locks`): only in a transaction block (25P01, as Postgres);
    /// each name a table (42P01 / 42809).
    async fn lock_tables(
        &self,
        session: &mut Session,
        l: &crate::sql::parser::LockStmt,
    ) -> Result<Output> {
        if !session.in_transaction {
            return Err(WeirError::new(
                "25P01",
                "LOCK TABLE can only be used in transaction blocks",
            ));
        }
        let mut tables = Vec::with_capacity(l.tables.len());
        for name in &l.tables {
            let entry = self
                .catalog
                .get(name)
                .ok_or_else(|| WeirError::undefined_table(name))?;
            let Some(t) = entry.table.clone() else {
                return Err(WeirError::new(
                    sqlstate::WRONG_OBJECT_TYPE,
                    format!("cannot lock relation \"{name}\""),
                )
                .with_detail(format!(
                    "This operation is not supported for {}s.",
                    entry.desc.kind.noun()
                )));
            };
            tables.push(t);
        }
        table_locks::lock_tables(session, &tables, l.excludes_writers, l.nowait).await?;
        Ok(Output::Command("LOCK TABLE".into()))
    }

    /// An INSERT with its table's column defaults made explicit: `DEFAULT` in VALUES and
    /// the columns it leaves out get their `DEFAULT` expression (NULL without one), as
    /// Postgres fills them. None when nothing changes.
    fn fill_defaults(&self, q: &ast::Statement) -> Result<Option<ast::Statement>> {
        // OVERRIDING {SYSTEM | USER} VALUE: the parse's mark taken off the statement planned
        if let ast::Statement::Insert(ins) = q
            && crate::sql::parser::has_insert_overriding(ins)
        {
            let mut plain = ins.clone();
            let overriding = crate::sql::parser::take_insert_overriding(&mut plain);
            let plain = ast::Statement::Insert(plain);
            return Ok(Some(
                self.fill_defaults_overriding(&plain, overriding)?
                    .unwrap_or(plain),
            ));
        }
        self.fill_defaults_overriding(q, None)
    }

    /// [`fill_defaults`](Self::fill_defaults) of an INSERT with `OVERRIDING SYSTEM VALUE`
    /// (Some(true)), `OVERRIDING USER VALUE` (Some(false)) or neither.
    fn fill_defaults_overriding(
        &self,
        q: &ast::Statement,
        overriding: Option<bool>,
    ) -> Result<Option<ast::Statement>> {
        let ast::Statement::Insert(ins) = q else {
            return Ok(None);
        };
        let Some(entry) = self.insert_target(ins) else {
            return Ok(None);
        };
        let is_default = |e: &ast::Expr| matches!(e, ast::Expr::Identifier(id) if id.quote_style.is_none() && id.value.eq_ignore_ascii_case("default"));
        let values_use_default = ins.source.as_ref().is_some_and(|src| {
            matches!(src.body.as_ref(), ast::SetExpr::Values(v) if v.rows.iter().flat_map(|r| r.content.iter()).any(is_default))
        });
        // Postgres' errors for VALUES rows that do not fit the target columns
        if let Some(ast::SetExpr::Values(v)) = ins.source.as_ref().map(|s| s.body.as_ref()) {
            let width = v.rows.first().map_or(0, |r| r.content.len());
            if v.rows.iter().any(|r| r.content.len() != width) {
                return Err(WeirError::syntax(
                    "VALUES lists must all be the same length",
                ));
            }
            insert_fills_first_columns(width, ins, &entry.desc)?;
            crate::plan::insert_values::values_convert(v, ins, &entry.desc)?;
        }
        // VALUES narrower than the table without a column list: the first columns (Postgres)
        let short = ins.columns.is_empty()
            && ins.source.as_ref().is_some_and(|src| {
                matches!(src.body.as_ref(), ast::SetExpr::Values(v)
                    if v.rows.first().is_some_and(|r| r.content.len() < entry.desc.columns.len()))
            });
        let defaults = &entry.desc.defaults;
        if defaults.is_empty()
            && entry.desc.generated.is_empty()
            && !values_use_default
            && !short
            && ins.source.is_some()
        {
            return Ok(None);
        }
        let default_of = |col: &str| -> Result<ast::Expr> {
            match defaults.iter().find(|(c, _)| c == col) {
                Some((_, text)) => crate::sql::parser::parse_expr_text(text),
                None => Ok(ast::Expr::value(ast::Value::Null)),
            }
        };
        let mut ins = ins.clone();
        // OVERRIDING SYSTEM VALUE: values for GENERATED ALWAYS identity columns are taken;
        // OVERRIDING USER VALUE: the values given for identity columns are not (a query's
        // rows are read without them: `INSERT INTO t (others) SELECT others FROM (rows)`)
        if overriding == Some(false)
            && let Some(src) = ins.source.as_ref()
            && !matches!(src.body.as_ref(), ast::SetExpr::Values(_))
        {
            let named = insert_columns(&ins.columns, src.body.as_ref(), &entry.desc);
            if named.iter().any(|c| entry.desc.identity(c).is_some()) {
                let alias = |i: usize| format!("weir_c{i}");
                let keep: Vec<usize> = (0..named.len())
                    .filter(|&i| entry.desc.identity(&named[i]).is_none())
                    .collect();
                let select = format!(
                    "SELECT {} FROM ({src}) AS weir_rows({})",
                    keep.iter()
                        .map(|&i| alias(i))
                        .collect::<Vec<_>>()
                        .join(", "),
                    (0..named.len()).map(alias).collect::<Vec<_>>().join(", ")
                );
                ins.source = Some(crate::sql::parser::parse_query(&select)?);
                ins.columns = keep
                    .iter()
                    .map(|&i| {
                        ast::ObjectName::from(vec![ast::Ident::with_quote('"', named[i].clone())])
                    })
                    .collect();
            }
        }
        let table_cols: Vec<String> = entry.desc.columns.iter().map(|c| c.name.clone()).collect();
        if ins.source.is_none() && ins.columns.is_empty() && ins.assignments.is_empty() {
            // INSERT INTO t DEFAULT VALUES: one row of every column's default
            let row: Vec<String> = table_cols
                .iter()
                .map(|c| default_of(c).map(|e| e.to_string()))
                .collect::<Result<_>>()?;
            ins.source = Some(crate::sql::parser::parse_query(&format!(
                "VALUES ({})",
                row.join(", ")
            ))?);
            return Ok(Some(ast::Statement::Insert(ins)));
        }
        let Some(src) = ins.source.as_mut() else {
            return Ok(None);
        };
        let named = insert_columns(&ins.columns, src.body.as_ref(), &entry.desc);
        let missing: Vec<String> = defaults
            .iter()
            .map(|(c, _)| c.clone())
            .filter(|c| !named.contains(c))
            .collect();
        // GENERATED ALWAYS AS IDENTITY and stored generated columns: only DEFAULT may be
        // written there
        let always = entry
            .desc
            .options
            .iter()
            .filter(|(k, _)| k == "weir.identity_always")
            .map(|(_, v)| (v, false))
            .chain(entry.desc.generated.iter().map(|(c, _)| (c, true)));
        if overriding == Some(false) {
            let identity: Vec<usize> = named
                .iter()
                .enumerate()
                .filter(|(_, c)| entry.desc.identity(c).is_some())
                .map(|(i, _)| i)
                .collect();
            // (a query's rows were read without them above)
            if let ast::SetExpr::Values(vals) = src.body.as_mut() {
                for row in vals.rows.iter_mut() {
                    for &i in &identity {
                        if let Some(e) = row.content.get_mut(i) {
                            *e = ast::Expr::Identifier(ast::Ident::new("DEFAULT"));
                        }
                    }
                }
            }
        }
        for (v, generated) in always {
            let Some(at) = named.iter().position(|c| c == v) else {
                continue;
            };
            let explicit = match src.body.as_ref() {
                ast::SetExpr::Values(vals) => vals
                    .rows
                    .iter()
                    .any(|r| r.content.get(at).is_some_and(|e| !is_default(e))),
                _ => true,
            };
            if explicit && generated {
                return Err(generated::not_default_error(v, false));
            }
            if explicit && overriding != Some(true) {
                return Err(WeirError::new(
                    sqlstate::GENERATED_ALWAYS,
                    format!("cannot insert a non-DEFAULT value into column \"{v}\""),
                )
                .with_detail(format!(
                    "Column \"{v}\" is an identity column defined as GENERATED ALWAYS."
                ))
                .with_hint("Use OVERRIDING SYSTEM VALUE to override."));
            }
        }
        match src.body.as_mut() {
            ast::SetExpr::Values(v) => {
                for row in v.rows.iter_mut() {
                    for (k, e) in row.content.iter_mut().enumerate() {
                        if is_default(e) {
                            *e = default_of(named.get(k).map(String::as_str).unwrap_or(""))?;
                        }
                    }
                    for c in &missing {
                        row.content.push(default_of(c)?);
                    }
                }
            }
            _ if missing.is_empty() => {}
            _ if ins.columns.is_empty() => {
                // INSERT ... SELECT without a column list fills columns by position
                return Ok(None);
            }
            _ => {
                // INSERT (cols) SELECT ...: the defaults after the query's columns
                let extra: Vec<String> = missing
                    .iter()
                    .map(|c| default_of(c).map(|e| e.to_string()))
                    .collect::<Result<_>>()?;
                let inner: Vec<String> = (0..named.len()).map(|k| format!("weir_c{k}")).collect();
                let extra: Vec<String> = extra
                    .iter()
                    .enumerate()
                    .map(|(k, e)| format!("{e} AS weir_d{k}"))
                    .collect();
                let sql = format!(
                    "SELECT *, {} FROM ({}) AS weir_insert_source({})",
                    extra.join(", "),
                    src,
                    inner.join(", ")
                );
                *src = crate::sql::parser::parse_query(&sql)?;
            }
        }
        if !missing.is_empty() || short {
            if ins.columns.is_empty() {
                ins.columns = named
                    .iter()
                    .map(|c| ast::ObjectName::from(vec![ast::Ident::with_quote('"', c.clone())]))
                    .collect();
            }
            for c in &missing {
                ins.columns
                    .push(ast::ObjectName::from(vec![ast::Ident::with_quote(
                        '"',
                        c.clone(),
                    )]));
            }
        }
        Ok(Some(ast::Statement::Insert(ins)))
    }
}

impl Engine {
    /// FLUSH: every view has taken in everything written before it.
    async fn flush(&self) -> Result<()> {
        // generators that end and run unpaced are part of "everything so far"
        self.dataflow.sources.catch_up().await?;
        self.dataflow.flush().await?;
        // and sinks have committed what the views gave them
        self.dataflow.sinks.catch_up().await?;
        Ok(())
    }

    /// Create a sequence relation.
    pub(crate) fn create_sequence(
        &self,
        name: &str,
        if_not_exists: bool,
        spec: crate::catalog::sequences::SequenceSpec,
        text: &str,
        owner: u32,
    ) -> Result<bool> {
        let created = self.catalog.create(name, if_not_exists, |oid| {
            Ok(RelationDesc {
                oid,
                name: name.to_owned(),
                kind: RelationKind::Sequence,
                columns: vec![],
                primary_key: vec![],
                watermark: None,
                definition: text.to_owned(),
                query: None,
                dependencies: vec![],
                options: spec.options(),
                emit_on_window_close: false,
                append_only: false,
                owner,
                acl: None,
                defaults: vec![],
                indexes: vec![],
                checks: vec![],
                foreign_keys: vec![],
                comments: Default::default(),
                not_valid: vec![],
                generated: vec![],
                time_zone: None,
                domains: vec![],
                restores_from: vec![],
            })
        })?;
        Ok(created)
    }
}

/// Run a small plan to the end (RETURNING, a default, a probe): all its batches.
pub(crate) async fn collect_plan(session: &Session, plan: LogicalPlan) -> Result<Vec<RecordBatch>> {
    Ok(session
        .ctx
        .execute_logical_plan(plan)
        .await?
        .collect()
        .await?)
}

/// The values an INSERT or UPDATE writes convert to their columns' types as Postgres'
/// assignment casts do: a number, Boolean, date, time or interval does not become a value
/// of another of these kinds (`UPDATE t SET d = 5` with `d` a date, `b = 1` with `b` a
/// Boolean: 42804, where an Arrow cast would make `1970-01-06` and `true`). Text becomes
/// anything (a quoted literal is read as the column's type), and anything becomes text.
fn assignments_convert(input: &LogicalPlan, desc: &crate::catalog::RelationDesc) -> Result<()> {
    use datafusion::logical_expr::{Cast, Expr, ExprSchemable, TryCast};
    let LogicalPlan::Projection(p) = input else {
        return Ok(());
    };
    let input_schema = p.input.schema();
    for (e, field) in p.expr.iter().zip(p.schema.fields()) {
        let mut e = e;
        while let Expr::Alias(a) = e {
            e = &a.expr;
        }
        let (Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. })) = e else {
            continue;
        };
        let Ok(from) = expr.get_type(input_schema.as_ref()) else {
            continue;
        };
        let allowed = crate::catalog::matched_types::assignable(&from, field.data_type());
        if allowed {
            continue;
        }
        let Some(column) = desc.columns.iter().find(|c| c.name == *field.name()) else {
            continue;
        };
        // (an integer constant that fits is Postgres' `integer`)
        let from = match expr.as_ref() {
            Expr::Literal(datafusion::common::ScalarValue::Int64(Some(v)), _)
                if i32::try_from(*v).is_ok() =>
            {
                DataType::Int32
            }
            _ => from,
        };
        let shown = match crate::sql::types::SqlType::from_arrow(&from) {
            Some(SqlType::Numeric(_)) => "numeric".to_owned(),
            Some(t) => t.display_name(),
            None => from.to_string(),
        };
        return Err(crate::plan::insert_values::assignment_mismatch(
            &column.name,
            &column.ty,
            &shown,
        ));
    }
    Ok(())
}

/// The relation column a plan's output column `c` reads unchanged (through renames,
/// filters, sorts, limits, joins and subqueries), as (relation, column name).
fn column_origin(
    plan: &LogicalPlan,
    c: &datafusion::common::Column,
) -> Option<(datafusion::common::TableReference, String)> {
    use datafusion::logical_expr::Expr;
    match plan {
        LogicalPlan::TableScan(ts) => {
            let ours = c
                .relation
                .as_ref()
                .is_none_or(|r| r.resolved_eq(&ts.table_name));
            (ours && ts.projected_schema.has_column(c))
                .then(|| (ts.table_name.clone(), c.name.clone()))
        }
        LogicalPlan::Projection(p) => {
            let i = p.schema.index_of_column(c).ok()?;
            let mut e = p.expr.get(i)?;
            while let Expr::Alias(a) = e {
                e = &a.expr;
            }
            match e {
                Expr::Column(inner) => column_origin(&p.input, inner),
                _ => None,
            }
        }
        LogicalPlan::SubqueryAlias(s) => {
            let i = s.schema.index_of_column(c).ok()?;
            let (q, f) = s.input.schema().qualified_field(i);
            column_origin(
                &s.input,
                &datafusion::common::Column::new(q.cloned(), f.name()),
            )
        }
        LogicalPlan::Filter(_)
        | LogicalPlan::Sort(_)
        | LogicalPlan::Limit(_)
        | LogicalPlan::Repartition(_)
        | LogicalPlan::Distinct(datafusion::logical_expr::Distinct::All(_)) => {
            column_origin(plan.inputs().first()?, c)
        }
        // a GROUP BY column (the aggregate's first outputs), a window's input column
        LogicalPlan::Aggregate(a) => {
            let i = a.schema.index_of_column(c).ok()?;
            match a.group_expr.get(i)? {
                Expr::Column(inner) => column_origin(&a.input, inner),
                _ => None,
            }
        }
        LogicalPlan::Window(w) if w.input.schema().has_column(c) => column_origin(&w.input, c),
        LogicalPlan::Join(j) => {
            if j.left.schema().has_column(c) {
                column_origin(&j.left, c)
            } else {
                column_origin(&j.right, c)
            }
        }
        _ => None,
    }
}

/// A DML statement's change, planned while its table's writer lock is held.
struct PlannedDml {
    table: Arc<TableStore>,
    change: Change,
    verb: &'static str,
    _writer: Option<table_locks::WriterLock>,
}

/// Rows `width` values wide into an INSERT's targets: Postgres' 42601 when there are more
/// values than targets, or (columns listed) fewer; true when no columns are listed and the
/// rows are narrower than the table (they fill its first columns).
fn insert_fills_first_columns(
    width: usize,
    ins: &ast::Insert,
    desc: &crate::catalog::RelationDesc,
) -> Result<bool> {
    let targets = if ins.columns.is_empty() {
        desc.columns.len()
    } else {
        ins.columns.len()
    };
    if width > targets {
        return Err(WeirError::syntax(
            "INSERT has more expressions than target columns",
        ));
    }
    if width < targets && !ins.columns.is_empty() {
        return Err(WeirError::syntax(
            "INSERT has more target columns than expressions",
        ));
    }
    Ok(width < targets)
}

pub(crate) use table_locks::lock_writer;

/// A new table's columns as the catalog describes them (a primary key's are NOT NULL).
fn table_columns(ct: &CreateTable) -> Vec<ColumnDesc> {
    ct.columns
        .iter()
        .map(|c| ColumnDesc {
            name: c.name.clone(),
            ty: c.ty.clone(),
            nullable: !c.not_null && !ct.primary_key.contains(&c.name),
        })
        .collect()
}

/// A table fed by a connector changes only through it.
fn refuse_connector_table(desc: &RelationDesc, what: &str) -> Result<()> {
    match desc.options.iter().find(|(k, _)| k == "connector") {
        Some((_, c)) => Err(WeirError::new(
            sqlstate::WRONG_OBJECT_TYPE,
            format!(
                "cannot {what} table \"{}\": it is fed by the {c} connector",
                desc.name
            ),
        )
        .with_hint("Write to its topic instead.")),
        None => Ok(()),
    }
}

/// A declared WATERMARK, checked against the columns: a timestamp column, and an expression
/// `col - INTERVAL '...'` (or just `col`).
fn watermark_desc(w: &WatermarkSpec, columns: &[ColumnDesc]) -> Result<WatermarkDesc> {
    let col = columns.iter().find(|c| c.name == w.column).ok_or_else(|| {
        WeirError::new(
            sqlstate::UNDEFINED_COLUMN,
            format!("watermark column \"{}\" does not exist", w.column),
        )
    })?;
    if !matches!(col.ty, SqlType::Timestamp(_) | SqlType::TimestampTz(_)) {
        return Err(WeirError::new(
            sqlstate::DATATYPE_MISMATCH,
            format!(
                "watermark column \"{}\" must be a timestamp, not {}",
                w.column,
                col.ty.display_name()
            ),
        ));
    }
    Ok(WatermarkDesc {
        column: w.column.clone(),
        expr: w.expr.to_string(),
        delay_us: crate::sql::time::watermark_delay(&w.column, &w.expr)?,
    })
}

/// An ALTER's relation that is not there: with IF EXISTS, Postgres' NOTICE and the
/// statement's tag (nothing done); else 42P01.
/// COMMIT or ROLLBACK outside a transaction block: Postgres warns (and does nothing).
/// Statements that change the schema (what [`Engine::schema_undo`] may have to reverse).
fn changes_schema(stmt: &Statement) -> bool {
    matches!(
        stmt,
        Statement::CreateView(_)
            | Statement::CreatePlainView(_)
            | Statement::AlterTable(_)
            | Statement::RenameRelation { .. }
            | Statement::CreateFunction(_)
            | Statement::DropFunction(_)
            | Statement::CreateSequence(_)
            | Statement::AddIdentity(_)
            | Statement::CreateTable(_)
            | Statement::CreateTableAs(_)
            | Statement::CreateSink(_)
            | Statement::CreateSource(_)
            | Statement::Drop(_)
            | Statement::CreateEnumType { .. }
            | Statement::CreateDomain(_)
            | Statement::AlterDomain { .. }
            | Statement::DropDomain { .. }
            | Statement::AlterColumnSetting { .. }
            | Statement::StorageParameters { .. }
            | Statement::CreateIndex(_)
            | Statement::CreateExtension { .. }
            | Statement::DropExtension { .. }
            | Statement::CreateSchema { .. }
            | Statement::DropSchema { .. }
            | Statement::AlterSchema { .. }
            | Statement::CommentOnSchema { .. }
    )
}

/// A ROLLBACK passed schema changes it could not undo (a DROP, a column's type): say which.
pub(crate) fn kept_changes_warning(
    kept: &[String],
    notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
) {
    if let Some(n) = notices {
        for what in kept {
            let _ = n.send(format!(
                "WARNING: ROLLBACK did not undo \"{what}\": Weir applies it at once and cannot take it back"
            ));
        }
    }
}

fn no_transaction_warning(
    session: &Session,
    notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
) {
    if !session.in_transaction
        && !session.implicit_transaction
        && let Some(n) = notices
    {
        let _ = n.send("WARNING: there is no transaction in progress".into());
    }
}

/// What a `DROP ... CASCADE` (or a `DROP COLUMN` that takes constraints) takes beside what
/// it names, as Postgres tells it: one NOTICE, `drop cascades to x` for one, `drop cascades
/// to N other objects` with the list in its DETAIL for several (`lines`: each `drop
/// cascades to ...`).
pub(crate) fn cascade_notice(
    notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    mut lines: Vec<String>,
) {
    let Some(n) = notices else { return };
    let _ = match lines.len() {
        0 => Ok(()),
        1 => n.send(lines.remove(0)),
        k => n.send(format!(
            "drop cascades to {k} other objects\nDETAIL: {}",
            lines.join("\n")
        )),
    };
}

pub(crate) fn missing_relation(
    name: &str,
    if_exists: bool,
    notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    tag: &str,
) -> Result<Output> {
    if !if_exists {
        return Err(WeirError::undefined_table(name));
    }
    if let Some(n) = notices {
        let name = crate::sql::search_path::written(name);
        let _ = n.send(format!("relation \"{name}\" does not exist, skipping"));
    }
    Ok(Output::Command(tag.into()))
}

/// Names of the relations a statement reads (normalized): every relation it names except
/// the names its WITH clauses define (a CTE may share a relation's name and hides it).
pub(crate) fn referenced_relations(stmt: &ast::Statement) -> Vec<String> {
    struct Names {
        ctes: Vec<String>,
        found: Vec<String>,
    }
    impl ast::Visitor for Names {
        type Break = ();
        fn pre_visit_query(&mut self, q: &ast::Query) -> std::ops::ControlFlow<()> {
            if let Some(with) = &q.with {
                for cte in &with.cte_tables {
                    self.ctes
                        .push(crate::sql::parser::normalize_ident(&cte.alias.name));
                }
            }
            std::ops::ControlFlow::Continue(())
        }
        fn pre_visit_relation(&mut self, r: &ast::ObjectName) -> std::ops::ControlFlow<()> {
            if let Ok(n) = crate::sql::parser::relation_name(r)
                && !(r.0.len() == 1 && self.ctes.contains(&n))
            {
                self.found.push(n);
            }
            std::ops::ControlFlow::Continue(())
        }
    }
    let mut v = Names {
        ctes: Vec::new(),
        found: Vec::new(),
    };
    let _ = ast::Visit::visit(stmt, &mut v);
    v.found
}

/// Statements DataFusion would run that change state or touch files: refused.
fn is_side_effecting(plan: &LogicalPlan) -> bool {
    matches!(
        plan,
        LogicalPlan::Ddl(_)
            | LogicalPlan::Dml(_)
            | LogicalPlan::Copy(_)
            | LogicalPlan::Statement(DfStatement::SetVariable(_))
    )
}

/// Placeholder fields by position ($1 first), with the declared type of the column a
/// placeholder is compared with or assigned to, where the planner knows it.
pub(crate) fn parameter_types(plan: &LogicalPlan) -> Result<Vec<Option<FieldRef>>> {
    let types = plan.get_parameter_fields()?;
    let mut out: Vec<(usize, Option<FieldRef>)> = types
        .into_iter()
        .filter_map(|(k, v)| {
            k.trim_start_matches('$')
                .parse::<usize>()
                .ok()
                .map(|i| (i, v))
        })
        .collect();
    out.sort_by_key(|(i, _)| *i);
    let n = out.last().map(|(i, _)| *i).unwrap_or(0);
    let mut res = vec![None; n];
    for (i, t) in out {
        if i >= 1 {
            res[i - 1] = t;
        }
    }
    Ok(res)
}

fn show_schema(name: &str) -> SchemaRef {
    let n = Session::normalize(name);
    Arc::new(Schema::new(vec![Field::new(
        canonical_name(&n),
        DataType::Utf8,
        false,
    )]))
}

fn show_relations_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("Name", DataType::Utf8, false)]))
}

/// Isolation levels Weir cannot give are refused (0A000), not accepted and ignored.
fn check_tx_modes(modes: &crate::sql::parser::TxModes) -> Result<()> {
    if let Some(level) = &modes.isolation {
        crate::server::settings::validate("transaction_isolation", level, usize::MAX)?;
    }
    Ok(())
}

/// What a statement that writes is called in a read-only transaction's error.
/// The `kind` label of `weir_queries_total`.
fn query_kind(stmt: &Statement) -> &'static str {
    match stmt {
        Statement::Query(_) | Statement::ExplainView(_) | Statement::ExplainAnalyzeView(_) => {
            "select"
        }
        Statement::Dml(q) => match q.as_ref() {
            ast::Statement::Insert(_) => "insert",
            ast::Statement::Update(_) => "update",
            ast::Statement::Delete(_) => "delete",
            _ => "other",
        },
        Statement::BulkInsert(_) => "insert",
        Statement::Merge(_) => "merge",
        Statement::Copy(_) => "copy",
        Statement::Subscribe(_) | Statement::Declare(_) | Statement::Fetch(_) => "cursor",
        Statement::CreateTable(_)
        | Statement::CreateSource(_)
        | Statement::CreateView(_)
        | Statement::CreatePlainView(_)
        | Statement::CreateSequence(_)
        | Statement::AlterSequence(_)
        | Statement::CreateEnumType { .. }
        | Statement::AlterType { .. }
        | Statement::CreateDomain(_)
        | Statement::AlterDomain { .. }
        | Statement::DropDomain { .. }
        | Statement::AlterColumnSetting { .. }
        | Statement::StorageParameters { .. }
        | Statement::AddIdentity(_)
        | Statement::AlterIdentity(_)
        | Statement::AlterTable(_)
        | Statement::Comment(_)
        | Statement::RenameRelation { .. }
        | Statement::CreateFunction(_)
        | Statement::DropFunction(_)
        | Statement::CreateIndex(_)
        | Statement::CreateSink(_)
        | Statement::Drop(_)
        | Statement::CreateExtension { .. }
        | Statement::DropExtension { .. }
        | Statement::Security(_) => "ddl",
        Statement::Begin(_)
        | Statement::Commit
        | Statement::Rollback
        | Statement::Savepoint(_)
        | Statement::Release(_)
        | Statement::RollbackTo(_) => "transaction",
        _ => "other",
    }
}

fn write_kind(stmt: &Statement) -> Option<&'static str> {
    Some(match stmt {
        Statement::Dml(q) => match q.as_ref() {
            ast::Statement::Insert(_) => "INSERT",
            ast::Statement::Update { .. } => "UPDATE",
            ast::Statement::Delete(_) => "DELETE",
            _ => "a data-modifying statement",
        },
        Statement::BulkInsert(_) => "INSERT",
        Statement::Merge(_) => "MERGE",
        Statement::CreateTable(_) => "CREATE TABLE",
        Statement::CreateSource(_) => "CREATE SOURCE",
        Statement::CreateView(_) => "CREATE MATERIALIZED VIEW",
        Statement::CreatePlainView(_) => "CREATE VIEW",
        Statement::CreateSequence(_) => "CREATE SEQUENCE",
        Statement::AlterSequence(_) => "ALTER SEQUENCE",
        Statement::CreateEnumType { .. } => "CREATE TYPE",
        Statement::AlterType { .. } => "ALTER TYPE",
        Statement::CreateDomain(_) => "CREATE DOMAIN",
        Statement::AlterDomain { .. } => "ALTER DOMAIN",
        Statement::DropDomain { .. } => "DROP DOMAIN",
        Statement::AlterColumnSetting { .. } => "ALTER TABLE",
        Statement::StorageParameters { kind: "INDEX", .. } => "ALTER INDEX",
        Statement::StorageParameters {
            kind: "MATERIALIZED VIEW",
            ..
        } => "ALTER MATERIALIZED VIEW",
        Statement::StorageParameters { .. } => "ALTER TABLE",
        Statement::AddIdentity(_) | Statement::AlterIdentity(_) => "ALTER TABLE",
        Statement::AlterTable(_) => "ALTER TABLE",
        Statement::RenameRelation { .. } => "ALTER",
        Statement::Comment(_) => "COMMENT",
        Statement::CreateFunction(_) => "CREATE FUNCTION",
        Statement::DropFunction(_) => "DROP FUNCTION",
        Statement::CreateIndex(_) => "CREATE INDEX",
        Statement::CreateSink(_) => "CREATE SINK",
        Statement::Drop(_) => "DROP",
        Statement::CreateExtension { .. } => "CREATE EXTENSION",
        Statement::DropExtension { .. } => "DROP EXTENSION",
        Statement::Security(s) => return s.write_kind(),
        Statement::Copy(c) => match c.as_ref() {
            crate::sql::client_stmts::Copy::From { .. } => "COPY FROM",
            _ => return None,
        },
        _ => return None,
    })
}
