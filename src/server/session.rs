//! Per-connection state: the DataFusion context, settings changed with SET, and the
//! transaction block status.

use std::collections::HashMap;

use std::sync::Arc;

use datafusion::execution::context::SessionContext;

use crate::serving::PinnedViews;
use crate::state::table::TableStore;

use crate::server::settings::SettingsStore;
pub use crate::server::settings::{DEFAULT_SETTINGS, canonical_name, is_reported};

/// Why the running statement must stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum InterruptReason {
    UserRequest = 1,
    StatementTimeout = 2,
    /// `pg_terminate_backend`: the connection closes.
    Terminate = 3,
}

/// Interrupts of the statement a connection is running: a cancel request or its
/// `statement_timeout`. Result streams stop at their next poll; statements that change
/// data check it at the points where stopping changes nothing ([`Interrupt::check`]).
#[derive(Default)]
pub struct Interrupt {
    flag: std::sync::atomic::AtomicU8,
    notify: tokio::sync::Notify,
    /// `pg_terminate_backend` was called: never reset, the connection closes.
    terminated: std::sync::atomic::AtomicBool,
}

impl crate::catalog::BackendSignals for Interrupt {
    fn cancel(&self) {
        self.raise(InterruptReason::UserRequest);
    }
    fn terminate(&self) {
        self.terminated
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // a statement running stops with the reason; a reset flag would lose it, so the
        // flag is forced
        self.flag.store(
            InterruptReason::Terminate as u8,
            std::sync::atomic::Ordering::SeqCst,
        );
        self.notify.notify_waiters();
    }
}

impl Interrupt {
    /// Whether `pg_terminate_backend` asked the connection to close.
    pub fn terminated(&self) -> bool {
        self.terminated.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Wait until `pg_terminate_backend` asks the connection to close.
    pub async fn until_terminated(&self) {
        loop {
            let notified = self.notify.notified();
            if self.terminated() {
                return;
            }
            notified.await;
        }
    }

    pub fn cancel(&self) {
        self.raise(InterruptReason::UserRequest);
    }

    pub fn raise(&self, reason: InterruptReason) {
        let _ = self.flag.compare_exchange(
            0,
            reason as u8,
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
        );
        self.notify.notify_waiters();
    }

    pub fn reset(&self) {
        if !self.terminated() {
            self.flag.store(0, std::sync::atomic::Ordering::SeqCst);
        }
    }

    pub fn reason(&self) -> Option<InterruptReason> {
        match self.flag.load(std::sync::atomic::Ordering::SeqCst) {
            1 => Some(InterruptReason::UserRequest),
            2 => Some(InterruptReason::StatementTimeout),
            3 => Some(InterruptReason::Terminate),
            _ => None,
        }
    }

    /// The error of the interrupt raised, if one was.
    pub fn check(&self) -> crate::error::Result<()> {
        match self.reason() {
            None => Ok(()),
            Some(r) => Err(interrupt_error(r)),
        }
    }

    /// Wait until an interrupt is raised.
    pub async fn cancelled(&self) {
        loop {
            let notified = self.notify.notified();
            if self.reason().is_some() {
                return;
            }
            notified.await;
        }
    }

    /// The error for the interrupt raised (user cancel if none is).
    pub fn error(&self) -> crate::error::WeirError {
        interrupt_error(self.reason().unwrap_or(InterruptReason::UserRequest))
    }

    /// Raise a statement timeout after `after` unless the returned guard is dropped first.
    pub fn arm(self: &Arc<Self>, after: Option<std::time::Duration>) -> TimeoutGuard {
        let task = after.map(|d| {
            let me = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                me.raise(InterruptReason::StatementTimeout);
            })
        });
        TimeoutGuard { task }
    }
}

/// Disarms a statement timeout when dropped.
pub struct TimeoutGuard {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for TimeoutGuard {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Postgres' `admin_shutdown`, what `pg_terminate_backend` ends a connection with.
pub const ADMIN_SHUTDOWN: &str = "57P01";

pub fn interrupt_error(r: InterruptReason) -> crate::error::WeirError {
    match r {
        InterruptReason::UserRequest => crate::error::WeirError::new(
            crate::error::sqlstate::QUERY_CANCELED,
            "canceling statement due to user request",
        ),
        InterruptReason::StatementTimeout => crate::error::WeirError::new(
            crate::error::sqlstate::QUERY_CANCELED,
            "canceling statement due to statement timeout",
        ),
        InterruptReason::Terminate => crate::error::WeirError::new(
            ADMIN_SHUTDOWN,
            "terminating connection due to administrator command",
        ),
    }
}

/// A transaction block's deferred constraints: what SET CONSTRAINTS said (None: as each
/// constraint is declared) and the foreign keys (table, constraint) whose checks wait.
#[derive(Debug, Default)]
pub struct DeferredChecks {
    pub all: Option<bool>,
    pub named: std::collections::HashMap<String, bool>,
    pub pending: Vec<(String, String)>,
}

pub struct Session {
    pub ctx: SessionContext,
    /// Views pinned for the query being run (shared with the context's catalog).
    pub pinned: Arc<PinnedViews>,
    /// Shared with the session's `current_setting()` and `set_config()` functions.
    settings: Arc<parking_lot::RwLock<SettingsStore>>,
    /// The memory its statements may hold (`work_mem`).
    pub memory: Arc<crate::serving::memory::StatementMemoryPool>,
    /// Interrupts of the running statement (the connection's cancel target).
    pub interrupt: Arc<Interrupt>,
    /// The transaction block is READ ONLY.
    pub tx_read_only: bool,
    /// The statement timeout of a COPY FROM STDIN, running while its data arrives.
    pub statement_timer: Option<TimeoutGuard>,
    /// Inside BEGIN ... COMMIT/ROLLBACK.
    pub in_transaction: bool,
    /// Changes made since the transaction (explicit, or the implicit one of a
    /// multi-statement query) began, to undo on ROLLBACK or error; oldest first.
    pub undo: Vec<Undo>,
    /// Settings SET in the transaction block, oldest first: (name, the session's value
    /// before, SET LOCAL) — see [`Session::end_block_settings`].
    pub tx_settings: Vec<(String, Option<String>, bool)>,
    /// Table locks LOCK TABLE took, held until the transaction block ends.
    pub table_locks: Vec<crate::engine::table_locks::WriterLock>,
    /// Collect undo entries even outside BEGIN (a multi-statement simple query).
    pub implicit_transaction: bool,
    /// A statement failed inside the transaction block: everything but ROLLBACK [TO] is
    /// refused until the block ends.
    pub aborted: bool,
    /// Savepoints of the transaction block, oldest first: name, and the undo log's and
    /// `tx_settings`' lengths when it was set.
    pub savepoints: Vec<(String, usize, usize)>,
    /// The block's deferred constraint checks (SET CONSTRAINTS, DEFERRABLE foreign keys).
    pub deferred: parking_lot::Mutex<DeferredChecks>,
    /// Open cursors by name.
    pub cursors: HashMap<String, Cursor>,
    /// Statements `PREPARE`d in SQL, by name (`engine/prepared.rs`).
    pub prepared: HashMap<String, crate::engine::prepared::SqlPrepared>,
    /// A `COPY ... FROM STDIN` waiting for its data.
    pub copy_in: Option<crate::server::copy::CopyIn>,
    /// Shared with the session's `current_user`, `session_user` and privilege functions.
    pub identity: Arc<parking_lot::RwLock<Identity>>,
    /// The temporary tables it created (`CREATE TEMP TABLE`), and their ON COMMIT.
    pub temp_tables: Vec<(String, crate::sql::parser::OnCommit)>,
    /// When the session ends (set by the connection): undoes what its open transaction
    /// block changed (the undo log, oldest first) and drops its temporary tables.
    pub on_close: Option<OnClose>,
    /// This session as the holder of advisory locks (`server/advisory_locks.rs`).
    pub lock_holder: u64,
    /// The backend pid clients got in BackendKeyData (0 for internal sessions).
    pub pid: i32,
    /// The channels the session LISTENs on and what reached it (`server/notifications.rs`).
    pub inbox: Arc<crate::server::notifications::Inbox>,
    /// What its transaction NOTIFYed, sent when it commits.
    pub outbox: Arc<crate::server::notifications::Outbox>,
    /// When the transaction block began: what `now()` answers inside it.
    pub tx_start: crate::sql::transaction_time::TransactionStart,
    /// The tracked settings as the client was last told them (ParameterStatus); None until
    /// the first report is taken (the values at startup).
    reported: Option<Vec<(String, String)>>,
}

/// What the connection does when its session ends: given the session's temporary tables
/// and the undo log of a transaction block left open.
pub type OnClose = Box<dyn FnOnce(Vec<String>, Vec<Undo>) + Send + Sync>;

/// One entry of a transaction's undo log (run newest first by ROLLBACK).
pub enum Undo {
    /// Rows a statement wrote: the table's log from the hold on is reverted.
    Rows(Arc<TableStore>, crate::state::table::LogHold),
    /// A schema change: the statement that reverses it (`engine/schema_undo.rs`).
    Schema(String),
    /// A schema change that cannot be reversed (the statement, for the WARNING of the
    /// ROLLBACK that passes it).
    Irreversible(String),
    /// A table or sequence the block dropped, by oid: brought back by a rollback, its
    /// drop finished by the commit (`Catalog::detach_relation`).
    Reattach(u32),
    /// A table the block rewrote (DROP COLUMN, ALTER COLUMN TYPE, ...): brought back as
    /// it was by a rollback, its old rows purged by the commit (`Catalog::undo_rewrite`).
    Unrewrite(Box<Rewrite>),
}

/// A table a transaction block rewrote under a new OID.
pub struct Rewrite {
    pub old_oid: u32,
    pub new_oid: u32,
    /// The relations the rewrite changed beside the table (views that follow it, tables
    /// whose foreign keys name it), as they were before.
    pub others: Vec<crate::catalog::RelationDesc>,
}

/// What a cursor reads from.
pub enum CursorRows {
    Query(datafusion::execution::SendableRecordBatchStream),
    Subscribe(crate::serving::subscribe::SubscribeStream),
}

/// An open cursor (`DECLARE`): rows are read as FETCH asks for them.
pub struct Cursor {
    pub schema: datafusion::arrow::datatypes::SchemaRef,
    /// In a mutex only to make the session `Sync` (streams are not); reached with
    /// `get_mut`, never locked.
    pub rows: parking_lot::Mutex<CursorRows>,
    /// Rows read from the source but not fetched yet.
    pub leftover: Option<datafusion::arrow::record_batch::RecordBatch>,
    /// `WITH HOLD`: stays open after the transaction block ends.
    pub hold: bool,
}

/// Who a session is. Privileges are checked against [`Identity::current`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The role that logged in: `SET SESSION AUTHORIZATION` needs it to be a superuser.
    pub authenticated: u32,
    /// `session_user`.
    pub session_user: u32,
    /// `SET ROLE` (None: NONE, the session user acts).
    pub role: Option<u32>,
}

impl Identity {
    pub fn of(role: u32) -> Identity {
        Identity {
            authenticated: role,
            session_user: role,
            role: None,
        }
    }

    /// `current_user`: the role privileges are checked against.
    pub fn current(&self) -> u32 {
        self.role.unwrap_or(self.session_user)
    }
}

/// The transaction state a client sees in ReadyForQuery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxState {
    Idle,
    InBlock,
    Failed,
}

impl Drop for Session {
    /// A connection that goes away inside a transaction block rolls it back, as in Postgres.
    fn drop(&mut self) {
        crate::server::advisory_locks::session_ended(self.lock_holder);
        let temp: Vec<String> = self.temp_tables.drain(..).map(|(n, _)| n).collect();
        let mut undo = std::mem::take(&mut self.undo);
        if let Some(close) = self.on_close.take()
            && (!temp.is_empty() || !undo.is_empty())
        {
            // (the connection's engine undoes rows and schema changes, in order)
            close(temp, std::mem::take(&mut undo));
        }
        let undo: Vec<_> = undo
            .into_iter()
            .filter_map(|u| match u {
                Undo::Rows(table, hold) => Some((table, hold)),
                _ => None,
            })
            .collect();
        // a COPY cut off: its writer lock goes now, what it staged is dropped
        let copy = self.copy_in.take().map(|mut c| {
            drop(c.writer.take());
            (c.table.clone(), c.staged, c.staging.take())
        });
        if undo.is_empty() && !matches!(copy, Some((_, Some(_), _))) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            if let Some((table, Some(id), staging)) = copy {
                // a chunk still being written is written before the COPY's are dropped
                if let Some(write) = staging {
                    let _ = write.await;
                }
                let result = tokio::task::spawn_blocking(move || table.discard(id)).await;
                if let Ok(Err(e)) = result {
                    tracing::warn!(error = %e, "dropping a cut-off COPY's staged rows failed");
                }
            }
            for (table, hold) in undo.into_iter().rev() {
                let _writer = table.writer.lock().await;
                let t = table.clone();
                let result = tokio::task::spawn_blocking(move || t.revert(&hold)).await;
                if let Ok(Err(e)) = result {
                    tracing::warn!(table = %table.name(), error = %e, "rollback on disconnect failed");
                }
            }
        });
    }
}

impl Session {
    pub fn new(
        ctx: SessionContext,
        pinned: Arc<PinnedViews>,
        memory: Arc<crate::serving::memory::StatementMemoryPool>,
        limits: crate::engine::EngineLimits,
        identity: Arc<parking_lot::RwLock<Identity>>,
    ) -> Self {
        let settings = Arc::new(parking_lot::RwLock::new(SettingsStore::new(
            memory.clone(),
            limits.query_memory_limit,
            limits.max_connections,
        )));
        register_current_setting(&ctx, settings.clone());
        Session {
            ctx,
            pinned,
            settings,
            memory,
            interrupt: Arc::new(Interrupt::default()),
            tx_read_only: false,
            statement_timer: None,
            in_transaction: false,
            undo: Vec::new(),
            tx_settings: Vec::new(),
            table_locks: Vec::new(),
            implicit_transaction: false,
            aborted: false,
            savepoints: Vec::new(),
            deferred: Default::default(),
            cursors: HashMap::new(),
            prepared: HashMap::new(),
            copy_in: None,
            identity,
            temp_tables: Vec::new(),
            on_close: None,
            lock_holder: crate::server::advisory_locks::new_holder(),
            pid: 0,
            inbox: crate::server::notifications::Inbox::new(),
            outbox: Default::default(),
            tx_start: Default::default(),
            reported: None,
        }
    }

    /// The role privileges are checked against (`current_user`).
    pub fn role(&self) -> u32 {
        self.identity.read().current()
    }

    pub fn tx_state(&self) -> TxState {
        match (self.in_transaction, self.aborted) {
            (false, _) => TxState::Idle,
            (true, false) => TxState::InBlock,
            (true, true) => TxState::Failed,
        }
    }

    /// The transaction block ended (COMMIT or ROLLBACK): savepoints and cursors without
    /// HOLD go with it.
    pub fn end_block(&mut self) {
        self.in_transaction = false;
        *self.tx_start.write() = None;
        self.tx_read_only = false;
        self.aborted = false;
        self.savepoints.clear();
        self.table_locks.clear();
        self.cursors.retain(|_, c| c.hold);
        *self.deferred.lock() = DeferredChecks::default();
    }

    /// Whether a check of DEFERRABLE foreign key `fk` waits for COMMIT now: in a transaction
    /// block, as SET CONSTRAINTS last said for it (by name, else ALL), else as declared.
    pub fn fk_deferred(&self, fk: &crate::catalog::ForeignKeyDesc) -> bool {
        if !self.in_transaction || !fk.deferrable {
            return false;
        }
        let d = self.deferred.lock();
        d.named
            .get(&fk.name)
            .copied()
            .or(d.all)
            .unwrap_or(fk.initially_deferred)
    }

    /// Check foreign key `fk` of `table` at COMMIT (or at SET CONSTRAINTS ... IMMEDIATE).
    pub fn defer_check(&self, table: &str, fk: &str) {
        let mut d = self.deferred.lock();
        let key = (table.to_owned(), fk.to_owned());
        if !d.pending.contains(&key) {
            d.pending.push(key);
        }
    }

    /// Normalize a SHOW/SET name: lower case, multi-word aliases mapped.
    pub fn normalize(name: &str) -> String {
        crate::server::settings::normalize(name)
    }

    pub fn get(&self, name: &str) -> Option<String> {
        let n = Self::normalize(name);
        match n.as_str() {
            // the block's own state, else the session's default for new blocks
            "transaction_read_only" => Some(if self.read_only() { "on" } else { "off" }.to_owned()),
            _ => self.settings.read().get(&n),
        }
    }

    /// Validate and set a setting (SET); returns the stored value.
    /// Record `session_authorization` / `role` as SHOW and current_setting() report them.
    pub fn set_identity(&self, name: &str, value: &str) {
        self.settings.write().set_identity(name, value);
    }

    pub fn set(&mut self, name: &str, value: &str) -> crate::error::Result<String> {
        let n = Self::normalize(name);
        if n == "transaction_read_only" {
            let v = crate::server::settings::validate(&n, value, usize::MAX)?;
            self.set_read_only(v == "on")?;
            return Ok(v);
        }
        let stored = self.settings.write().set(&n, value)?;
        if n == "timezone" {
            self.sync_time_zone();
        }
        Ok(stored)
    }

    pub fn reset(&mut self, name: &str) {
        self.settings.write().reset(name);
        self.sync_time_zone();
    }

    /// SET inside a transaction block, as Postgres keeps it: undone by ROLLBACK, and with
    /// `local` (SET LOCAL) also when the block commits. Outside a block: a plain SET, and a
    /// SET LOCAL changes nothing (Postgres warns); returns the stored value, or None then.
    pub fn set_in_block(
        &mut self,
        name: &str,
        value: &str,
        local: bool,
    ) -> crate::error::Result<Option<String>> {
        let n = Self::normalize(name);
        if !self.in_transaction {
            if local {
                // checked all the same
                crate::server::settings::validate(&n, value, usize::MAX)?;
                return Ok(None);
            }
            return self.set(&n, value).map(Some);
        }
        let before = self.settings.read().session_value(&n);
        let stored = self.set(&n, value)?;
        self.tx_settings.push((n, before, local));
        Ok(Some(stored))
    }

    /// What `set_config()` set in the statements before this one, taken in as SET / SET
    /// LOCAL are: in a block, kept to be undone by ROLLBACK (and, `is_local`, when the
    /// block ends); outside one, an `is_local` change lasted its statement's implicit
    /// transaction and goes back now. Called before each statement.
    pub fn settle_function_settings(&mut self) {
        let changed = self.settings.write().take_journal();
        if changed.is_empty() {
            return;
        }
        if self.in_transaction {
            self.tx_settings.extend(changed);
        } else {
            for (k, (name, before, local)) in changed.iter().enumerate().rev() {
                // (a later session-wide set_config of the same name outlives it)
                let kept_later = changed[k + 1..].iter().any(|(n, _, l)| n == name && !l);
                if *local && !kept_later {
                    self.settings.write().restore(name, before.clone());
                }
            }
        }
        self.sync_time_zone();
    }

    /// ROLLBACK TO a savepoint: the settings SET since it go back, newest first.
    pub fn rollback_settings_to(&mut self, len: usize) {
        if len >= self.tx_settings.len() {
            return;
        }
        let undone = self.tx_settings.split_off(len);
        for (name, before, _) in undone.into_iter().rev() {
            self.settings.write().restore(&name, before);
        }
        self.sync_time_zone();
    }

    /// The transaction block ends: the settings it SET go back (all of them after a
    /// ROLLBACK, the SET LOCAL ones after a COMMIT), newest first.
    pub fn end_block_settings(&mut self, committed: bool) {
        let changed = std::mem::take(&mut self.tx_settings);
        for (k, (name, before, local)) in changed.iter().enumerate().rev() {
            // a SET after a SET LOCAL of the same name outlives the block
            let kept_later = changed[k + 1..].iter().any(|(n, _, l)| n == name && !l);
            if !committed || (*local && !kept_later) {
                self.settings.write().restore(name, before.clone());
            }
        }
        self.sync_time_zone();
    }

    /// The session's TimeZone.
    pub fn time_zone(&self) -> crate::sql::time_zone::Zone {
        use crate::sql::time_zone::Zone;
        self.get("timezone")
            .and_then(|v| Zone::setting(&v))
            .map_or_else(Zone::utc, |(z, _)| z)
    }

    /// Plans made in the session's context read and show `timestamptz` in its TimeZone
    /// (called before each statement: SET and `set_config` change the setting).
    pub fn sync_time_zone(&self) {
        use crate::sql::time_zone::{plan_zone, set_plan_zone};
        let zone = self.time_zone();
        let state = self.ctx.state_ref();
        let mut state = state.write();
        let options = state.config_mut().options_mut();
        if plan_zone(options) != zone {
            set_plan_zone(options, Some(zone));
        }
    }

    /// Every setting with its current value.
    pub fn all(&self) -> Vec<(String, String)> {
        let mut all = self.settings.read().all();
        for (k, v) in all.iter_mut() {
            if k == "transaction_read_only" {
                *v = if self.read_only() { "on" } else { "off" }.to_owned();
            }
        }
        all
    }

    /// A time setting in effect (None when off).
    pub fn duration(&self, name: &str) -> Option<std::time::Duration> {
        self.settings.read().duration(name)
    }

    /// Whether statements now run read-only: the block's mode inside one, else
    /// `default_transaction_read_only`.
    pub fn read_only(&self) -> bool {
        if self.in_transaction {
            self.tx_read_only
        } else {
            self.settings.read().flag("default_transaction_read_only")
        }
    }

    /// Start a block's mode from the session default (BEGIN).
    /// `pg_sleep` and waiting advisory locks stop at this session's interrupts (registered
    /// again when the connection puts its cancel target in place).
    pub fn register_sleep(&self) {
        let interrupt = self.interrupt.clone();
        let check: Arc<dyn Fn() -> crate::error::Result<()> + Send + Sync> =
            Arc::new(move || interrupt.check());
        crate::sql::transaction_time::register_sleep(&self.ctx, check.clone());
        crate::server::advisory_locks::register(&self.ctx, self.lock_holder, check);
        crate::server::notifications::register(&self.ctx, self.outbox.clone(), self.inbox.clone());
    }

    pub fn begin_block(&mut self, read_only: Option<bool>) {
        self.in_transaction = true;
        *self.tx_start.write() = Some(chrono::Utc::now());
        self.tx_read_only =
            read_only.unwrap_or_else(|| self.settings.read().flag("default_transaction_read_only"));
    }

    /// `SET TRANSACTION READ ONLY | READ WRITE` inside a block.
    pub fn set_read_only(&mut self, read_only: bool) -> crate::error::Result<()> {
        if !self.in_transaction {
            // outside a block it has no effect (Postgres warns); nothing to do
            return Ok(());
        }
        if self.tx_read_only && !read_only && !self.undo.is_empty() {
            return Err(crate::error::WeirError::new(
                crate::error::sqlstate::ACTIVE_SQL_TRANSACTION,
                "transaction read-write mode must be set before any query",
            ));
        }
        self.tx_read_only = read_only;
        Ok(())
    }

    /// Refuse a statement that writes when the transaction is read-only (25006).
    pub fn check_writable(&self, what: &str) -> crate::error::Result<()> {
        if self.read_only() {
            Err(crate::error::WeirError::new(
                crate::error::sqlstate::READ_ONLY_SQL_TRANSACTION,
                format!("cannot execute {what} in a read-only transaction"),
            ))
        } else {
            Ok(())
        }
    }

    /// The session's settings, for functions that read them as a statement runs.
    /// The settings clients track (ParameterStatus), by their stored names, as they are now.
    pub fn tracked_settings(&self) -> Vec<(String, String)> {
        self.settings
            .read()
            .all()
            .into_iter()
            .filter(|(k, _)| crate::server::settings::is_reported(k))
            .collect()
    }

    /// The tracked settings whose value is not what the client was last told: (the name
    /// clients know, the value now), now counted as told. What is reported after each
    /// statement (SET, RESET, DISCARD ALL, `set_config`, a ROLLBACK or the end of a SET
    /// LOCAL putting a value back), as Postgres reports a changed GUC_REPORT setting.
    pub fn take_setting_reports(&mut self) -> Vec<(String, String)> {
        let now = self.tracked_settings();
        let Some(told) = self.reported.replace(now.clone()) else {
            return vec![];
        };
        now.into_iter()
            .filter(|kv| !told.contains(kv))
            .map(|(k, v)| (crate::server::settings::canonical_name(&k).to_owned(), v))
            .collect()
    }

    pub fn settings_handle(&self) -> Arc<parking_lot::RwLock<SettingsStore>> {
        self.settings.clone()
    }

    /// `client_min_messages` lets NOTICEs through.
    pub fn wants_notices(&self) -> bool {
        !matches!(
            self.settings.read().get("client_min_messages").as_deref(),
            Some("warning") | Some("error")
        )
    }
}

/// `current_setting(name [, missing_ok])`, reading this session's settings.
fn register_current_setting(
    ctx: &SessionContext,
    settings: Arc<parking_lot::RwLock<SettingsStore>>,
) {
    use datafusion::arrow::array::{Array, AsArray, BooleanArray, StringArray};
    let writer = settings.clone();
    use datafusion::arrow::datatypes::DataType;
    use datafusion::logical_expr::{ColumnarValue, Volatility};
    let f = move |args: &[ColumnarValue]| -> datafusion::error::Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(args)?;
        let names = datafusion::arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let names = names.as_string::<i32>();
        let missing_ok = arrays
            .get(1)
            .and_then(|a| a.as_any().downcast_ref::<BooleanArray>().cloned());
        let s = settings.read();
        let mut out = Vec::with_capacity(names.len());
        for i in 0..names.len() {
            if names.is_null(i) {
                out.push(None);
                continue;
            }
            match s.get(names.value(i)) {
                Some(v) => out.push(Some(v)),
                None if missing_ok
                    .as_ref()
                    .is_some_and(|m| m.is_valid(i) && m.value(i)) =>
                {
                    out.push(None)
                }
                None => {
                    return Err(datafusion::error::DataFusionError::External(Box::new(
                        crate::error::WeirError::new(
                            crate::error::sqlstate::UNDEFINED_OBJECT,
                            format!(
                                "unrecognized configuration parameter \"{}\"",
                                names.value(i)
                            ),
                        ),
                    )));
                }
            }
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    };
    use datafusion::logical_expr::{ScalarUDF, Signature, SimpleScalarUDF, TypeSignature};
    let f = Arc::new(f);
    // (stable: read once per statement; `weir_current_setting`, volatile, is what a
    // statement that also calls set_config reads, per row after it: `rewrite.rs`)
    for (name, volatility) in [
        ("current_setting", Volatility::Stable),
        ("weir_current_setting", Volatility::Volatile),
    ] {
        let signature = Signature::one_of(
            vec![
                TypeSignature::Exact(vec![DataType::Utf8]),
                TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
            ],
            volatility,
        );
        ctx.register_udf(ScalarUDF::from(SimpleScalarUDF::new_with_signature(
            name,
            signature,
            DataType::Utf8,
            f.clone(),
        )));
    }
    // set_config(name, value, is_local): sets it and returns the value; journaled, so the
    // session keeps it as SET / SET LOCAL in its block (`Session::settle_function_settings`)
    let set = move |args: &[ColumnarValue]| -> datafusion::error::Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(args)?;
        let names = datafusion::arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let values = datafusion::arrow::compute::cast(&arrays[1], &DataType::Utf8)?;
        let locals = datafusion::arrow::compute::cast(&arrays[2], &DataType::Boolean)?;
        let locals = locals.as_boolean();
        let (names, values) = (names.as_string::<i32>(), values.as_string::<i32>());
        let mut out = Vec::with_capacity(names.len());
        for i in 0..names.len() {
            if names.is_null(i) {
                out.push(None);
                continue;
            }
            let v = if values.is_null(i) {
                ""
            } else {
                values.value(i)
            };
            let local = locals.is_valid(i) && locals.value(i);
            match writer.write().set_from_function(names.value(i), v, local) {
                Ok(stored) => out.push(Some(stored)),
                Err(e) => return Err(datafusion::error::DataFusionError::External(Box::new(e))),
            }
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    };
    ctx.register_udf(ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        "set_config",
        Signature::exact(
            vec![DataType::Utf8, DataType::Utf8, DataType::Boolean],
            Volatility::Volatile,
        ),
        DataType::Utf8,
        Arc::new(set),
    )));
}
