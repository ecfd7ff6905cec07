//! Statements for clients rather than data: savepoints, SUBSCRIBE, cursors and COPY.

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::sql::sqlparser::ast;
use futures::StreamExt;

use super::{Engine, Output};
use crate::catalog::RelationKind;
use crate::error::{Result, WeirError, sqlstate};
use crate::server::copy::CopyIn;
use crate::server::session::{Cursor, CursorRows, Session};
use crate::serving::subscribe::{SubscribeStream, output_schema};
use crate::sql::client_stmts::{Copy, CopySource, CursorQuery, Declare, Fetch, Subscribe};
use crate::state::table::{Change, TableKind};

const NO_TRANSACTION: &str = "25P01";
const UNDEFINED_CURSOR: &str = "34000";
const DUPLICATE_CURSOR: &str = "42P03";
const NO_SAVEPOINT: &str = "3B001";

/// What a COPY TO reads: a finite result or a subscription.
pub enum CopyRows {
    Stream(datafusion::execution::SendableRecordBatchStream),
    Subscribe(SubscribeStream),
}

impl Engine {
    pub(super) fn savepoint(&self, session: &mut Session, name: &str) -> Result<Output> {
        if !session.in_transaction {
            return Err(WeirError::new(
                NO_TRANSACTION,
                "SAVEPOINT can only be used in transaction blocks",
            ));
        }
        session.savepoints.push((
            name.to_owned(),
            session.undo.len(),
            session.tx_settings.len(),
        ));
        Ok(Output::Command("SAVEPOINT".into()))
    }

    fn find_savepoint(session: &Session, name: &str, what: &str) -> Result<usize> {
        if !session.in_transaction {
            return Err(WeirError::new(
                NO_TRANSACTION,
                format!("{what} can only be used in transaction blocks"),
            ));
        }
        session
            .savepoints
            .iter()
            .rposition(|(n, _, _)| n == name)
            .ok_or_else(|| {
                WeirError::new(NO_SAVEPOINT, format!("savepoint \"{name}\" does not exist"))
            })
    }

    /// `RELEASE name`: forget it and every later savepoint; the changes stay.
    pub(super) fn release(&self, session: &mut Session, name: &str) -> Result<Output> {
        let at = Self::find_savepoint(session, name, "RELEASE SAVEPOINT")?;
        session.savepoints.truncate(at);
        Ok(Output::Command("RELEASE".into()))
    }

    /// `ROLLBACK TO name`: undo what was done since (the settings SET since too), keep the
    /// savepoint, and leave the aborted state.
    pub(super) async fn rollback_to(
        &self,
        session: &mut Session,
        name: &str,
        notices: Option<&tokio::sync::mpsc::UnboundedSender<String>>,
    ) -> Result<Output> {
        let at = Self::find_savepoint(session, name, "ROLLBACK TO SAVEPOINT")?;
        let (_, keep, settings) = session.savepoints[at];
        session.savepoints.truncate(at + 1);
        let kept = self.rollback_until(session, keep).await?;
        super::kept_changes_warning(&kept, notices);
        session.rollback_settings_to(settings);
        session.aborted = false;
        Ok(Output::Command("ROLLBACK".into()))
    }

    /// The materialized view a SUBSCRIBE names.
    fn subscribed_view(&self, view: &str) -> Result<(u32, SchemaRef)> {
        let entry = self.materialized_view(
            view,
            format!("SUBSCRIBE reads materialized views: CREATE MATERIALIZED VIEW v AS SELECT * FROM {view}; SUBSCRIBE TO v"),
        )?;
        Ok((entry.desc.oid, entry.desc.schema()))
    }

    /// The columns a SUBSCRIBE returns (for Describe).
    pub(super) fn subscribe_schema(&self, s: &Subscribe) -> Result<SchemaRef> {
        let (_, schema) = self.subscribed_view(&s.view)?;
        Ok(output_schema(&schema))
    }

    pub(super) fn subscribe(&self, s: &Subscribe) -> Result<SubscribeStream> {
        let (oid, _) = self.subscribed_view(&s.view)?;
        let (sub, backlog) = self
            .dataflow
            .subscribe_bounded(oid, crate::serving::subscribe::max_backlog_rows())?;
        SubscribeStream::new(sub, Some(backlog), s.snapshot)
    }

    pub(super) async fn declare(
        &self,
        session: &mut Session,
        d: &Declare,
        params: Option<datafusion::common::ParamValues>,
    ) -> Result<Output> {
        if !session.in_transaction && !d.hold {
            return Err(WeirError::new(
                NO_TRANSACTION,
                "DECLARE CURSOR can only be used in transaction blocks",
            ));
        }
        if session.cursors.contains_key(&d.name) {
            return Err(WeirError::new(
                DUPLICATE_CURSOR,
                format!("cursor \"{}\" already exists", d.name),
            ));
        }
        let (schema, rows) = match &d.query {
            CursorQuery::Subscribe(s) => {
                let stream = self.subscribe(s)?;
                (stream.schema(), CursorRows::Subscribe(stream))
            }
            CursorQuery::Query(q) => match self.run_query(session, q, params).await? {
                Output::Rows { schema, stream } => (schema, CursorRows::Query(stream)),
                _ => return Err(WeirError::internal("cursor query gave no rows")),
            },
        };
        session.cursors.insert(
            d.name.clone(),
            Cursor {
                schema,
                rows: parking_lot::Mutex::new(rows),
                leftover: None,
                hold: d.hold,
            },
        );
        Ok(Output::Command("DECLARE CURSOR".into()))
    }

    pub(super) fn cursor_schema(&self, session: &Session, name: &str) -> Result<SchemaRef> {
        session
            .cursors
            .get(name)
            .map(|c| c.schema.clone())
            .ok_or_else(|| undefined_cursor(name))
    }

    /// `FETCH n c`: up to n rows. A subscription cursor waits for its first row (up to the
    /// timeout, if one was given), then returns what is ready without waiting again.
    pub(super) async fn fetch(&self, session: &mut Session, f: &Fetch) -> Result<Output> {
        let cursor = session
            .cursors
            .get_mut(&f.cursor)
            .ok_or_else(|| undefined_cursor(&f.cursor))?;
        let want = f.count.map(|n| n as usize).unwrap_or(usize::MAX);
        let mut out: Vec<RecordBatch> = Vec::new();
        let mut have = 0usize;
        while have < want {
            let next = match cursor.leftover.take() {
                Some(b) => Some(b),
                None => match cursor.rows.get_mut() {
                    CursorRows::Query(stream) => match stream.next().await {
                        Some(b) => Some(b?),
                        None => None,
                    },
                    CursorRows::Subscribe(sub) => {
                        if have > 0 {
                            match sub.try_next() {
                                Some(b) => Some(b?),
                                None => None,
                            }
                        } else {
                            let waited = match f.timeout {
                                Some(t) => tokio::time::timeout(t, sub.next()).await.ok(),
                                None => Some(sub.next().await),
                            };
                            match waited {
                                Some(Some(b)) => Some(b?),
                                _ => None,
                            }
                        }
                    }
                },
            };
            let Some(batch) = next else { break };
            let take = (want - have).min(batch.num_rows());
            if take < batch.num_rows() {
                cursor.leftover = Some(batch.slice(take, batch.num_rows() - take));
            }
            have += take;
            out.push(batch.slice(0, take));
        }
        let schema = cursor.schema.clone();
        let batch = concat_batches(&schema, &out)?;
        Ok(Output::Batches {
            schema,
            batches: vec![batch],
            tag: "FETCH",
        })
    }

    pub(super) fn close(&self, session: &mut Session, name: Option<&str>) -> Result<Output> {
        match name {
            None => session.cursors.clear(),
            Some(n) => {
                session
                    .cursors
                    .remove(n)
                    .ok_or_else(|| undefined_cursor(n))?;
            }
        }
        Ok(Output::Command("CLOSE CURSOR".into()))
    }

    pub(super) async fn copy(&self, session: &mut Session, c: &Copy) -> Result<Output> {
        match c {
            Copy::From {
                table,
                columns,
                options,
            } => {
                let entry = self
                    .catalog
                    .get(table)
                    .ok_or_else(|| WeirError::undefined_table(table))?;
                let store = entry.table.clone().ok_or_else(|| {
                    WeirError::new(
                        sqlstate::WRONG_OBJECT_TYPE,
                        format!("cannot copy to {} \"{table}\"", entry.desc.kind.noun()),
                    )
                })?;
                super::refuse_connector_table(&entry.desc, "COPY into")?;
                let targets = target_columns(&entry.desc, columns)?;
                let mut copy = CopyIn::new(
                    store,
                    table.clone(),
                    entry.desc.columns.clone(),
                    entry.desc.schema(),
                    targets,
                    options.clone(),
                    session.undo.len(),
                )?;
                copy.zone = session.time_zone();
                copy.defaulted = entry
                    .desc
                    .defaults
                    .iter()
                    .filter_map(|(c, _)| entry.desc.columns.iter().position(|x| &x.name == c))
                    .filter(|i| !copy.targets.contains(i))
                    .collect();
                // (NULL until the defaults are filled in)
                let fields: Vec<datafusion::arrow::datatypes::Field> = copy
                    .schema
                    .fields()
                    .iter()
                    .enumerate()
                    .map(|(i, f)| {
                        let f = f.as_ref().clone();
                        if copy.defaulted.contains(&i) {
                            f.with_nullable(true)
                        } else {
                            f
                        }
                    })
                    .collect();
                copy.schema =
                    std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(fields));
                let columns = copy.targets.len();
                session.copy_in = Some(copy);
                Ok(Output::CopyIn { columns })
            }
            Copy::To {
                source,
                columns,
                options,
            } => {
                let (schema, rows) = match source {
                    CopySource::Subscribe(s) => {
                        let stream = self.subscribe(s)?;
                        (stream.schema(), CopyRows::Subscribe(stream))
                    }
                    CopySource::Query(q) => match self.run_query(session, q, None).await? {
                        Output::Rows { schema, stream } => (schema, CopyRows::Stream(stream)),
                        _ => return Err(WeirError::internal("COPY query gave no rows")),
                    },
                    CopySource::Table(t) => {
                        let entry = self
                            .catalog
                            .get(t)
                            .ok_or_else(|| WeirError::undefined_table(t))?;
                        if entry.desc.kind == RelationKind::Source {
                            return Err(WeirError::not_supported(format!(
                                "COPY from source \"{t}\": a source is read by materialized views"
                            )));
                        }
                        // FORCE_QUOTE names columns of the table (then of the COPY, below)
                        if let Some(crate::sql::client_stmts::ForceColumns::Columns(cols)) =
                            &options.force_quote
                            && let Some(c) = cols
                                .iter()
                                .find(|c| !entry.desc.columns.iter().any(|d| &d.name == *c))
                        {
                            return Err(WeirError::new(
                                sqlstate::UNDEFINED_COLUMN,
                                format!("column \"{c}\" of relation \"{t}\" does not exist"),
                            ));
                        }
                        let cols = if columns.is_empty() && entry.desc.generated.is_empty() {
                            "*".to_owned()
                        } else {
                            target_columns(&entry.desc, columns)?
                                .into_iter()
                                .map(|i| {
                                    let c = &entry.desc.columns[i].name;
                                    format!("\"{}\"", c.replace('"', "\"\""))
                                })
                                .collect::<Vec<_>>()
                                .join(", ")
                        };
                        let sql = format!(
                            "SELECT {cols} FROM {}",
                            crate::catalog::schemas::quote_relation(t)
                        );
                        let parsed = crate::sql::parser::parse(&sql)?;
                        let Some(crate::sql::parser::Statement::Query(q)) =
                            parsed.into_iter().next().map(|p| p.stmt)
                        else {
                            return Err(WeirError::internal("COPY table query did not parse"));
                        };
                        match self.run_query(session, &q, None).await? {
                            Output::Rows { schema, stream } => (schema, CopyRows::Stream(stream)),
                            _ => return Err(WeirError::internal("COPY query gave no rows")),
                        }
                    }
                };
                // FORCE_QUOTE names columns of the output
                if let Some(crate::sql::client_stmts::ForceColumns::Columns(cols)) =
                    &options.force_quote
                    && let Some(c) = cols.iter().find(|c| {
                        !schema.fields().iter().any(|f| {
                            crate::catalog::rewrite::display_column_name(f.name()) == c.as_str()
                        })
                    })
                {
                    return Err(WeirError::new(
                        "42P10",
                        format!("FORCE_QUOTE column \"{c}\" not referenced by COPY"),
                    ));
                }
                Ok(Output::CopyOut {
                    schema,
                    rows,
                    options: options.clone(),
                })
            }
        }
    }

    /// Apply the rows of the COPY in progress read so far, once they pass the chunk size
    /// (`force`: whatever there is). Into a keyed or multiset table each chunk is applied
    /// as a part of the statement (`TableStore::apply_part`: undone if the COPY fails, or
    /// at the next start if the server stops before it ends), under the table's writer
    /// lock, taken at the first chunk and held until the COPY ends. Into an append-only
    /// table (whose rows cannot be taken back) chunks are staged and become the table's
    /// rows at once when the COPY ends (`TableStore::stage`, `publish`). Either way a chunk
    /// waits at `--memory-limit` like an INSERT (the client's data waits in the socket).
    pub async fn copy_in_apply(&self, session: &mut Session, force: bool) -> Result<()> {
        let chunk = self.copy_chunk_bytes();
        let Some(copy) = session.copy_in.as_mut() else {
            return Ok(());
        };
        // into a table with a watermark, chunks of at most a graph pass's rows: each chunk
        // carries the watermark after its rows, so the views close windows and free their
        // state pass by pass (`Graph::run_epoch`) instead of once per 16 MiB
        let rows: usize = copy.batches.iter().map(|b| b.num_rows()).sum();
        let by_rows =
            copy.table.watermark_spec().is_some() && rows >= crate::dataflow::graph::PASS_ROWS;
        if copy.error.is_some()
            || copy.batches.is_empty()
            || (!force && copy.batch_bytes < chunk && !by_rows)
        {
            return Ok(());
        }
        let table = copy.table.clone();
        let batches = std::mem::take(&mut copy.batches);
        copy.batch_bytes = 0;
        let (name, targets) = (copy.table_name.clone(), copy.targets.clone());
        let batches = self
            .copy_defaults(session, &name, &targets, batches)
            .await?;
        if *table.kind() == TableKind::AppendOnly {
            session.interrupt.check()?;
            self.wait_for_memory(session, "COPY", &table).await?;
            let id = match session.copy_in.as_ref().and_then(|c| c.staged) {
                Some(id) => id,
                None => {
                    let t = table.clone();
                    let id = blocking(move || t.stage_begin()).await?;
                    if let Some(copy) = session.copy_in.as_mut() {
                        copy.staged = Some(id);
                    }
                    id
                }
            };
            // the chunk before this one is written while this one was read; one write in
            // flight at a time keeps the chunks in order
            Self::copy_in_staged(session).await?;
            let t = table.clone();
            let write = tokio::task::spawn_blocking(move || t.stage(id, Change::Insert(batches)));
            if let Some(copy) = session.copy_in.as_mut() {
                copy.staging = Some(write);
            }
            return Ok(());
        }
        if session.copy_in.as_ref().is_some_and(|c| c.writer.is_none()) {
            let guard = crate::engine::lock_writer(session, &table).await?;
            if let Some(copy) = session.copy_in.as_mut() {
                copy.writer = Some(guard);
            }
        }
        let first = session.copy_in.as_ref().and_then(|c| c.first);
        let (_, seq) = self
            .apply_change(
                session,
                &table,
                Change::Insert(batches),
                "COPY",
                Some(first),
            )
            .await?;
        if let Some(copy) = session.copy_in.as_mut()
            && copy.first.is_none()
        {
            copy.first = seq;
        }
        Ok(())
    }

    /// The rows of a `COPY t (columns) FROM` with the DEFAULT of each column it does not
    /// list (a serial's `nextval`, `now()`, a constant), as Postgres fills them; the
    /// others stay NULL.
    async fn copy_defaults(
        &self,
        session: &Session,
        table: &str,
        targets: &[usize],
        batches: Vec<RecordBatch>,
    ) -> Result<Vec<RecordBatch>> {
        let Some(entry) = self.catalog.get(table) else {
            return Ok(batches);
        };
        let desc = &entry.desc;
        let filled: Vec<(usize, &String)> = desc
            .defaults
            .iter()
            .filter_map(|(c, d)| {
                let i = desc.columns.iter().position(|x| &x.name == c)?;
                (!targets.contains(&i)).then_some((i, d))
            })
            .collect();
        if filled.is_empty() {
            return Ok(batches);
        }
        let mut out = Vec::with_capacity(batches.len());
        for b in batches {
            let n = b.num_rows();
            let mut cols = b.columns().to_vec();
            for (i, d) in &filled {
                let ty = desc.columns[*i].ty.display_name();
                let sql = format!("SELECT CAST(({d}) AS {ty}) FROM generate_series(1, {n})");
                let q = crate::sql::parser::parse_query(&sql)?;
                let plan = self.plan_ast(session, &ast::Statement::Query(q)).await?;
                let values = crate::engine::collect_plan(session, plan).await?;
                let arrays: Vec<&dyn datafusion::arrow::array::Array> =
                    values.iter().map(|v| v.column(0).as_ref()).collect();
                let value = datafusion::arrow::compute::concat(&arrays)?;
                let want = b.schema().field(*i).data_type().clone();
                cols[*i] = datafusion::arrow::compute::cast(&value, &want)?;
            }
            out.push(RecordBatch::try_new(desc.schema(), cols)?);
        }
        Ok(out)
    }

    /// Wait for the chunk of an append-only COPY still being written to the store; its
    /// error is the COPY's.
    async fn copy_in_staged(session: &mut Session) -> Result<()> {
        match session.copy_in.as_mut().and_then(|c| c.staging.take()) {
            Some(write) => write
                .await
                .map_err(|e| WeirError::internal(format!("write task failed: {e}")))?
                .map(|_| ()),
            None => Ok(()),
        }
    }

    /// Bytes of parsed COPY rows applied as one change: a 32nd of `--memory-limit`,
    /// between 1 MiB and 16 MiB.
    fn copy_chunk_bytes(&self) -> usize {
        let limit = self.dataflow.sources.memory.limit().unwrap_or(u64::MAX);
        (limit / 32).clamp(1 << 20, 16 << 20) as usize
    }

    /// The data of a `COPY FROM STDIN` arrived in full: apply what is left, and end the
    /// statement. A COPY that failed (bad data, a cancel, a failed chunk) undoes the chunks
    /// it applied, unless it runs in a transaction block (which is then aborted and rolled
    /// back as a whole).
    pub async fn copy_in_done(&self, session: &mut Session) -> Result<String> {
        let result = self.copy_in_finish(session).await;
        if let Err(e) = &result
            && let Err(undo) = self.copy_in_abort(session).await
        {
            tracing::warn!(error = %e, undo_error = %undo, "undoing a failed COPY's applied rows failed");
        }
        // ends the COPY (releasing the writer lock)
        session.copy_in = None;
        result
    }

    async fn copy_in_finish(&self, session: &mut Session) -> Result<String> {
        let Some(copy) = session.copy_in.as_mut() else {
            return Err(WeirError::new(
                sqlstate::PROTOCOL_VIOLATION,
                "CopyDone without a COPY in progress",
            ));
        };
        if let Some(e) = copy.error.take() {
            return Err(e);
        }
        copy.finish()?;
        let rows = copy.rows;
        self.copy_in_apply(session, true).await?;
        Self::copy_in_staged(session).await?;
        let Some(copy) = session.copy_in.as_ref() else {
            return Err(WeirError::internal("the COPY ended while it was applied"));
        };
        let table = copy.table.clone();
        if let Some(id) = copy.staged {
            let _writer = crate::engine::lock_writer(session, &table).await?;
            let t = table.clone();
            blocking(move || t.publish(id)).await?;
            if let Some(copy) = session.copy_in.as_mut() {
                copy.staged = None;
            }
        } else if copy.first.is_some() {
            let t = table.clone();
            blocking(move || t.end_statement()).await?;
        }
        let tag = format!("COPY {rows}");
        crate::metrics::global().rows_written(&tag);
        Ok(tag)
    }

    /// End the COPY in progress without applying more (CopyFail, or an error): drop what
    /// it staged; outside a transaction block, undo the chunks it applied.
    pub async fn copy_in_abort(&self, session: &mut Session) -> Result<()> {
        // a chunk still being written is written before what was staged is dropped
        // (its own error does not matter: the COPY fails anyway)
        let _ = Self::copy_in_staged(session).await;
        let Some(mut copy) = session.copy_in.take() else {
            return Ok(());
        };
        // releases the writer lock the undo needs
        drop(copy.writer.take());
        if let Some(id) = copy.staged.take() {
            let t = copy.table.clone();
            blocking(move || t.discard(id)).await?;
        }
        if !session.in_transaction {
            self.rollback_until(session, copy.undo_mark).await?;
        }
        Ok(())
    }
}

/// Run blocking store work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| WeirError::internal(format!("write task failed: {e}")))?
}

fn undefined_cursor(name: &str) -> WeirError {
    WeirError::new(
        UNDEFINED_CURSOR,
        format!("cursor \"{name}\" does not exist"),
    )
}

/// Table column indexes of a COPY column list (when empty: all columns but the stored
/// generated ones, as in Postgres, which refuses those by name).
fn target_columns(desc: &crate::catalog::RelationDesc, names: &[String]) -> Result<Vec<usize>> {
    let (columns, table) = (&desc.columns, &desc.name);
    if names.is_empty() {
        return Ok((0..columns.len())
            .filter(|&i| desc.generation_expr(&columns[i].name).is_none())
            .collect());
    }
    let mut out = Vec::with_capacity(names.len());
    for n in names {
        let i = columns.iter().position(|c| &c.name == n).ok_or_else(|| {
            WeirError::new(
                sqlstate::UNDEFINED_COLUMN,
                format!("column \"{n}\" of relation \"{table}\" does not exist"),
            )
        })?;
        if desc.generation_expr(n).is_some() {
            return Err(WeirError::new(
                sqlstate::INVALID_COLUMN_REFERENCE,
                format!("column \"{n}\" is a generated column"),
            )
            .with_detail("Generated columns cannot be used in COPY."));
        }
        if out.contains(&i) {
            return Err(WeirError::new(
                sqlstate::DUPLICATE_COLUMN,
                format!("column \"{n}\" specified more than once"),
            ));
        }
        out.push(i);
    }
    Ok(out)
}
