//! Sinks: CREATE SINK (FROM a view, or AS its own query maintained like a view), and
//! starting their writers at CREATE and at every start.

use tracing::{info, warn};

use crate::catalog::{Entry, RelationDesc, RelationKind};
use crate::connectors::{self, kafka_sink};
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
        let o = connectors::options(&cs.with_options);
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
        options.push(("format".into(), f));
        options.push(("encode".into(), e));
        match (&cs.from, &cs.query) {
            (Some(from), _) => {
                let view = self
                    .catalog
                    .get(from)
                    .ok_or_else(|| WeirError::undefined_table(from))?;
                if view.desc.kind != RelationKind::MaterializedView {
                    return Err(WeirError::new(
                        sqlstate::WRONG_OBJECT_TYPE,
                        format!(
                            "\"{from}\" is a {}: a sink reads a materialized view",
                            view.desc.kind.noun()
                        ),
                    )
                    .with_hint(format!(
                        "CREATE SINK ... AS SELECT * FROM {from} maintains the query for the sink."
                    )));
                }
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

    /// Start a sink's writer on its view's changes. `restart`: the sink ran before this
    /// start, so it reconciles with its topic first.
    pub(crate) fn start_sink(&self, entry: &Entry, restart: bool) -> Result<()> {
        let o = connectors::options(&entry.desc.options);
        let format = o
            .get("format")
            .and_then(|f| kafka_sink::SinkFormat::parse(f))
            .ok_or_else(|| WeirError::internal("sink without format"))?;
        let (view_oid, view_name) = match entry.desc.query {
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
        };
        let names: Vec<String> = entry.desc.columns.iter().map(|c| c.name.clone()).collect();
        let (options, key) = kafka_sink::check(&o, format, &names)?;
        let sub = self.dataflow.subscribe(view_oid)?;
        self.dataflow.sinks.start(
            kafka_sink::SinkSpec {
                oid: entry.desc.oid,
                name: entry.desc.name.clone(),
                view_name,
                options,
                format,
                key,
                reconcile: restart,
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
    }
}
