//! Materialized views: CREATE (plan, lower, persist, backfill), restore at startup, DROP
//! (with CASCADE), EXPLAIN, and which tables forward their changes to the dataflow.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::StringArray;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::logical_expr::{Expr, ExprSchemable, LogicalPlanBuilder};
use datafusion::sql::parser::Statement as DfParserStatement;
use datafusion::sql::sqlparser::ast;
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info};

use crate::catalog::rewrite::{display_column_name, rewrite_query};
use crate::catalog::{ColumnDesc, RelationDesc, RelationKind};
use crate::connectors::{
    self, runner::Resume, runner::RunnerSpec, runner::Share, runner::SourceKind,
};
use crate::dataflow::checkpoint::ViewCheckpoint;
use crate::dataflow::graph::Graph;
use crate::dataflow::position::Position;
use crate::dataflow::runtime::{CreateView as CreateMsg, Msg, RestoreFrom};
use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::plan::view::{Lowering, WindowOptions, check_deterministic};
use crate::server::session::Session;
use crate::sql::parser::{CreateView, DropKind};
use crate::sql::types::field_sql_type;

impl Engine {
    /// Plan a view's query and lower it to a dataflow graph whose output has exactly the
    /// view's declared column types and names.
    pub(crate) async fn plan_view(
        &self,
        state: datafusion::execution::SessionState,
        name: &str,
        query: &ast::Query,
        options: &[(String, String)],
        emit_on_window_close: bool,
        shards: usize,
    ) -> Result<(Graph, Vec<ColumnDesc>)> {
        let window = view_options(options, emit_on_window_close)?;
        let mut q = query.clone();
        self.whole_row_references(&mut q);
        self.expand_plain_views(&mut q)?;
        self.inline_sql_functions(&mut q)?;
        rewrite_query(&mut q)?;
        let mut stmt = ast::Statement::Query(Box::new(q));
        let _pending = crate::plan::match_recognize::prepare_statement(
            &mut stmt,
            &state,
            crate::plan::asof::Mode::View,
        )
        .await?;
        let plan = state
            .statement_to_plan(DfParserStatement::Statement(Box::new(stmt)))
            .await?;
        let plan = crate::catalog::pg_semantics::fix_planned(plan)?;
        let plan = crate::plan::asof::plan(plan, crate::plan::asof::Mode::View)?;
        if !plan.get_parameter_fields()?.is_empty() {
            return Err(WeirError::syntax(
                "a materialized view cannot have parameters ($1)",
            ));
        }
        check_deterministic(&plan)?;
        // the view's columns: Postgres names, declared SQL types
        let columns = view_columns(plan.schema(), &[], "a materialized view cannot store")?;
        let mut conform = Vec::with_capacity(columns.len());
        for ((q, f), c) in plan.schema().iter().zip(&columns) {
            let col = Expr::Column(datafusion::common::Column::new(q.cloned(), f.name()));
            let target = c.ty.arrow_type();
            let e = if f.data_type() == &target {
                col
            } else {
                col.cast_to(&target, plan.schema())?
            };
            conform.push(e.alias(c.name.clone()));
        }
        let plan = LogicalPlanBuilder::from(plan).project(conform)?.build()?;
        // the event-time column, when the view reads one watermarked relation
        let mut watermarked: Vec<String> =
            crate::engine::referenced_relations(&ast::Statement::Query(Box::new(query.clone())))
                .iter()
                .filter_map(|n| self.catalog.get(n))
                .filter_map(|e| e.desc.watermark.as_ref().map(|w| w.column.clone()))
                .collect();
        watermarked.dedup();
        let ts = match watermarked.as_slice() {
            [one] => Some(one.as_str()),
            _ => None,
        };
        let plan = crate::plan::view::group_windows_by_end(plan)?;
        let optimized = state.optimize(&plan)?;
        // equal-meaning subplans made equal, so the lowering computes them once; an
        // optimization only: a plan it cannot rewrite is lowered as it is
        let optimized = match crate::plan::shared::canonical_subplans(optimized.clone()) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "common subplans of a view not made equal");
                optimized
            }
        };
        let lower = || {
            Lowering::new(&self.catalog)
                .with_window_options(window.clone())
                .with_event_time(ts.map(str::to_owned))
                .lower_view(&optimized)
        };
        let (mut graph, windowed) = lower()?;
        // shards 1..: the same plan again (`dataflow/shards.rs`)
        let more = (1..shards.max(1))
            .map(|_| lower().map(|(g, _)| g))
            .collect::<Result<Vec<_>>>()?;
        graph.add_shards(more)?;
        if window.emit_on_close && windowed == 0 {
            return Err(WeirError::not_supported(
                "EMIT ON WINDOW CLOSE needs an aggregate grouped by window_start or window_end of TUMBLE, HOP or SESSION, or by the watermarked event-time column (or date_trunc of it)",
            ));
        }
        // rows within the allowed lateness can still change the view: the watermark it
        // publishes trails by that much
        graph.set_output_delay(window.lateness_us);
        // rows of watermarked tables are admitted by the view's lateness policy
        for rel in graph.sources() {
            let Some(entry) = self.catalog.get_by_oid(rel) else {
                continue;
            };
            let Some(w) = &entry.desc.watermark else {
                continue;
            };
            let Some(ts_col) = entry.desc.columns.iter().position(|c| c.name == w.column) else {
                continue;
            };
            let log = self.dataflow.late.clone();
            let lateness = window.lateness_us;
            graph.set_late_policy(rel, || crate::dataflow::graph::LatePolicy {
                ts_col,
                lateness_us: lateness,
                view: name.to_owned(),
                log: log.clone(),
                record: true,
            });
        }
        Ok((graph, columns))
    }

    pub(crate) async fn create_view(
        &self,
        session: &Session,
        cv: &CreateView,
        text: &str,
        progress: Option<mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        self.create_maintained(
            session,
            cv,
            text,
            progress,
            RelationKind::MaterializedView,
            cv.options.clone(),
        )
        .await?;
        Ok(Output::Command("CREATE MATERIALIZED VIEW".into()))
    }

    /// Create a relation whose query the dataflow maintains: a materialized view, or a
    /// sink with `AS SELECT` (`stored_options` are then the sink's). Returns whether it was
    /// created (not with IF NOT EXISTS on an existing name).
    pub(crate) async fn create_maintained(
        &self,
        session: &Session,
        cv: &CreateView,
        text: &str,
        progress: Option<mpsc::UnboundedSender<String>>,
        kind: RelationKind,
        stored_options: Vec<(String, String)>,
    ) -> Result<bool> {
        if let Some(existing) = self.catalog.get(&cv.name) {
            if cv.if_not_exists {
                if let Some(p) = &progress {
                    let _ = p.send(format!(
                        "relation \"{}\" already exists, skipping",
                        existing.desc.name
                    ));
                }
                return Ok(false);
            }
            return Err(WeirError::new(
                sqlstate::DUPLICATE_TABLE,
                format!("relation \"{}\" already exists", cv.name),
            ));
        }
        let (graph, columns) = self
            .plan_view(
                session.ctx.state(),
                &cv.name,
                &cv.query,
                &cv.options,
                cv.emit_on_window_close,
                self.limits.workers,
            )
            .await?;
        let mut dependencies = graph.sources();
        // the plain views it reads (expanded into it) keep it from being dropped under it
        dependencies.extend(self.expand_plain_views(&mut (*cv.query).clone())?);
        let query = crate::sql::parser::query_text(&cv.query);
        let correct = view_options(&cv.options, cv.emit_on_window_close)?.correct;
        let append_only = (cv.emit_on_window_close && !correct)
            || graph.only_inserts(|oid| {
                self.catalog
                    .get_by_oid(oid)
                    .is_some_and(|e| e.desc.append_only)
            });
        self.catalog.create(&cv.name, false, |oid| {
            Ok(RelationDesc {
                oid,
                name: cv.name.clone(),
                kind,
                columns,
                primary_key: vec![],
                watermark: None,
                definition: text.to_owned(),
                query: Some(query),
                dependencies,
                options: stored_options,
                emit_on_window_close: cv.emit_on_window_close,
                append_only,
                owner: session.role(),
                acl: None,
                defaults: vec![],
                indexes: vec![],
                checks: vec![],
                foreign_keys: vec![],
                comments: Default::default(),
                not_valid: vec![],
                generated: vec![],
                time_zone: Some(session.time_zone())
                    .filter(|z| !z.is_utc())
                    .map(|z| z.arg_text()),
                domains: vec![],
                restores_from: vec![],
            })
        })?;
        let entry = self
            .catalog
            .get(&cv.name)
            .ok_or_else(|| WeirError::internal("created view vanished"))?;
        if let Err(e) = self.start_view(&entry.desc, graph, progress, None).await {
            // nothing of a view that could not be built stays behind
            let _ = self.catalog.drop_relation(&cv.name);
            return Err(e);
        }
        info!(name = %cv.name, kind = kind.noun(), "created and maintained");
        Ok(true)
    }

    /// Hand a view to the dataflow with its inputs' contents taken at one point of the
    /// change stream: the writer locks of the tables it reads are held while their
    /// snapshots are taken and the view is queued, so no change is missed or seen twice.
    ///
    /// With `restore`, the view comes back from its checkpoint instead (its fingerprint
    /// must match the graph planned now): no snapshots; the caller holds the tables'
    /// writer locks and replays their logs after the checkpoint (see `restore_views`), and
    /// connector sources resume at their checkpointed positions. Returns the bytes of
    /// state read.
    async fn start_view(
        &self,
        desc: &RelationDesc,
        mut graph: Graph,
        progress: Option<mpsc::UnboundedSender<String>>,
        restore: Option<(u64, &ViewCheckpoint)>,
    ) -> Result<u64> {
        let sources = graph.sources();
        let fingerprint = crate::dataflow::checkpoint::fingerprint(
            &mut graph,
            &format!("{:?}", desc.schema()),
            desc.query.as_deref().unwrap_or(&desc.definition),
        );
        // a checkpoint of the graph the view ran before a relation it reads was renamed
        // holds the same state under other names
        if let Some((_, vc)) = restore
            && vc.fingerprint != fingerprint
            && !desc
                .restores_from
                .contains(&crate::dataflow::checkpoint::fingerprint_digest(
                    &vc.fingerprint,
                ))
        {
            return Err(WeirError::new(
                "XX000",
                "its dataflow no longer matches its checkpoint (planned differently by this version)",
            ));
        }
        let input_of =
            |oid: u32| restore.and_then(|(_, vc)| vc.inputs.iter().find(|i| i.relation == oid));
        // each connector source the view reads comes under a relation id private to this
        // view: from the source's shared reader (joined at once: the first view over a
        // source, `latest`, or restored as joined), or first from a backfill reader of its
        // own that joins the shared reader at its position (`connectors/shared.rs`)
        let mut runners = Vec::new();
        let mut inputs = Vec::new();
        let mut watermarks = Vec::new();
        let mut restored_positions = Vec::new();
        let mut joins = Vec::new();
        let mut joined_readers: Vec<Arc<crate::connectors::shared::SharedReader>> = Vec::new();
        let mut instances = Vec::new();
        let checkpoints = self.dataflow.checkpoint_interval.is_some();
        let store = self.catalog.store().clone();
        for oid in &sources {
            let mut rel = *oid;
            if let Some(e) = self.catalog.get_by_oid(*oid)
                && e.desc.kind == RelationKind::Source
            {
                rel = self.dataflow.sources.new_instance_id();
                graph.remap_relation(*oid, rel);
                instances.push(rel);
                let input = input_of(*oid);
                let (shared, created) = self
                    .dataflow
                    .sources
                    .shared_reader_or_new(*oid, &e.desc.name);
                let restored_reader = shared.restored;
                let shared = match created {
                    false => shared,
                    true => {
                        // the first view over the source: its reader starts with it
                        let r = shared;
                        self.dataflow
                            .send(Msg::Share {
                                shared: r.relation,
                                source: *oid,
                                position: Position::default(),
                                watermark: None,
                            })
                            .await?;
                        let mut spec = runner_spec(
                            &self.catalog,
                            &e.desc,
                            desc,
                            r.relation,
                            Share::Reader(r.clone()),
                        )?;
                        if checkpoints && matches!(spec.kind, SourceKind::Kafka(_)) {
                            spec.journal = Some(crate::dataflow::journal::Journal::fresh(
                                store.clone(),
                                0,
                                *oid,
                            )?);
                        }
                        if restore.is_none() {
                            joins.push((r.relation, *oid, rel));
                        }
                        runners.push(spec);
                        r
                    }
                };
                self.dataflow.sources.attach(*oid, desc.oid);
                let joined_now = joins.iter().any(|(_, _, i)| *i == rel);
                let latest = connectors::options(&e.desc.options)
                    .get("scan.startup.mode")
                    .is_some_and(|m| m.eq_ignore_ascii_case("latest"));
                match restore {
                    _ if joined_now => joined_readers.push(shared.clone()),
                    Some(_) if restored_reader && input.is_some_and(|i| i.shared) => {
                        // it stood with the shared reader at the checkpoint
                        joins.push((shared.relation, *oid, rel));
                        joined_readers.push(shared.clone());
                        let i = input.cloned();
                        let position = i
                            .as_ref()
                            .and_then(|i| i.position.clone())
                            .unwrap_or_default();
                        restored_positions.push((rel, position));
                    }
                    None if latest => {
                        joins.push((shared.relation, *oid, rel));
                        joined_readers.push(shared.clone());
                    }
                    _ => {
                        // the source's history first, then the shared reader
                        let mut spec = runner_spec(
                            &self.catalog,
                            &e.desc,
                            desc,
                            rel,
                            Share::Backfill(shared.clone()),
                        )?;
                        let mut replay = Vec::new();
                        if checkpoints && matches!(spec.kind, SourceKind::Kafka(_)) {
                            // how its batches fall is recorded, so recovery re-forms them
                            spec.journal = Some(match restore {
                                Some(_) => {
                                    let (j, entries) = crate::dataflow::journal::Journal::resume(
                                        store.clone(),
                                        desc.oid,
                                        *oid,
                                        input.and_then(|i| i.position.as_ref()),
                                        input.and_then(|i| i.watermark),
                                    )?;
                                    replay = entries;
                                    j
                                }
                                None => crate::dataflow::journal::Journal::fresh(
                                    store.clone(),
                                    desc.oid,
                                    *oid,
                                )?,
                            });
                        }
                        if restore.is_some() {
                            let position =
                                input.and_then(|i| i.position.clone()).unwrap_or_default();
                            // the next checkpoint records this until the instance moves on
                            restored_positions.push((rel, position.clone()));
                            spec.resume = Some(Resume {
                                position,
                                watermark: input.and_then(|i| i.watermark),
                                journal: replay,
                            });
                        }
                        runners.push(spec);
                    }
                }
            }
            inputs.push((rel, *oid));
            if let Some(w) = input_of(*oid).and_then(|i| i.watermark) {
                watermarks.push((rel, w));
            }
        }
        let tables: Vec<_> = sources
            .iter()
            .filter_map(|oid| self.catalog.get_by_oid(*oid))
            .filter_map(|e| e.table.clone())
            .collect();
        let mut guards = Vec::with_capacity(tables.len());
        if restore.is_none() {
            for t in &tables {
                guards.push(t.writer.lock().await);
            }
        }
        self.observe(&sources);
        let mut snapshots = Vec::with_capacity(tables.len());
        let mut watermark_specs = std::collections::HashMap::new();
        let mut positions = restored_positions;
        for t in &tables {
            match restore {
                Some(_) => {
                    let seq = input_of(t.oid)
                        .and_then(|i| i.position.clone())
                        .unwrap_or_default();
                    positions.push((t.oid, seq));
                }
                None => {
                    let scan = t.scan()?;
                    let seq = scan.seq;
                    snapshots.push((t.oid, scan));
                    if let Some(spec) = t.watermark_spec() {
                        watermark_specs.insert(t.oid, spec);
                    }
                    positions.push((t.oid, Position::single(seq as i64)));
                    if self.dataflow.checkpoint_interval.is_some() {
                        // its first checkpoint will need the log from here
                        t.hold_log_after(seq)?;
                    }
                }
            }
        }
        let mut fresh: Vec<u32> = instances;
        if restore.is_some() {
            fresh.extend(tables.iter().map(|t| t.oid));
        }
        // sinks over this view whose committed progress lies at or after the checkpoint:
        // an epoch must end exactly there (None: at the checkpoint itself)
        let mut cuts = Vec::new();
        let mut resuming: Vec<(u32, Option<crate::dataflow::runtime::CutOutcome>)> = Vec::new();
        if let Some((_, vc)) = restore {
            let progress = self
                .sink_restarts
                .lock()
                .progress
                .remove(&desc.oid)
                .unwrap_or_default();
            let caught_up = self.sink_restarts.lock().caught_up.clone();
            for (sink, p) in progress {
                match sink_resume(&inputs, vc, p.as_deref(), caught_up.contains(&sink)) {
                    SinkResume::AtRestore => resuming.push((sink, None)),
                    SinkResume::Cut(at) => {
                        let outcome = Arc::new(parking_lot::Mutex::new(None));
                        cuts.push(crate::dataflow::runtime::EpochCut {
                            view: desc.oid,
                            at,
                            outcome: outcome.clone(),
                        });
                        resuming.push((sink, Some(outcome)));
                    }
                    SinkResume::ReadBack => {}
                }
            }
        }
        let (done, rx) = oneshot::channel();
        let sent = self
            .dataflow
            .send(Msg::Create(Box::new(CreateMsg {
                oid: desc.oid,
                name: desc.name.clone(),
                graph,
                schema: desc.schema(),
                tables: snapshots,
                watermark_specs,
                fresh,
                progress,
                fingerprint: fingerprint.clone(),
                inputs,
                positions,
                joins,
                restore: restore.map(|(epoch, vc)| {
                    Box::new(RestoreFrom {
                        epoch,
                        view: vc.clone(),
                        watermarks,
                        cuts,
                    })
                }),
                done,
            })))
            .await;
        drop(guards);
        let result = match sent {
            Ok(()) => rx
                .await
                .map_err(|_| WeirError::internal("the dataflow worker has stopped"))
                .and_then(|r| r),
            Err(e) => Err(e),
        };
        match &result {
            Ok(_) => {
                self.fingerprints.lock().insert(desc.oid, fingerprint);
                // resuming sinks subscribe at the restored state, before the inputs move on
                for (sink, cut) in resuming {
                    if let Ok(sub) = self.dataflow.subscribe(desc.oid) {
                        let cut = cut.unwrap_or_else(|| {
                            Arc::new(parking_lot::Mutex::new(Some(Some(sub.epoch))))
                        });
                        self.sink_restarts.lock().ready.insert(sink, (sub, cut));
                    }
                }
                for r in joined_readers {
                    r.views.lock().push((desc.oid, desc.name.clone()));
                }
                for spec in runners {
                    self.dataflow.sources.start(self.dataflow.sender(), spec);
                }
            }
            Err(_) => {
                self.unobserve(&sources);
                self.leave_sources(desc.oid).await;
            }
        }
        result
    }

    /// Plan a maintained relation from its stored query (at a restart, or when a table
    /// it reads is altered), with its stored options: the graph and the columns it has.
    pub(crate) async fn plan_stored(
        &self,
        session: &Session,
        desc: &RelationDesc,
        shards: usize,
    ) -> Result<(Graph, Vec<ColumnDesc>)> {
        let sql = desc.query.clone().ok_or_else(|| {
            WeirError::internal(format!("view {} has no stored query", desc.name))
        })?;
        let query = parse_query(&sql)?;
        // a sink's options are its connector's
        let view_options: &[(String, String)] = match desc.kind {
            RelationKind::Sink => &[],
            _ => &desc.options,
        };
        // a stored view is planned in the zone it was created in, not the planning session's
        let zone = match &desc.time_zone {
            Some(z) => Some(crate::sql::time_zone::Zone::parse(z).map_err(|e| {
                WeirError::internal(format!("view {}'s time zone \"{z}\": {e}", desc.name))
            })?),
            None => None,
        };
        let mut state = session.ctx.state();
        crate::sql::time_zone::set_plan_zone(state.config_mut().options_mut(), zone);
        self.plan_view(
            state,
            &desc.name,
            &query,
            view_options,
            desc.emit_on_window_close,
            shards,
        )
        .await
    }

    /// A view rebuilt from its stored query at a restart has the columns this version plans
    /// for it: the same names, but a type may differ from the one stored by the version
    /// that created it (`avg` of integers was a double, is a `numeric` now); the catalog
    /// takes the new types (the contents are computed again). Other changes are refused.
    fn adopt_column_types(
        &self,
        v: &Arc<crate::catalog::Entry>,
        columns: Vec<ColumnDesc>,
    ) -> Result<Arc<crate::catalog::Entry>> {
        let same_names = columns.len() == v.desc.columns.len()
            && columns
                .iter()
                .zip(&v.desc.columns)
                .all(|(a, b)| a.name == b.name);
        if !same_names {
            return Err(WeirError::internal("its columns would change"));
        }
        if columns
            .iter()
            .zip(&v.desc.columns)
            .all(|(a, b)| a.ty == b.ty)
        {
            return Ok(v.clone());
        }
        for (a, b) in columns.iter().zip(&v.desc.columns) {
            if a.ty != b.ty {
                info!(view = %v.desc.name, column = %a.name, was = %b.ty.display_name(), now = %a.ty.display_name(), "a column of the rebuilt view has a new type");
            }
        }
        self.catalog.alter_relation(&v.desc.name, |d| {
            for (d, c) in d.columns.iter_mut().zip(&columns) {
                d.ty = c.ty.clone();
            }
            Ok(())
        })?;
        Ok(self
            .catalog
            .get_by_oid(v.desc.oid)
            .unwrap_or_else(|| v.clone()))
    }

    /// Stop materialized views' dataflows, newest first, keeping their catalog entries
    /// (an ALTER TABLE under them: [`Engine::rebuild_views`] starts them again).
    pub(crate) async fn stop_views(&self, views: &[Arc<crate::catalog::Entry>]) -> Result<()> {
        let mut views: Vec<_> = views
            .iter()
            .filter(|v| v.desc.kind == RelationKind::MaterializedView)
            .collect();
        views.sort_by_key(|v| std::cmp::Reverse(v.desc.oid));
        for v in views {
            self.stop_dataflow(&v.desc).await?;
            info!(view = %v.desc.name, "stopped materialized view to rebuild it");
        }
        Ok(())
    }

    /// Take a maintained relation's graph out of the dataflow: its source readers leave,
    /// the graph is dropped, its inputs are no longer observed for it.
    async fn stop_dataflow(&self, desc: &RelationDesc) -> Result<()> {
        self.fingerprints.lock().remove(&desc.oid);
        self.leave_sources(desc.oid).await;
        let (done, rx) = oneshot::channel();
        self.dataflow
            .send(Msg::Drop {
                oid: desc.oid,
                done,
            })
            .await?;
        let _ = rx.await;
        self.unobserve(&desc.dependencies);
        Ok(())
    }

    /// Start materialized views stopped by [`Engine::stop_views`] again, oldest first
    /// (views over views find their inputs), each planned from its stored query as it
    /// reads now and rebuilt from its inputs as at CREATE. A view that no longer plans
    /// stays, failed, with its error (as at a restart), told in a notice: what stopped the
    /// views has committed. Planned as at a restart (the view was checked against its
    /// owner's rights at CREATE), not with the rights of whoever altered what it reads.
    pub(crate) async fn rebuild_views(
        &self,
        oids: &[u32],
        notices: Option<&mpsc::UnboundedSender<String>>,
    ) -> Result<()> {
        let session = &self.new_session();
        let mut oids = oids.to_vec();
        oids.sort_unstable();
        for oid in oids {
            let Some(v) = self.catalog.get_by_oid(oid) else {
                continue;
            };
            if v.desc.kind != RelationKind::MaterializedView {
                continue;
            }
            let started = std::time::Instant::now();
            let result = match self
                .plan_stored(session, &v.desc, self.limits.workers)
                .await
            {
                Ok((graph, columns)) => {
                    // the columns' names and types stay; nullability may follow the inputs
                    let same = columns.len() == v.desc.columns.len()
                        && columns
                            .iter()
                            .zip(&v.desc.columns)
                            .all(|(a, b)| a.name == b.name && a.ty == b.ty);
                    if same {
                        self.catalog.alter_relation(&v.desc.name, |d| {
                            d.columns = columns.clone();
                            Ok(())
                        })?;
                        let v = self.catalog.get_by_oid(oid).unwrap_or(v.clone());
                        self.start_view(&v.desc, graph, None, None).await
                    } else {
                        Err(WeirError::internal("its columns would change"))
                    }
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(_) => {
                    info!(view = %v.desc.name, secs = started.elapsed().as_secs_f64(), "rebuilt materialized view");
                    if let Some(n) = notices {
                        let _ = n.send(format!(
                            "materialized view \"{}\" rebuilt in {:.1} s",
                            v.desc.name,
                            started.elapsed().as_secs_f64()
                        ));
                    }
                }
                Err(e) => {
                    error!(view = %v.desc.name, error = %e, "cannot rebuild materialized view");
                    let message = format!(
                        "materialized view \"{}\" could not be rebuilt: {}",
                        v.desc.name, e.message
                    );
                    if let Some(n) = notices {
                        let _ = n.send(message.clone());
                    }
                    self.dataflow.mark_failed(
                        v.desc.oid,
                        &v.desc.name,
                        &v.desc.schema(),
                        message,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// A view is gone (dropped, or it did not start): its backfill readers stop and the
    /// shared readers no view reads any more stop too.
    pub(crate) async fn leave_sources(&self, view: u32) {
        for (shared, _) in self.dataflow.sources.detach(view) {
            let _ = self.dataflow.send(Msg::Unshare { shared }).await;
        }
    }

    /// Relations some view reads forward their changes to the dataflow.
    fn observe(&self, relations: &[u32]) {
        self.dataflow.observe(relations);
        for oid in relations {
            if let Some(t) = self.catalog.get_by_oid(*oid).and_then(|e| e.table.clone()) {
                t.set_sink(Some(self.dataflow.sink()));
            }
        }
    }

    fn unobserve(&self, relations: &[u32]) {
        self.dataflow.unobserve(relations);
        for oid in relations {
            if !self.dataflow.observes(*oid)
                && let Some(t) = self.catalog.get_by_oid(*oid).and_then(|e| e.table.clone())
            {
                t.set_sink(None);
            }
        }
    }

    /// Bring every view back after a start, in creation order (views over views find
    /// their inputs), from the last checkpoint where possible (see `docs/GUARANTEES.md`):
    ///
    /// 1. each view whose checkpoint matches (fingerprint, keys, its input views restored
    ///    too, its tables' logs still held after the checkpoint) is restored, with the
    ///    writer locks of those tables held;
    /// 2. the tables' changes after the checkpoint are replayed into the dataflow, in log
    ///    order, before the locks are released (restored views take them as live changes);
    /// 3. every other view is rebuilt from its inputs as at CREATE.
    ///
    /// A view that no longer plans stays, failed, with its error. Each outcome is a row of
    /// `weir_recovery`.
    pub(crate) async fn restore_views(&self) -> Result<()> {
        use crate::dataflow::checkpoint::{Manifest, RecoveryRecord, now_us};
        let mut views: Vec<_> = self
            .catalog
            .entries()
            .into_iter()
            .filter(|e| {
                e.desc.kind == RelationKind::MaterializedView
                    || (e.desc.kind == RelationKind::Sink && e.desc.query.is_some())
            })
            .collect();
        views.sort_by_key(|e| e.desc.oid);
        // the views' indexes are built as each view starts
        for v in &views {
            if !v.desc.indexes.is_empty() {
                self.dataflow
                    .set_view_indexes(v.desc.oid, v.desc.index_specs()?)?;
            }
        }
        let session = self.new_session();
        let log = self.dataflow.checkpoints.clone();
        let store = self.catalog.store().clone();
        let mut no_checkpoint_reason = "checkpoints are off".to_owned();
        let manifest = if self.dataflow.checkpoint_interval.is_some() {
            match Manifest::read(store.as_ref()) {
                Ok(Some(m)) => Some(m),
                Ok(None) => {
                    no_checkpoint_reason = "no checkpoint yet".into();
                    None
                }
                Err(e) => {
                    error!(error = %e, "the last checkpoint cannot be read; every view is rebuilt from its inputs");
                    no_checkpoint_reason = e.message.clone();
                    None
                }
            }
        } else {
            crate::dataflow::checkpoint::clear_all(store.as_ref())?;
            None
        };
        if let Some(m) = &manifest {
            self.sink_restarts.lock().caught_up = m.sinks_caught_up.clone();
            let gone: Vec<u32> = m
                .views
                .iter()
                .map(|v| v.oid)
                .filter(|oid| !views.iter().any(|e| e.desc.oid == *oid))
                .collect();
            if !gone.is_empty() {
                crate::dataflow::checkpoint::forget_views(store.as_ref(), &gone)?;
            }
        }
        let plan = |v: &crate::catalog::Entry, shards: usize| {
            let session = &session;
            let desc = v.desc.clone();
            async move { self.plan_stored(session, &desc, shards).await }
        };
        // 1. restore
        let mut restored: HashSet<u32> = HashSet::new();
        let mut rebuild: Vec<(Arc<crate::catalog::Entry>, String)> = Vec::new();
        // the tables restored views read stay locked until their logs are replayed
        let mut held: Vec<Arc<crate::state::table::TableStore>> = Vec::new();
        if let Some(m) = &manifest {
            for i in m.views.iter().flat_map(|v| v.inputs.iter()) {
                if let Some(t) = self
                    .catalog
                    .get_by_oid(i.relation)
                    .and_then(|e| e.table.clone())
                    && !held.iter().any(|h| h.oid == t.oid)
                {
                    held.push(t);
                }
            }
        }
        let mut locks = Vec::with_capacity(held.len());
        for t in &held {
            locks.push(t.writer.lock().await);
        }
        // each source's shared reader as checkpointed (started once the views reading
        // through it are back, so each of them gets every batch after the checkpoint)
        let mut readers = Vec::new();
        if let Some(m) = &manifest {
            for sc in &m.sources {
                let Some(e) = self.catalog.get_by_oid(sc.source) else {
                    continue;
                };
                if e.desc.kind != RelationKind::Source {
                    continue;
                }
                let position = sc.position.clone().unwrap_or_default();
                let r = self.dataflow.sources.new_shared_reader(
                    sc.source,
                    &e.desc.name,
                    position.clone(),
                );
                let mut spec = runner_spec(
                    &self.catalog,
                    &e.desc,
                    &e.desc,
                    r.relation,
                    Share::Reader(r.clone()),
                )?;
                let mut journal = Vec::new();
                if matches!(spec.kind, SourceKind::Kafka(_)) {
                    let (j, entries) = crate::dataflow::journal::Journal::resume(
                        store.clone(),
                        0,
                        sc.source,
                        sc.position.as_ref(),
                        sc.watermark,
                    )?;
                    spec.journal = Some(j);
                    journal = entries;
                }
                spec.resume = Some(Resume {
                    position: position.clone(),
                    watermark: sc.watermark,
                    journal,
                });
                self.dataflow
                    .send(Msg::Share {
                        shared: r.relation,
                        source: sc.source,
                        position,
                        watermark: sc.watermark,
                    })
                    .await?;
                readers.push((r, spec));
            }
        }
        // per table: (checkpointed sequence, its log after it)
        let mut replays: std::collections::HashMap<
            u32,
            (u64, Vec<(u64, crate::dataflow::changelog::Changelog)>),
        > = Default::default();
        for v in views {
            let started = std::time::Instant::now();
            let started_at_us = now_us();
            let Some(m) = &manifest else {
                rebuild.push((v, no_checkpoint_reason.clone()));
                continue;
            };
            let Some(vc) = m.view(v.desc.oid) else {
                rebuild.push((v, "not in the last checkpoint".into()));
                continue;
            };
            let mut reason = None;
            for i in &vc.inputs {
                let Some(e) = self.catalog.get_by_oid(i.relation) else {
                    reason = Some(format!("input relation {} no longer exists", i.relation));
                    break;
                };
                if matches!(
                    e.desc.kind,
                    RelationKind::MaterializedView | RelationKind::Sink
                ) && !restored.contains(&i.relation)
                {
                    reason = Some(format!("its input view \"{}\" was rebuilt", e.desc.name));
                    break;
                }
                if let Some(t) = &e.table {
                    let Some(seq) = i.position.as_ref().and_then(|p| p.first()) else {
                        reason = Some(format!(
                            "no position recorded for table \"{}\"",
                            e.desc.name
                        ));
                        break;
                    };
                    let seq = seq as u64;
                    match replays.get(&t.oid) {
                        Some((from, _)) if *from == seq => {}
                        Some((from, _)) => {
                            reason = Some(format!(
                                "table \"{}\" is at sequence {seq} in its checkpoint, other views at {from}",
                                e.desc.name
                            ));
                            break;
                        }
                        None => match t.log_after(seq)? {
                            Some(entries) => {
                                replays.insert(t.oid, (seq, entries));
                            }
                            None => {
                                reason = Some(format!(
                                    "the change log of table \"{}\" after sequence {seq} is no longer kept",
                                    e.desc.name
                                ));
                                break;
                            }
                        },
                    }
                }
            }
            if let Some(r) = reason {
                rebuild.push((v, r));
                continue;
            }
            // a view comes back with the shards its state was checkpointed in
            if vc.shards != self.limits.workers {
                info!(view = %v.desc.name, shards = vc.shards, workers = self.limits.workers, "the view keeps the shard count of its checkpoint; it takes --workers when rebuilt");
            }
            let result = match plan(&v, vc.shards).await {
                Ok((graph, _)) => {
                    self.start_view(&v.desc, graph, None, Some((m.epoch, vc)))
                        .await
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(bytes) => {
                    restored.insert(v.desc.oid);
                    info!(view = %v.desc.name, epoch = m.epoch, bytes, secs = started.elapsed().as_secs_f64(), "restored materialized view from its checkpoint");
                    log.record_recovery(RecoveryRecord {
                        bytes_read: bytes,
                        outcome: "restored",
                        from_epoch: Some(m.epoch),
                        ..RecoveryRecord::since(&v.desc.name, started, started_at_us)
                    });
                }
                Err(e) => rebuild.push((v, e.message)),
            }
        }
        // the restored shared readers go on (unless no restored view reads through them:
        // then views rebuilt below backfill up to them, or nothing needs them)
        for (r, spec) in readers {
            if self
                .dataflow
                .sources
                .shared_reader(r.source_oid)
                .is_some_and(|now| Arc::ptr_eq(&now, &r))
            {
                self.dataflow.sources.start(self.dataflow.sender(), spec);
            }
        }
        // 2. the tables' changes after the checkpoint, in log order
        for (oid, (_, entries)) in replays {
            let Some(t) = self.catalog.get_by_oid(oid).and_then(|e| e.table.clone()) else {
                continue;
            };
            let spec = t
                .watermark_spec()
                .map(crate::dataflow::watermark::WatermarkSpec::new);
            let mut wm = manifest.as_ref().and_then(|m| {
                m.views
                    .iter()
                    .flat_map(|v| v.inputs.iter())
                    .filter(|i| i.relation == oid)
                    .filter_map(|i| i.watermark)
                    .max()
            });
            for (seq, changelog) in entries {
                let before = wm;
                if let Some(spec) = spec {
                    wm = spec.after_batch(wm, &changelog.data);
                }
                self.dataflow
                    .send(Msg::Changes {
                        relation: oid,
                        changelog,
                        watermark_before: before,
                        watermark_after: wm,
                        position: Some(Position::single(seq as i64)),
                        arrived: std::time::Instant::now(),
                    })
                    .await?;
            }
        }
        drop(locks);
        // 3. rebuild the rest
        for (v, why) in rebuild {
            let started = std::time::Instant::now();
            let started_at_us = now_us();
            if manifest.is_some() || why != "checkpoints are off" {
                info!(view = %v.desc.name, reason = %why, "rebuilding materialized view from its inputs");
            }
            let result = match plan(&v, self.limits.workers).await {
                Ok((graph, columns)) => match self.adopt_column_types(&v, columns) {
                    Ok(v) => self.start_view(&v.desc, graph, None, None).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            match result {
                Ok(_) => {
                    info!(view = %v.desc.name, secs = started.elapsed().as_secs_f64(), "rebuilt materialized view");
                    log.record_recovery(RecoveryRecord {
                        reason: Some(why),
                        ..RecoveryRecord::since(&v.desc.name, started, started_at_us)
                    });
                }
                Err(e) => {
                    error!(view = %v.desc.name, error = %e, "cannot restore materialized view");
                    log.record_recovery(RecoveryRecord {
                        outcome: "failed",
                        reason: Some(e.message.clone()),
                        ..RecoveryRecord::since(&v.desc.name, started, started_at_us)
                    });
                    self.dataflow.mark_failed(
                        v.desc.oid,
                        &v.desc.name,
                        &v.desc.schema(),
                        format!(
                            "materialized view \"{}\" could not be rebuilt: {}",
                            v.desc.name, e.message
                        ),
                    )?;
                }
            }
        }
        for (shared, source) in self.dataflow.sources.unused_readers() {
            info!(
                source,
                "no view reads the source any more: its reader stops"
            );
            self.dataflow.send(Msg::Unshare { shared }).await?;
        }
        // the replayed changes are in the views before sinks start
        self.dataflow.flush().await?;
        self.dataflow.recovered();
        Ok(())
    }

    /// Drop relations of one kind, with their dependent views when CASCADE.
    pub(crate) async fn drop_relations(
        &self,
        names: &[String],
        kind: DropKind,
        if_exists: bool,
        cascade: bool,
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
        in_block: bool,
    ) -> Result<Output> {
        let noun = match kind {
            DropKind::Table => "table",
            DropKind::Source => "source",
            DropKind::MaterializedView => "materialized view",
            DropKind::Sink => "sink",
            DropKind::View => "view",
            DropKind::Sequence => "sequence",
            DropKind::Index => "index",
            DropKind::Type => "type",
        };
        let matches = |k: RelationKind| match kind {
            DropKind::Table => k.is_table(),
            DropKind::Source => k == RelationKind::Source,
            DropKind::MaterializedView => k == RelationKind::MaterializedView,
            DropKind::Sink => k == RelationKind::Sink,
            DropKind::View => k == RelationKind::View,
            DropKind::Sequence => k == RelationKind::Sequence,
            DropKind::Index | DropKind::Type => false,
        };
        let mut targets = Vec::new();
        for name in names {
            match self.catalog.get(name) {
                None if if_exists => {
                    let name = crate::sql::search_path::written(name);
                    if let Some(n) = notices {
                        let _ = n.send(format!("{noun} \"{name}\" does not exist, skipping"));
                    }
                    continue;
                }
                None => {
                    let name = crate::sql::search_path::written(name);
                    return Err(WeirError::new(
                        sqlstate::UNDEFINED_TABLE,
                        format!("{noun} \"{name}\" does not exist"),
                    ));
                }
                Some(e) if !matches(e.desc.kind) => {
                    let right = match e.desc.kind {
                        RelationKind::Table | RelationKind::AppendOnlyTable => "DROP TABLE",
                        RelationKind::Source => "DROP SOURCE",
                        RelationKind::MaterializedView => "DROP MATERIALIZED VIEW",
                        RelationKind::Sink => "DROP SINK",
                        RelationKind::View => "DROP VIEW",
                        RelationKind::Sequence => "DROP SEQUENCE",
                    };
                    return Err(WeirError::new(
                        sqlstate::WRONG_OBJECT_TYPE,
                        format!("\"{name}\" is not a {noun}"),
                    )
                    .with_hint(format!("Use {right} to remove a {}.", e.desc.kind.noun())));
                }
                Some(e) => targets.push(e),
            }
        }
        // everything that depends on the targets, transitively
        let mut order: Vec<u32> = Vec::new();
        let mut stack: Vec<u32> = targets.iter().map(|e| e.desc.oid).collect();
        let target_oids: HashSet<u32> = stack.iter().copied().collect();
        while let Some(oid) = stack.pop() {
            if order.contains(&oid) {
                continue;
            }
            order.push(oid);
            let dependents = self.catalog.dependents(oid);
            if !cascade
                && dependents
                    .iter()
                    .any(|d| !target_oids.contains(&d.desc.oid))
            {
                let (name, noun) = self
                    .catalog
                    .get_by_oid(oid)
                    .map(|e| (e.desc.name.clone(), e.desc.kind.noun()))
                    .unwrap_or_else(|| (String::new(), "relation"));
                // names as Postgres' object descriptions give them: quoted only where
                // they need it
                let name = crate::catalog::schemas::quote_relation(&name);
                // every dependent that stays, as Postgres lists them: in the order they
                // were made (a foreign key by its table's)
                let mut lines: Vec<(u32, String)> = dependents
                    .iter()
                    .filter(|d| !target_oids.contains(&d.desc.oid))
                    .map(|d| {
                        (
                            d.desc.oid,
                            format!("{} depends on {noun} {name}", described(&d.desc)),
                        )
                    })
                    .collect();
                if noun == "table" {
                    let table = self
                        .catalog
                        .get_by_oid(oid)
                        .map(|e| e.desc.name.clone())
                        .unwrap_or_default();
                    lines.extend(
                        self.foreign_keys_to(&table)
                            .into_iter()
                            .filter(|(child, _)| !target_oids.contains(&child.oid))
                            .map(|(child, fk)| {
                                (
                                    child.oid,
                                    format!(
                                        "constraint {} on table {} depends on table {name}",
                                        fk.name, child.name
                                    ),
                                )
                            }),
                    );
                }
                lines.sort_by_key(|(o, _)| *o);
                let detail: Vec<String> = lines.into_iter().map(|(_, l)| l).collect();
                return Err(WeirError::new(
                    sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                    format!("cannot drop {noun} {name} because other objects depend on it"),
                )
                .with_detail(detail.join("\n"))
                .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
            }
            for d in dependents {
                stack.push(d.desc.oid);
            }
        }
        // foreign keys of tables that stay, referencing a table that goes: refused, or
        // (CASCADE) the constraints go, as in Postgres (the tables stay)
        let mut dropped_keys: Vec<(String, String)> = Vec::new();
        for oid in &order {
            let Some(e) = self.catalog.get_by_oid(*oid) else {
                continue;
            };
            if !e.desc.kind.is_table() {
                continue;
            }
            let keys: Vec<(String, String)> = self
                .foreign_keys_to(&e.desc.name)
                .into_iter()
                .filter(|(child, _)| !order.contains(&child.oid))
                .map(|(child, fk)| (child.name, fk.name))
                .collect();
            if !cascade && !keys.is_empty() {
                return Err(WeirError::new(
                    sqlstate::DEPENDENT_OBJECTS_STILL_EXIST,
                    format!(
                        "cannot drop table {} because other objects depend on it",
                        e.desc.name
                    ),
                )
                .with_detail(
                    keys.iter()
                        .map(|(child, fk)| {
                            format!(
                                "constraint {fk} on table {child} depends on table {}",
                                e.desc.name
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n"),
                )
                .with_hint("Use DROP ... CASCADE to drop the dependent objects too."));
            }
            dropped_keys.extend(keys);
        }
        // what CASCADE takes beside the named relations, in one NOTICE as Postgres says it
        // (in the order the objects were made; a foreign key by its table's)
        if let Some(p) = notices {
            let mut cascaded: Vec<(u32, String)> = order
                .iter()
                .filter(|o| !target_oids.contains(o))
                .filter_map(|o| self.catalog.get_by_oid(*o))
                .map(|e| {
                    (
                        e.desc.oid,
                        format!("drop cascades to {}", described(&e.desc)),
                    )
                })
                .collect();
            for (child, fk) in &dropped_keys {
                let oid = self.catalog.get(child).map_or(u32::MAX, |e| e.desc.oid);
                cascaded.push((
                    oid,
                    format!("drop cascades to constraint {fk} on table {child}"),
                ));
            }
            cascaded.sort_by_key(|(o, _)| *o);
            let lines: Vec<String> = cascaded.into_iter().map(|(_, l)| l).collect();
            crate::engine::cascade_notice(Some(p), lines);
        }
        for (child, fk) in &dropped_keys {
            self.catalog.alter_relation(child, |d| {
                d.foreign_keys.retain(|f| &f.name != fk);
                Ok(())
            })?;
            info!(table = %child, constraint = %fk, "dropped foreign key (DROP ... CASCADE)");
        }
        // dependents before what they read: newest first
        order.sort_unstable_by(|a, b| b.cmp(a));
        for oid in order {
            let Some(entry) = self.catalog.get_by_oid(oid) else {
                continue;
            };
            if entry.desc.kind == RelationKind::Sink {
                self.dataflow.sinks.stop(oid);
                if entry.desc.query.is_some() {
                    self.stop_dataflow(&entry.desc).await?;
                }
                self.catalog.drop_relation(&entry.desc.name)?;
                info!(sink = %entry.desc.name, "dropped sink");
            } else if entry.desc.kind == RelationKind::MaterializedView {
                self.stop_dataflow(&entry.desc).await?;
                self.catalog.drop_relation(&entry.desc.name)?;
                info!(view = %entry.desc.name, "dropped materialized view");
            } else if in_block
                && matches!(
                    entry.desc.kind,
                    RelationKind::Table | RelationKind::AppendOnlyTable | RelationKind::Sequence
                )
                && !entry.desc.options.iter().any(|(k, _)| k == "connector")
            {
                // in a transaction block: kept until the block ends, so a ROLLBACK brings
                // it back (`engine/schema_undo.rs`); its serial columns' sequences likewise
                let _writer = match &entry.table {
                    Some(t) => Some(t.writer.lock().await),
                    None => None,
                };
                self.catalog.detach_relation(&entry.desc.name);
                for (k, seq) in &entry.desc.options {
                    if k == "weir.owned_sequence"
                        && self
                            .catalog
                            .get(seq)
                            .is_some_and(|s| s.desc.kind == RelationKind::Sequence)
                    {
                        self.catalog.detach_relation(seq);
                    }
                }
                info!(relation = %entry.desc.name, kind = entry.desc.kind.noun(), "dropped (until the transaction block ends)");
            } else {
                // a connector table's consumer stops before the table goes
                self.dataflow.sources.stop_view(oid);
                let _writer = match &entry.table {
                    Some(t) => Some(t.writer.lock().await),
                    None => None,
                };
                self.catalog.drop_relation(&entry.desc.name)?;
                if entry.desc.kind == RelationKind::Sequence {
                    self.catalog.drop_sequence_state(entry.desc.oid)?;
                }
                // the sequences of its serial and identity columns go with the table
                for (k, seq) in &entry.desc.options {
                    if k == "weir.owned_sequence"
                        && let Some(s) = self.catalog.get(seq)
                        && s.desc.kind == RelationKind::Sequence
                    {
                        self.catalog.drop_relation(seq)?;
                        self.catalog.drop_sequence_state(s.desc.oid)?;
                    }
                }
                if entry.desc.kind == RelationKind::Source
                    || entry.desc.options.iter().any(|(k, _)| k == "connector")
                {
                    self.dataflow.sources.dead_letters.forget(&entry.desc.name);
                }
                info!(relation = %entry.desc.name, kind = entry.desc.kind.noun(), "dropped");
            }
        }
        Ok(Output::Command(format!("DROP {}", noun.to_uppercase())))
    }

    /// `EXPLAIN ANALYZE MATERIALIZED VIEW name`: the graph as EXPLAIN prints it, each node
    /// with the change rows in and out and the time spent since the view started, its
    /// state and its watermark.
    pub(crate) fn explain_analyze_view(&self, name: &str) -> Result<Output> {
        let entry = self
            .catalog
            .get(name)
            .filter(|e| e.desc.kind == RelationKind::MaterializedView)
            .ok_or_else(|| {
                WeirError::new(
                    sqlstate::UNDEFINED_TABLE,
                    format!("materialized view \"{name}\" does not exist"),
                )
            })?;
        let stats = self
            .dataflow
            .stats()
            .into_iter()
            .find(|s| s.oid == entry.desc.oid)
            .ok_or_else(|| {
                WeirError::new(
                    sqlstate::OBJECT_NOT_IN_PREREQUISITE_STATE,
                    format!("materialized view \"{name}\" is not running"),
                )
            })?;
        let mut lines = Vec::new();
        if let Some(e) = &stats.failed {
            lines.push(format!("failed: {e}"));
        }
        let nodes = &stats.operators;
        // the output: the node no other node reads
        let root = stats.output().map(|n| n.node);
        fn render(
            nodes: &[crate::dataflow::stats::OperatorState],
            id: usize,
            depth: usize,
            lines: &mut Vec<String>,
        ) {
            let Some(n) = nodes.iter().find(|n| n.node == id) else {
                return;
            };
            let mut facts = vec![
                format!("rows in={} out={}", n.rows_in, n.rows_out),
                format!("time={:.3} ms", n.busy_ns as f64 / 1e6),
            ];
            if !n.source {
                facts.push(format!(
                    "state rows={} bytes={}",
                    n.rows,
                    n.bytes + n.spilled
                ));
            }
            if let Some(w) = n.watermark {
                let shown = chrono::DateTime::from_timestamp_micros(w)
                    .map(|d| d.naive_utc().format("%Y-%m-%d %H:%M:%S%.f").to_string())
                    .unwrap_or_else(|| w.to_string());
                facts.push(format!("watermark={shown}"));
            }
            lines.push(format!(
                "{}{} ({})",
                "  ".repeat(depth),
                n.label,
                facts.join(", ")
            ));
            for i in &n.inputs {
                render(nodes, *i, depth + 1, lines);
            }
        }
        if let Some(r) = root {
            render(nodes, r, 0, &mut lines);
        }
        explain_output(lines)
    }

    pub(crate) async fn explain_view(&self, session: &Session, cv: &CreateView) -> Result<Output> {
        let (graph, _) = self
            .plan_view(
                session.ctx.state(),
                &cv.name,
                &cv.query,
                &cv.options,
                cv.emit_on_window_close,
                self.limits.workers,
            )
            .await?;
        let mut lines = graph.explain();
        if graph.shards() > 1 {
            lines.push(format!(
                "Shards: {} (operators with a key split their rows by a hash of it; a global aggregate runs once)",
                graph.shards()
            ));
        }
        explain_output(lines)
    }
}

/// EXPLAIN's answer: one `QUERY PLAN` line per row.
fn explain_output(lines: Vec<String>) -> Result<Output> {
    let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new(
        "QUERY PLAN",
        DataType::Utf8,
        false,
    )]));
    let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(lines))])?;
    Ok(Output::Batches {
        schema,
        batches: vec![batch],
        tag: "EXPLAIN",
    })
}

/// `WITH (late_events = 'drop' | 'correct', allowed_lateness = '<interval>')`.
fn view_options(options: &[(String, String)], emit_on_close: bool) -> Result<WindowOptions> {
    let mut w = WindowOptions {
        emit_on_close,
        ..Default::default()
    };
    for (k, v) in options {
        match k.as_str() {
            "late_events" => {
                w.correct = match v.to_lowercase().as_str() {
                    "drop" => false,
                    "correct" => true,
                    other => {
                        return Err(WeirError::invalid_parameter(format!(
                            "late_events must be 'drop' or 'correct', not '{other}'"
                        )));
                    }
                }
            }
            "allowed_lateness" => {
                w.lateness_us = crate::sql::time::interval_micros(v)?;
                if w.lateness_us < 0 {
                    return Err(WeirError::invalid_parameter(
                        "allowed_lateness cannot be negative",
                    ));
                }
            }
            other => {
                return Err(WeirError::invalid_parameter(format!(
                    "unknown materialized view option \"{other}\" (known: late_events, allowed_lateness)"
                )));
            }
        }
    }
    Ok(w)
}

/// How a sink over a restored view comes back (see `engine/sinks.rs`).
enum SinkResume {
    /// Its topic holds the view as restored: go on from there.
    AtRestore,
    /// Its topic holds the view at this later point of its inputs (graph relation,
    /// position): an epoch must end there.
    Cut(Vec<(u32, Position)>),
    /// Neither is known: read the topic back and compare.
    ReadBack,
}

/// `inputs`: (graph relation, catalog OID); `progress`: the topic's latest progress (by
/// catalog OID); `caught_up`: the checkpoint found the sink caught up with it.
fn sink_resume(
    inputs: &[(u32, u32)],
    vc: &ViewCheckpoint,
    progress: Option<&[(u32, Position)]>,
    caught_up: bool,
) -> SinkResume {
    let fallback = if caught_up {
        SinkResume::AtRestore
    } else {
        SinkResume::ReadBack
    };
    let Some(progress) = progress else {
        return fallback;
    };
    let mut at = Vec::new();
    let mut equal = true;
    for (rel, catalog) in inputs {
        // as published: with the input's watermark
        let restored = vc
            .inputs
            .iter()
            .find(|i| i.relation == *catalog)
            .and_then(|i| i.position.clone().map(|p| p.with_watermark(i.watermark)));
        let written = progress.iter().find(|(r, _)| r == catalog).map(|(_, t)| t);
        match (restored, written) {
            (Some(c), Some(t)) if t.reached(&c) => {
                equal &= c == *t;
                at.push((*rel, t.clone()));
            }
            // an input without a position (a view), or a topic behind the checkpoint
            _ => return fallback,
        }
    }
    if equal {
        SinkResume::AtRestore
    } else {
        SinkResume::Cut(at)
    }
}

/// How to run a reader of a connector source: its shared reader, or `view`'s backfill.
fn runner_spec(
    catalog: &crate::catalog::Catalog,
    src: &RelationDesc,
    view: &RelationDesc,
    instance: u32,
    share: Share,
) -> Result<RunnerSpec> {
    let o = connectors::options(&catalog.resolve_secrets(&src.options)?);
    let connector = o.get("connector").cloned().unwrap_or_default();
    let watermark = src.watermark.as_ref().and_then(|w| {
        src.columns
            .iter()
            .position(|c| c.name == w.column)
            .map(|i| (i, w.delay_us))
    });
    let kind = if connectors::is_generator(&connector) {
        SourceKind::Generator {
            generator: connectors::generator(&connector, &o, &src.columns)?,
            rate: connectors::rate_limit(&connector, &o)?,
            bounded: connectors::bounded(&connector, &o),
        }
    } else {
        SourceKind::Kafka(Box::new(connectors::kafka::KafkaSpec::new(
            &o,
            &src.columns,
        )?))
    };
    let (view_oid, view_name) = match &share {
        Share::Reader(_) => (0, "(shared)".to_owned()),
        Share::Backfill(_) => (view.oid, view.name.clone()),
    };
    Ok(RunnerSpec {
        view_oid,
        view_name,
        source_name: src.name.clone(),
        instance,
        watermark,
        kind,
        resume: None,
        journal: None,
        share,
    })
}

/// A stored query, parsed as its statement was (the whole text: one query).
pub(crate) fn parse_query(sql: &str) -> Result<ast::Query> {
    crate::sql::parser::parse_query(sql).map(|q| *q)
}

/// A view's columns from its plan: Postgres' names (or `names`, given in the CREATE, for the
/// first ones), each once, with the SQL type its values have (`unstorable` ends the refusal
/// of a type without one).
pub(crate) fn view_columns(
    schema: &datafusion::common::DFSchema,
    names: &[String],
    unstorable: &str,
) -> Result<Vec<ColumnDesc>> {
    let mut columns = Vec::with_capacity(schema.fields().len());
    let mut seen = HashSet::new();
    for (i, f) in schema.fields().iter().enumerate() {
        let name = names
            .get(i)
            .cloned()
            .unwrap_or_else(|| display_column_name(f.name()).to_owned());
        if !seen.insert(name.clone()) {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_COLUMN,
                format!("column \"{name}\" specified more than once in the view"),
            ));
        }
        let ty = field_sql_type(f).ok_or_else(|| {
            WeirError::not_supported(format!(
                "column \"{name}\" has type {}, which {unstorable}",
                f.data_type()
            ))
        })?;
        columns.push(ColumnDesc {
            name,
            ty,
            nullable: true,
        });
    }
    Ok(columns)
}

/// A relation as Postgres' object descriptions name it: its kind, then its name quoted only
/// where it needs it (`view dv1`, `materialized view "My MV"`).
fn described(d: &crate::catalog::RelationDesc) -> String {
    format!(
        "{} {}",
        d.kind.noun(),
        crate::catalog::schemas::quote_relation(&d.name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::checkpoint::InputCheckpoint;

    fn at(n: i64) -> Position {
        Position::single(n)
    }

    fn checkpoint(n: i64, watermark: Option<i64>) -> ViewCheckpoint {
        ViewCheckpoint {
            oid: 9,
            name: "v".into(),
            fingerprint: String::new(),
            keys: 0,
            shards: 1,
            watermark: None,
            inputs: vec![InputCheckpoint {
                relation: 5,
                position: Some(at(n)),
                watermark,
                shared: false,
            }],
        }
    }

    #[test]
    fn a_sink_resumes_at_the_restore_at_a_later_cut_or_reads_back() {
        let inputs = [(0xF000_0001, 5)];
        let vc = checkpoint(10, Some(3));
        let progress = |n: i64, w: Option<i64>| vec![(5, at(n).with_watermark(w))];
        // the topic is where the checkpoint is
        assert!(matches!(
            sink_resume(&inputs, &vc, Some(&progress(10, Some(3))), false),
            SinkResume::AtRestore
        ));
        // later: a cut there, on the view's own relation; a watermark move alone too
        match sink_resume(&inputs, &vc, Some(&progress(12, Some(3))), false) {
            SinkResume::Cut(cut) => {
                assert_eq!(cut, vec![(0xF000_0001, at(12).with_watermark(Some(3)))])
            }
            _ => panic!("no cut"),
        }
        assert!(matches!(
            sink_resume(&inputs, &vc, Some(&progress(10, Some(4))), false),
            SinkResume::Cut(_)
        ));
        // behind the checkpoint: only a sink caught up with it resumes
        assert!(matches!(
            sink_resume(&inputs, &vc, Some(&progress(8, Some(3))), false),
            SinkResume::ReadBack
        ));
        assert!(matches!(
            sink_resume(&inputs, &vc, Some(&progress(8, Some(3))), true),
            SinkResume::AtRestore
        ));
        assert!(matches!(
            sink_resume(&inputs, &vc, None, false),
            SinkResume::ReadBack
        ));
        // an input the progress does not name (a view over a view)
        assert!(matches!(
            sink_resume(&inputs, &vc, Some(&[(6, at(12))]), false),
            SinkResume::ReadBack
        ));
    }
}
