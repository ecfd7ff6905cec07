//! Sinks: CREATE SINK (FROM a view, or AS its own query maintained like a view), and
//! starting their writers at CREATE and at every start.

use std::collections::HashMap;
use std::time::Duration;

use tracing::{info, warn};

use crate::catalog::{Entry, RelationDesc, RelationKind};
use crate::connectors::{self, kafka_sink};
use crate::dataflow::position::InputList;
use crate::dataflow::publication::Subscription;
use crate::dataflow::runtime::CutOutcome;
use crate::engine::{Engine, Output};
use crate::error::{Result, WeirError, sqlstate};
use crate::server::session::Session;
use crate::sql::parser::{CreateSink, CreateView};

impl Engine {
    pub(crate) async fn create_sink(
        &self,
        session: &Session,
        cs: &CreateSink,
        text: &str,
    ) -> Result<Output> {
        let o = self.connector_options(&cs.with_options)?;
        match o.get("connector").map(|c| c.to_lowercase()).as_deref() {
            Some("kafka") => {}
            Some(other) => {
                return Err(WeirError::not_supported(format!(
                    "sink connector '{other}' is not supported (kafka is)"
                )));
            }
            None => {
                return Err(WeirError::invalid_parameter(
                    "a sink needs WITH (connector = 'kafka', ...)",
                ));
            }
        }
        let (f, e) = cs
            .format
            .clone()
            .unwrap_or_else(|| ("plain".into(), "json".into()));
        let format = kafka_sink::SinkFormat::parse(&f).ok_or_else(|| {
            WeirError::not_supported(format!(
                "FORMAT {} is not a sink format (PLAIN, UPSERT or DEBEZIUM)",
                f.to_uppercase()
            ))
        })?;
        if e != "json" {
            return Err(WeirError::not_supported(format!(
                "ENCODE {} is not supported for sinks yet (ENCODE JSON is)",
                e.to_uppercase()
            )));
        }
        if let Some(existing) = self.catalog.get(&cs.name) {
            if cs.if_not_exists {
                return Ok(Output::Command("CREATE SINK".into()));
            }
            return Err(WeirError::new(
                sqlstate::DUPLICATE_TABLE,
                format!("relation \"{}\" already exists", existing.desc.name),
            ));
        }
        let mut options = cs.with_options.clone();
        for (k, v) in options.iter_mut() {
            if k == "connector" {
                *v = "kafka".into();
            }
        }
        // UPSERT / DEBEZIUM without primary_key: the query's GROUP BY columns, when the
        // query outputs them all
        let mut o = o;
        if format != kafka_sink::SinkFormat::Plain && !o.contains_key("primary_key") {
            let query = match (&cs.from, &cs.query) {
                (Some(from), _) => self
                    .catalog
                    .get(from)
                    .and_then(|v| v.desc.query.clone())
                    .and_then(|q| super::views::parse_query(&q).ok()),
                (None, Some(q)) => Some((**q).clone()),
                _ => None,
            };
            if let Some(key) = query.as_ref().and_then(group_by_key) {
                info!(sink = %cs.name, key = %key, "sink key from the query's GROUP BY");
                o.insert("primary_key".into(), key.clone());
                options.push(("primary_key".into(), key));
            }
        }
        options.push(("format".into(), f));
        options.push(("encode".into(), e));
        match (&cs.from, &cs.query) {
            (Some(from), _) => {
                let view = self.materialized_view(
                    from,
                    format!(
                        "a sink reads a materialized view; CREATE SINK ... AS SELECT * FROM {from} maintains the query for the sink."
                    ),
                )?;
                self.check_sink(&view.desc, format, &o)?;
                self.catalog.create(&cs.name, false, |oid| {
                    Ok(RelationDesc {
                        oid,
                        name: cs.name.clone(),
                        kind: RelationKind::Sink,
                        columns: view.desc.columns.clone(),
                        primary_key: vec![],
                        watermark: None,
                        definition: text.to_owned(),
                        query: None,
                        dependencies: vec![view.desc.oid],
                        options,
                        emit_on_window_close: false,
                        append_only: view.desc.append_only,
                        owner: session.role(),
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
            }
            (None, Some(q)) => {
                let cv = CreateView {
                    name: cs.name.clone(),
                    if_not_exists: false,
                    options: vec![],
                    query: q.clone(),
                    emit_on_window_close: false,
                };
                self.create_maintained(session, &cv, text, None, RelationKind::Sink, options)
                    .await?;
                let entry = self
                    .catalog
                    .get(&cs.name)
                    .ok_or_else(|| WeirError::internal("created sink vanished"))?;
                if let Err(e) = self.check_sink(&entry.desc, format, &o) {
                    self.drop_relations(
                        std::slice::from_ref(&cs.name),
                        crate::sql::parser::DropKind::Sink,
                        true,
                        false,
                        None,
                        false,
                    )
                    .await?;
                    return Err(e);
                }
            }
            (None, None) => return Err(WeirError::internal("sink without FROM or AS")),
        }
        let entry = self
            .catalog
            .get(&cs.name)
            .ok_or_else(|| WeirError::internal("created sink vanished"))?;
        self.start_sink(&entry, false)?;
        info!(sink = %cs.name, "created sink");
        Ok(Output::Command("CREATE SINK".into()))
    }

    /// The view's columns and kind fit the sink's format and options.
    fn check_sink(
        &self,
        view: &RelationDesc,
        format: kafka_sink::SinkFormat,
        o: &connectors::Options,
    ) -> Result<()> {
        let names: Vec<String> = view.columns.iter().map(|c| c.name.clone()).collect();
        kafka_sink::check(o, format, &names)?;
        if format == kafka_sink::SinkFormat::Plain && !view.append_only {
            return Err(WeirError::new(
                sqlstate::FEATURE_NOT_SUPPORTED,
                format!(
                    "FORMAT PLAIN needs an append-only query, and the rows of \"{}\" can be updated or deleted",
                    view.name
                ),
            )
            .with_hint(
                "Use FORMAT UPSERT or FORMAT DEBEZIUM with WITH (primary_key = '...'), or EMIT ON WINDOW CLOSE.",
            ));
        }
        Ok(())
    }

    /// Before the views are restored (checkpoints on): the progress each sink's topic
    /// records, read from the end of its partitions (all sinks at once, at most 10 s), so
    /// that a view restored at or before it stops an epoch exactly there and the sink goes
    /// on from it without reading its topic back (`runtime::EpochCut`).
    pub(crate) fn read_sink_progress(&self) {
        if self.dataflow.checkpoint_interval.is_none() {
            return;
        }
        let sinks: Vec<(u32, u32, connectors::kafka::KafkaOptions)> = self
            .catalog
            .entries()
            .into_iter()
            .filter(|e| e.desc.kind == RelationKind::Sink)
            .filter_map(|e| {
                let (view, _) = self.sink_view(&e).ok()?;
                let (options, _, _) = self.sink_options(&e).ok()?;
                Some((e.desc.oid, view, options))
            })
            .collect();
        let found: Vec<(u32, u32, Option<InputList>)> = std::thread::scope(|s| {
            let handles: Vec<_> = sinks
                .iter()
                .map(|(sink, view, o)| {
                    s.spawn(move || {
                        let p = kafka_sink::read_progress(o, *sink, Duration::from_secs(10));
                        (*sink, *view, p)
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        let mut r = self.sink_restarts.lock();
        for (sink, view, p) in found {
            r.progress.entry(view).or_default().push((sink, p));
        }
    }

    /// The view a sink reads: (OID, name).
    fn sink_view(&self, entry: &Entry) -> Result<(u32, String)> {
        Ok(match entry.desc.query {
            Some(_) => (entry.desc.oid, entry.desc.name.clone()),
            None => {
                let dep = entry
                    .desc
                    .dependencies
                    .first()
                    .and_then(|d| self.catalog.get_by_oid(*d))
                    .ok_or_else(|| WeirError::internal("sink's view is gone"))?;
                (dep.desc.oid, dep.desc.name.clone())
            }
        })
    }

    /// A sink's connector options, key columns and format.
    fn sink_options(
        &self,
        entry: &Entry,
    ) -> Result<(
        connectors::kafka::KafkaOptions,
        Vec<usize>,
        kafka_sink::SinkFormat,
    )> {
        let o = self.connector_options(&entry.desc.options)?;
        let format = o
            .get("format")
            .and_then(|f| kafka_sink::SinkFormat::parse(f))
            .ok_or_else(|| WeirError::internal("sink without format"))?;
        let names: Vec<String> = entry.desc.columns.iter().map(|c| c.name.clone()).collect();
        let (options, key) = kafka_sink::check(&o, format, &names)?;
        Ok((options, key, format))
    }

    /// Start a sink's writer on its view's changes. `restart`: the sink ran before this
    /// start, so it reconciles with its topic first.
    pub(crate) fn start_sink(&self, entry: &Entry, restart: bool) -> Result<()> {
        let (view_oid, view_name) = self.sink_view(entry)?;
        let (options, key, format) = self.sink_options(entry)?;
        // a sink whose view was restored at or before its progress resumes from the
        // subscription taken at the restored state
        let (sub, resume_at) = match self.sink_restarts.lock().ready.remove(&entry.desc.oid) {
            Some((sub, cut)) if restart => (sub, Some(cut)),
            _ => (self.dataflow.subscribe(view_oid)?, None),
        };
        self.dataflow.sinks.start(
            kafka_sink::SinkSpec {
                oid: entry.desc.oid,
                name: entry.desc.name.clone(),
                view_name,
                options,
                format,
                key,
                reconcile: restart,
                view_positions: {
                    let dataflow = self.dataflow.clone();
                    std::sync::Arc::new(move || dataflow.view_positions(view_oid))
                },
                resume_at,
                caught_up: self.dataflow.sinks_caught_up.clone(),
                published_epoch: {
                    let dataflow = self.dataflow.clone();
                    std::sync::Arc::new(move || dataflow.epoch())
                },
            },
            sub,
        );
        Ok(())
    }

    /// At start: every sink resumes (after the views are rebuilt).
    pub(crate) fn restore_sinks(&self) {
        let mut sinks: Vec<_> = self
            .catalog
            .entries()
            .into_iter()
            .filter(|e| e.desc.kind == RelationKind::Sink)
            .collect();
        sinks.sort_by_key(|e| e.desc.oid);
        for s in sinks {
            if let Err(e) = self.start_sink(&s, true) {
                warn!(sink = %s.desc.name, error = %e, "cannot start sink");
            }
        }
        // subscriptions no sink took would hold changes forever
        *self.sink_restarts.lock() = SinkRestarts::default();
    }
}

/// The output names of a query's GROUP BY expressions, when every one is an output column
/// (`SELECT k, count(*) ... GROUP BY k` keys by `k`), comma-separated.
fn group_by_key(q: &datafusion::sql::sqlparser::ast::Query) -> Option<String> {
    use datafusion::sql::sqlparser::ast::{Expr, GroupByExpr, SelectItem, SetExpr, Value};
    let SetExpr::Select(sel) = q.body.as_ref() else {
        return None;
    };
    let GroupByExpr::Expressions(exprs, _) = &sel.group_by else {
        return None;
    };
    if exprs.is_empty() {
        return None;
    }
    // identifiers compare by their last part (`t.k` is `k`), other expressions by text
    let canon = |e: &Expr| match e {
        Expr::Identifier(i) => i.value.to_lowercase(),
        Expr::CompoundIdentifier(ids) => ids
            .last()
            .map(|i| i.value.to_lowercase())
            .unwrap_or_default(),
        other => other.to_string(),
    };
    let items: Vec<Option<(String, String)>> = sel
        .projection
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(e @ (Expr::Identifier(_) | Expr::CompoundIdentifier(_))) => {
                Some((canon(e), canon(e)))
            }
            SelectItem::ExprWithAlias { expr, alias } => {
                Some((canon(expr), alias.value.to_lowercase()))
            }
            _ => None,
        })
        .collect();
    let mut key = Vec::new();
    for g in exprs {
        let name = match g {
            // GROUP BY 1: the first output column
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => {
                    let i: usize = n.parse().ok()?;
                    items.get(i.checked_sub(1)?)?.as_ref()?.1.clone()
                }
                _ => return None,
            },
            e => {
                let c = canon(e);
                items
                    .iter()
                    .flatten()
                    .find(|(expr, _)| *expr == c)?
                    .1
                    .clone()
            }
        };
        if !key.contains(&name) {
            key.push(name);
        }
    }
    Some(key.join(", "))
}

/// Sinks resuming at start.
#[derive(Default)]
pub(crate) struct SinkRestarts {
    /// Read before the views are restored: each sink's committed progress (input catalog
    /// OID, position), by the OID of the view it reads.
    pub(crate) progress: HashMap<u32, Vec<(u32, Option<InputList>)>>,
    /// Sinks the last checkpoint found caught up with it (`Manifest::sinks_caught_up`).
    pub(crate) caught_up: Vec<u32>,
    /// Taken as each view is restored: a subscription at the restored state and the epoch
    /// cut at the sink's progress, by sink OID.
    pub(crate) ready: HashMap<u32, (Subscription, CutOutcome)>,
}
