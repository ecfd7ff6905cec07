//! pgwire handlers: startup (server parameters, cancel keys), the simple query protocol
//! (several statements per message), and the extended protocol (Parse/Bind/Describe/Execute
//! with named statements and portals, parameter types inferred by the planner).

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt, StreamExt, stream};
use pgwire::api::auth::{
    ServerParameterProvider, StartupHandler, finish_authentication, protocol_negotiation,
    save_startup_parameters_to_metadata,
};

use pgwire::api::cancel::{CancelHandler, DefaultCancelHandler};
use pgwire::api::copy::CopyHandler;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler, send_ready_for_query};
use pgwire::api::results::{
    CopyResponse, DescribePortalResponse, DescribeStatementResponse, FieldInfo, QueryResponse,
    Response, Tag,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{
    ClientInfo, ClientPortalStore, ConnectionGuard, ConnectionHandle, ConnectionManager,
    DEFAULT_NAME, METADATA_USER, PgWireConnectionState, PgWireServerHandlers,
    PidSecretKeyGenerator, RandomPidSecretKeyGenerator, Type,
};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::extendedquery::{Describe, Execute};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::simplequery::Query;
use pgwire::messages::startup::ParameterStatus;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tokio::sync::Mutex;
use tracing::{debug, info, warn};

use datafusion::arrow::datatypes::FieldRef;

use crate::engine::{Engine, Output};
use crate::error::WeirError;
use crate::server::copy::CopyWriter;
use crate::server::encode::{column_plans, encode_batch, field_infos};
use crate::server::params;
use crate::server::session::{Session, TxState};
use crate::server::streaming::{
    Sent, copy_data, send_flushing, send_simple_response, subscribe_rows,
};
use crate::sql::parser::{Parsed, Statement, parse_within};

/// The cancel target of a connection (shared with its session).
pub use crate::server::session::Interrupt as QueryCancel;

type CancelKey = (i32, bytes::Bytes);

/// Cancel targets by (pid, secret key).
#[derive(Default)]
struct CancelRegistry {
    map: parking_lot::Mutex<HashMap<CancelKey, Arc<QueryCancel>>>,
}

/// Unregisters a connection's cancel target when the connection ends.
struct CancelGuard {
    key: CancelKey,
    registry: Arc<CancelRegistry>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.registry.map.lock().remove(&self.key);
    }
}

/// A statement prepared with Parse.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub parsed: Parsed,
}

/// The handlers of every connection.
pub struct WeirBackend {
    handle: Arc<Handle>,
    /// Offered to clients that ask for TLS (None: SSLRequest is answered `N`).
    pub(crate) tls: Option<pgwire::tokio::tokio_rustls::TlsAcceptor>,
}

impl WeirBackend {
    pub fn new(engine: Arc<Engine>) -> Self {
        Self::with_auth(engine, crate::server::auth::AuthConfig::default(), None)
    }

    /// A backend that authenticates clients by `auth` and offers TLS through `tls`.
    pub fn with_auth(
        engine: Arc<Engine>,
        auth: crate::server::auth::AuthConfig,
        tls: Option<pgwire::tokio::tokio_rustls::TlsAcceptor>,
    ) -> Self {
        let default_memory = engine.limits.query_memory_limit;
        let catalog = engine.catalog.clone();
        WeirBackend {
            tls: tls.clone(),
            handle: Arc::new(Handle {
                engine,
                auth,
                mock_secret: crate::catalog::scram::random_bytes(32),
                tls_configured: tls.is_some(),
                failures: Default::default(),
                connections: Arc::new(ConnectionManager::new()),
                cancels: Arc::new(CancelRegistry::default()),
                parser: Arc::new(WeirQueryParser {
                    default_memory,
                    catalog,
                }),
                pids: RandomPidSecretKeyGenerator::default(),
            }),
        }
    }
}

impl WeirBackend {
    /// The handler of every message kind (the connection loop calls it directly).
    pub(crate) fn handle(&self) -> Arc<Handle> {
        self.handle.clone()
    }

    pub(crate) fn cancel(&self) -> Arc<WeirCancelHandler> {
        Arc::new(WeirCancelHandler {
            default: DefaultCancelHandler::new(self.handle.connections.clone()),
            registry: self.handle.cancels.clone(),
        })
    }
}

fn err(e: WeirError) -> PgWireError {
    e.into_pgwire()
}

/// `e` with the place in the query string it points at, when it has none yet and the
/// statement's text shows it (`sql/error_position.rs`).
fn placed(e: WeirError, parsed: &Parsed) -> WeirError {
    crate::sql::error_position::place(e, &parsed.text, parsed.offset)
}

/// A statement's text and how many characters of the query string precede it: what an
/// error raised while its rows stream out is placed in.
#[derive(Clone)]
struct Place {
    text: Arc<str>,
    offset: usize,
}

impl Place {
    fn of(parsed: &Parsed) -> Self {
        Place {
            text: parsed.text.clone(),
            offset: parsed.offset,
        }
    }
    fn apply(&self, e: WeirError) -> WeirError {
        crate::sql::error_position::place(e, &self.text, self.offset)
    }
}

impl PgWireServerHandlers for WeirBackend {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.handle.clone()
    }
    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.handle.clone()
    }
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.handle.clone()
    }
    fn copy_handler(&self) -> Arc<impl CopyHandler> {
        self.handle.clone()
    }
    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        Arc::new(WeirCancelHandler {
            default: DefaultCancelHandler::new(self.handle.connections.clone()),
            registry: self.handle.cancels.clone(),
        })
    }
}

/// Cancels both the planning phase (pgwire's handle) and a streaming result (ours).
pub(crate) struct WeirCancelHandler {
    default: DefaultCancelHandler,
    registry: Arc<CancelRegistry>,
}

#[async_trait]
impl CancelHandler for WeirCancelHandler {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let key = (request.pid, request.secret_key.to_bytes());
        let target = self.registry.map.lock().get(&key).cloned();
        if let Some(t) = target {
            info!(pid = request.pid, "cancel request");
            t.cancel();
        }
        self.default.on_cancel_request(request).await;
    }
}

/// Shared by all connections; per-connection state lives in the client's session extensions.
pub struct Handle {
    engine: Arc<Engine>,
    /// Who may connect, and how they prove it.
    auth: crate::server::auth::AuthConfig,
    /// Salts the mock SCRAM exchange of unknown roles (random per process).
    mock_secret: Vec<u8>,
    /// TLS is offered (`SHOW ssl`).
    tls_configured: bool,
    /// Failed logins in progress, per client address.
    failures: crate::server::auth::FailedLogins,
    connections: Arc<ConnectionManager>,
    cancels: Arc<CancelRegistry>,
    parser: Arc<WeirQueryParser>,
    pids: RandomPidSecretKeyGenerator,
}

impl Handle {
    fn path_resolver(&self, s: &Session) -> Option<crate::sql::search_path::PathResolver> {
        session_path_resolver(&self.engine.catalog, s)
    }
}

impl Handle {
    /// Execute a statement, forwarding its progress lines to the client as NOTICEs while
    /// it runs (a view's backfill over large tables takes a while).
    async fn run<C>(
        &self,
        client: &mut C,
        session: &mut Session,
        parsed: &Parsed,
        params: Option<datafusion::common::ParamValues>,
    ) -> PgWireResult<Result<Output, WeirError>>
    where
        C: ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send,
        C::PortalStore: PortalStore,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // Postgres' statement names are one namespace: DEALLOCATE also removes a statement
        // the client prepared with Parse (psycopg 3 deallocates its own so)
        if let Statement::Deallocate(Some(name)) = &parsed.stmt
            && !session.prepared.contains_key(name)
            && client.portal_store().get_statement(name).is_some()
        {
            client.portal_store().rm_statement(name);
            return Ok(Ok(Output::Command("DEALLOCATE".into())));
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let notices = session.wants_notices();
        let interrupt = session.interrupt.clone();
        // a statement that only reads can be stopped anywhere; one that writes checks its
        // interrupts itself where stopping changes nothing
        let abandonable = abandonable(&parsed.stmt);
        let result = {
            let fut = self
                .engine
                .execute_with_notices(session, parsed, params, Some(tx));
            tokio::pin!(fut);
            loop {
                tokio::select! {
                    r = &mut fut => break r,
                    _ = interrupt.cancelled(), if abandonable => break Err(interrupt.error()),
                    Some(line) = rx.recv() => {
                        if notices {
                            client.send(notice(line)).await?;
                        }
                    }
                }
            }
        };
        if let Ok(Output::Command(tag)) = &result {
            crate::metrics::global().rows_written(tag);
        }
        let mut result = result;
        if !session.in_transaction && !session.implicit_transaction {
            // a statement outside a block, or COMMIT / ROLLBACK, ended a transaction (a
            // streamed result's when its rows end: an error may come while they stream)
            if !matches!(parsed.stmt, Statement::Begin(_)) {
                let committed = match &result {
                    Ok(Output::Rows { .. }) => None,
                    Ok(Output::TransactionEnd(tag)) => Some(*tag == "COMMIT"),
                    Ok(_) => Some(true),
                    Err(_) => Some(false),
                };
                match committed {
                    Some(committed) => crate::metrics::global().transaction(committed),
                    None => {
                        result = result.map(|o| match o {
                            Output::Rows { schema, stream } => Output::Rows {
                                schema,
                                stream: counted_transaction(stream),
                            },
                            o => o,
                        })
                    }
                }
            }
            self.engine.transaction_ended(session).await;
        }
        while let Ok(line) = rx.try_recv() {
            if notices {
                client.feed(notice(line)).await?;
            }
        }
        Ok(result)
    }

    fn session<C: ClientInfo>(&self, client: &C) -> Arc<Mutex<Session>> {
        // (taken first: the extensions' lock is held while the closure below runs)
        let interrupt = client
            .session_extensions()
            .get_or_insert_with(QueryCancel::default);
        let role = client
            .session_extensions()
            .get::<LoggedIn>()
            .map(|r| r.0)
            .unwrap_or(crate::catalog::roles::PUBLIC);
        let pid = client.pid_and_secret_key().0;
        let tls = self.tls_configured;
        client.session_extensions().get_or_insert_with(|| {
            let mut s = self.engine.session_for(role, pid);
            s.set_identity("ssl", if tls { "on" } else { "off" });
            // as the session's defaults: RESET goes back to them, as in Postgres
            for (name, value) in startup_settings(client.metadata()) {
                if name == "work_mem" {
                    // (it sizes the session's memory pool as it is set)
                    let _ = s.set(&name, &value);
                } else {
                    s.set_identity(&name, &value);
                }
            }
            // the session's temporary tables go when the connection does
            let engine = self.engine.clone();
            s.on_close = Some(Box::new(move |tables, undo| {
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(async move {
                        engine.rollback_detached(undo).await;
                        engine.drop_temp_tables(&tables).await
                    });
                }
            }));
            // the session's interrupts are the connection's cancel target
            s.interrupt = interrupt;
            s.register_sleep();
            // what the client was told at startup: later changes are reported
            let _ = s.take_setting_reports();
            Mutex::new(s)
        })
    }

    /// `pg_stat_activity`: the connection runs `query` (None: it finished what it ran),
    /// in the session's state and under its application_name.
    fn note_activity<C: ClientInfo>(
        &self,
        client: &C,
        session: &Session,
        query: Option<&Arc<str>>,
    ) {
        let (pid, _) = client.pid_and_secret_key();
        let mut connections = self.engine.catalog.connections.lock();
        let Some(c) = connections.get_mut(&pid) else {
            return;
        };
        let now = now_micros();
        let a = &mut c.activity;
        a.state = match (query.is_some(), session.tx_state()) {
            (true, _) => "active",
            (false, TxState::Idle) => "idle",
            (false, TxState::InBlock) => "idle in transaction",
            (false, TxState::Failed) => "idle in transaction (aborted)",
        };
        if let Some(q) = query {
            a.query = Some(q.clone());
            a.query_start = Some(now);
        }
        a.xact_start = match (session.in_transaction, a.xact_start, query.is_some()) {
            (true, Some(t), _) => Some(t),
            (true, None, _) | (false, _, true) => Some(now),
            (false, _, false) => None,
        };
        if let Some(name) = session.get("application_name")
            && name != a.application_name
        {
            a.application_name = name;
        }
        a.state_change = now;
    }

    /// The connection's cancel target, reset for a new query.
    fn begin_query<C: ClientInfo>(&self, client: &C) -> Arc<QueryCancel> {
        let c = client
            .session_extensions()
            .get_or_insert_with(QueryCancel::default);
        c.reset();
        c
    }

    /// `idle_in_transaction_session_timeout` of the connection's session, if set.
    pub fn idle_in_transaction_timeout<C: ClientInfo>(
        &self,
        client: &C,
    ) -> Option<std::time::Duration> {
        let s = client.session_extensions().get::<Mutex<Session>>()?;
        let s = s.try_lock().ok()?;
        s.duration("idle_in_transaction_session_timeout")
    }
}

/// The settings a client's startup message asks for, as (name, value) in the order given:
/// `application_name`, a `TimeZone` parameter (pgJDBC sends its JVM's zone; libpq
/// `PGTZ`) and `-c name=value` / `--name=value` in `options` (libpq's `PGOPTIONS`).
fn startup_requests(metadata: &HashMap<String, String>) -> Vec<(String, String)> {
    let mut asked: Vec<(String, String)> = Vec::new();
    for (k, v) in metadata {
        if k.eq_ignore_ascii_case("timezone") || k == "application_name" {
            asked.push((k.to_ascii_lowercase(), v.clone()));
        }
    }
    if let Some(options) = metadata.get("options") {
        let mut words = options.split_whitespace();
        while let Some(w) = words.next() {
            let pair = match w {
                "-c" => words.next(),
                w => w.strip_prefix("--").or_else(|| w.strip_prefix("-c")),
            };
            if let Some((name, value)) = pair.and_then(|p| p.split_once('=')) {
                asked.push((
                    crate::server::settings::normalize(&name.replace('-', "_")),
                    value.to_owned(),
                ));
            }
        }
    }
    asked
}

/// [`startup_requests`] checked as SET checks them, as (name, value to store); a value
/// Weir would refuse is left out (the default stays), with a warning in the log.
fn startup_settings(metadata: &HashMap<String, String>) -> Vec<(String, String)> {
    startup_requests(metadata)
        .into_iter()
        .filter_map(|(name, value)| {
            match crate::server::settings::validate(&name, &value, usize::MAX) {
                Ok(stored) => Some((name, stored)),
                Err(e) => {
                    warn!(setting = %name, value = %value, error = %e.message, "a startup setting is not taken; its default stays");
                    None
                }
            }
        })
        .collect()
}

/// Server parameters sent after authentication.
struct ServerParams {
    superuser: bool,
}

impl ServerParameterProvider for ServerParams {
    fn server_parameters<C: ClientInfo>(&self, client: &C) -> Option<HashMap<String, String>> {
        let mut p = HashMap::new();
        p.insert("server_version".into(), crate::server::PG_VERSION.into());
        p.insert("server_encoding".into(), "UTF8".into());
        p.insert("client_encoding".into(), "UTF8".into());
        p.insert("DateStyle".into(), "ISO, MDY".into());
        p.insert("integer_datetimes".into(), "on".into());
        p.insert("standard_conforming_strings".into(), "on".into());
        p.insert(
            "TimeZone".into(),
            // the zone the session takes (`startup_settings`, which logs the refused)
            startup_requests(client.metadata())
                .into_iter()
                .rev()
                .filter(|(n, _)| n == "timezone")
                .find_map(|(_, v)| crate::sql::time_zone::Zone::setting(&v))
                .map_or_else(|| "UTC".into(), |(_, shown)| shown),
        );
        p.insert("IntervalStyle".into(), "postgres".into());
        p.insert(
            "is_superuser".into(),
            if self.superuser { "on" } else { "off" }.into(),
        );

        p.insert("in_hot_standby".into(), "off".into());
        p.insert("default_transaction_read_only".into(), "off".into());
        p.insert(
            "application_name".into(),
            client
                .metadata()
                .get("application_name")
                .cloned()
                .unwrap_or_default(),
        );
        p.insert(
            "session_authorization".into(),
            client
                .metadata()
                .get(METADATA_USER)
                .cloned()
                .unwrap_or_else(|| crate::catalog::SUPERUSER_NAME.into()),
        );
        Some(p)
    }
}

/// The role a connection logged in as (session extension, set when login succeeds).
pub(crate) struct LoggedIn(pub u32);

/// Keeps a connection in `pg_stat_ssl` while it is open.
struct Listed {
    pid: i32,
    catalog: Arc<crate::catalog::Catalog>,
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.catalog.connections.lock().remove(&self.pid);
    }
}

/// Set on a connection whose login failed: its FATAL error was sent; close it.
pub(crate) struct CloseConnection;

/// A login waiting for the client's next authentication message.
enum LoginStep {
    SaslInitial,
    SaslFinal(Box<crate::catalog::scram::Exchange>),
    Password,
}

struct Login {
    user: String,
    method: crate::server::auth::Method,
    step: parking_lot::Mutex<Option<LoginStep>>,
}

fn fatal(code: &str, message: impl Into<String>) -> PgWireBackendMessage {
    PgWireBackendMessage::ErrorResponse(
        pgwire::error::ErrorInfo::new("FATAL".to_owned(), code.to_owned(), message.into()).into(),
    )
}

#[async_trait]
impl StartupHandler for Handle {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        use crate::error::sqlstate;
        use crate::server::auth::Method;
        use pgwire::messages::startup::Authentication;
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                let user = client
                    .metadata()
                    .get(METADATA_USER)
                    .cloned()
                    .unwrap_or_default();
                let database = client
                    .metadata()
                    .get("database")
                    .cloned()
                    .unwrap_or_else(|| user.clone());
                let peer = client.socket_addr().ip();
                let tls = client.is_secure();
                let encryption = if tls {
                    "SSL encryption"
                } else {
                    "no encryption"
                };
                let catalog = &self.engine.catalog;
                let Some((method, origin)) =
                    self.auth.method_for(catalog, peer, tls, &database, &user)
                else {
                    return self
                        .refuse(
                            client,
                            &user,
                            None,
                            sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                            format!("no pg_hba.conf entry for host \"{peer}\", user \"{user}\", database \"{database}\", {encryption}"),
                            "no rule matches",
                        )
                        .await;
                };
                match method {
                    Method::Reject => {
                        self.refuse(
                            client,
                            &user,
                            Some(method),
                            sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                            format!("pg_hba.conf rejects connection for host \"{peer}\", user \"{user}\", database \"{database}\", {encryption}"),
                            &format!("rejected by {origin}"),
                        )
                        .await
                    }
                    Method::Trust => match catalog.role(&user) {
                        Some(r) => self.logged_in(client, r).await,
                        None => {
                            self.refuse(
                                client,
                                &user,
                                Some(method),
                                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                                format!("role \"{user}\" does not exist"),
                                "no such role",
                            )
                            .await
                        }
                    },
                    Method::Cert => {
                        let cn = client
                            .session_extensions()
                            .get::<crate::server::tls::TlsSession>()
                            .and_then(|t| t.client_cn.clone());
                        match (cn, catalog.role(&user)) {
                            (None, _) => {
                                self.refuse(
                                    client,
                                    &user,
                                    Some(method),
                                    sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                                    "connection requires a valid client certificate".into(),
                                    "no client certificate",
                                )
                                .await
                            }
                            (Some(cn), Some(r)) if cn == user => self.logged_in(client, r).await,
                            (Some(cn), _) => {
                                self.refuse(
                                    client,
                                    &user,
                                    Some(method),
                                    sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                                    format!("certificate authentication failed for user \"{user}\""),
                                    &format!("certificate CN \"{cn}\""),
                                )
                                .await
                            }
                        }
                    }
                    Method::ScramSha256 | Method::Password => {
                        client.set_state(PgWireConnectionState::AuthenticationInProgress);
                        let (ask, step) = if method == Method::Password {
                            (Authentication::CleartextPassword, LoginStep::Password)
                        } else {
                            (
                                Authentication::SASL(vec!["SCRAM-SHA-256".to_owned()]),
                                LoginStep::SaslInitial,
                            )
                        };
                        client.session_extensions().insert(Login {
                            user,
                            method,
                            step: parking_lot::Mutex::new(Some(step)),
                        });
                        client
                            .send(PgWireBackendMessage::Authentication(ask))
                            .await?;
                        Ok(())
                    }
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(msg) => {
                let Some(login) = client.session_extensions().get::<Login>() else {
                    return Err(PgWireError::InvalidStartupMessage);
                };
                let step = login.step.lock().take();
                let user = login.user.clone();
                let role = self.engine.catalog.role(&user);
                let verifier = role
                    .as_ref()
                    .and_then(|r| r.password.as_deref())
                    .and_then(crate::catalog::scram::Verifier::parse);
                let wrong = format!("password authentication failed for user \"{user}\"");
                match step {
                    Some(LoginStep::SaslInitial) => {
                        let first = msg.into_sasl_initial_response()?;
                        if first.auth_method != "SCRAM-SHA-256" {
                            return self
                                .refuse(
                                    client,
                                    &user,
                                    Some(login.method),
                                    sqlstate::INVALID_PASSWORD,
                                    wrong,
                                    &format!("unsupported SASL mechanism {}", first.auth_method),
                                )
                                .await;
                        }
                        let data = first.data.unwrap_or_default();
                        let started = match verifier {
                            Some(v) => crate::catalog::scram::Exchange::start(v, &data),
                            // unknown role or no password: the same exchange, failing at the end
                            None => crate::catalog::scram::Exchange::mock(
                                &user,
                                &self.mock_secret,
                                &data,
                            ),
                        };
                        match started {
                            Ok((exchange, server_first)) => {
                                *login.step.lock() = Some(LoginStep::SaslFinal(Box::new(exchange)));
                                client
                                    .send(PgWireBackendMessage::Authentication(
                                        Authentication::SASLContinue(
                                            server_first.into_bytes().into(),
                                        ),
                                    ))
                                    .await?;
                                Ok(())
                            }
                            Err(e) => {
                                self.refuse(
                                    client,
                                    &user,
                                    Some(login.method),
                                    sqlstate::INVALID_PASSWORD,
                                    wrong,
                                    &format!("{e:?}"),
                                )
                                .await
                            }
                        }
                    }
                    Some(LoginStep::SaslFinal(exchange)) => {
                        let fin = msg.into_sasl_response()?;
                        match (exchange.finish(&fin.data), role) {
                            (Ok(server_final), Some(r)) => {
                                client
                                    .send(PgWireBackendMessage::Authentication(
                                        Authentication::SASLFinal(server_final.into_bytes().into()),
                                    ))
                                    .await?;
                                self.logged_in(client, r).await
                            }
                            (Err(e), role) => {
                                let why = match (&e, &role) {
                                    (_, None) => "no such role".to_owned(),
                                    (_, Some(r)) if r.password.is_none() => {
                                        "the role has no password".to_owned()
                                    }
                                    (crate::catalog::scram::ScramError::WrongProof, _) => {
                                        "wrong password".to_owned()
                                    }
                                    (other, _) => format!("{other:?}"),
                                };
                                self.refuse(
                                    client,
                                    &user,
                                    Some(login.method),
                                    sqlstate::INVALID_PASSWORD,
                                    wrong,
                                    &why,
                                )
                                .await
                            }
                            (Ok(_), None) => {
                                self.refuse(
                                    client,
                                    &user,
                                    Some(login.method),
                                    sqlstate::INVALID_PASSWORD,
                                    wrong,
                                    "no such role",
                                )
                                .await
                            }
                        }
                    }
                    Some(LoginStep::Password) => {
                        let given = msg.into_password()?;
                        match (verifier, role) {
                            (Some(v), Some(r)) if v.matches(&given.password) => {
                                self.logged_in(client, r).await
                            }
                            (_, role) => {
                                let why = if role.is_none() {
                                    "no such role"
                                } else {
                                    "wrong password"
                                };
                                self.refuse(
                                    client,
                                    &user,
                                    Some(login.method),
                                    sqlstate::INVALID_PASSWORD,
                                    wrong,
                                    why,
                                )
                                .await
                            }
                        }
                    }
                    None => Err(PgWireError::InvalidStartupMessage),
                }
            }
            _ => Ok(()),
        }
    }
}

impl Handle {
    /// Refuse a login: logged (never with the password), answered after the failed-login
    /// delay with a FATAL error, and the connection is closed.
    async fn refuse<C>(
        &self,
        client: &mut C,
        user: &str,
        method: Option<crate::server::auth::Method>,
        code: &'static str,
        message: String,
        why: &str,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        warn!(
            peer = %client.socket_addr(),
            user,
            method = method.map(|m| m.name()).unwrap_or("none"),
            reason = why,
            "login failed"
        );
        // failures from one address wait their turn: guessing over many connections at
        // once from one address is no faster than one after another
        let turn = self.failures.turn(client.socket_addr().ip());
        {
            let _held = turn.lock().await;
            tokio::time::sleep(crate::server::auth::FAILED_LOGIN_DELAY).await;
        }
        self.failures.done(client.socket_addr().ip(), turn);
        client.send(fatal(code, message)).await?;
        client.session_extensions().insert(CloseConnection);
        Ok(())
    }

    /// The client proved it is `role`: finish the startup.
    async fn logged_in<C>(
        &self,
        client: &mut C,
        role: crate::catalog::roles::RoleDesc,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !role.login {
            let method = client.session_extensions().get::<Login>().map(|l| l.method);
            return self
                .refuse(
                    client,
                    &role.name,
                    method,
                    crate::error::sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                    format!("role \"{}\" is not permitted to log in", role.name),
                    "NOLOGIN role",
                )
                .await;
        }
        client.session_extensions().insert(LoggedIn(role.oid));
        let (pid, key) = self.pids.generate(client);
        client.set_pid_and_secret_key(pid, key.clone());
        let cancel = client
            .session_extensions()
            .get_or_insert_with(QueryCancel::default);
        let ckey = (pid, key.to_bytes());
        self.cancels.map.lock().insert(ckey.clone(), cancel.clone());
        client.session_extensions().insert(CancelGuard {
            key: ckey,
            registry: self.cancels.clone(),
        });
        let (handle, guard) = self.connections.register(pid, key);
        client
            .session_extensions()
            .insert::<Arc<ConnectionHandle>>(handle);
        client.session_extensions().insert::<ConnectionGuard>(guard);
        let tls = client
            .session_extensions()
            .get::<crate::server::tls::TlsSession>()
            .map(|t| t.info.clone());
        let now = now_micros();
        let application_name = client
            .metadata()
            .get("application_name")
            .cloned()
            .unwrap_or_default();
        self.engine.catalog.connections.lock().insert(
            pid,
            crate::catalog::ConnectionInfo {
                signals: Some(cancel.clone()),
                user: role.name.clone(),
                tls,
                client: Some(client.socket_addr()),
                server: client
                    .session_extensions()
                    .get::<crate::server::connection::LocalAddr>()
                    .map(|l| l.0),
                backend_start: now,
                activity: crate::catalog::Activity {
                    state: "idle",
                    query: None,
                    application_name,
                    query_start: None,
                    xact_start: None,
                    state_change: now,
                },
            },
        );
        client.session_extensions().insert(Listed {
            pid,
            catalog: self.engine.catalog.clone(),
        });
        finish_authentication(
            client,
            &ServerParams {
                superuser: role.superuser,
            },
        )
        .await?;
        info!(
            peer = %client.socket_addr(),
            user = %role.name,
            database = client.metadata().get("database").map(String::as_str).unwrap_or(""),
            ssl = client.is_secure(),
            pid,
            "session started"
        );
        Ok(())
    }
}

/// Turn an engine output into a protocol response. `collect` makes a result set complete
/// before returning (for all but the last statement of a multi-statement query).
/// Every result streams to the client as it is produced, also in a message of several
/// statements (nothing is collected first).
async fn respond(
    output: Output,
    format: &Format,
    zone: crate::sql::time_zone::Zone,
    cancel: Arc<QueryCancel>,
    timer: Option<crate::server::session::TimeoutGuard>,
    place: Place,
) -> Result<Response, WeirError> {
    Ok(match output {
        Output::Rows { schema, stream } => {
            let fields = Arc::new(field_infos(&schema, |i| format.format_for(i)));
            let plans = column_plans(&schema, &fields, zone);
            let stream = cancellable(stream, cancel, timer);
            let rows = stream.flat_map(move |r| {
                let items: Vec<PgWireResult<_>> = match r {
                    Ok(b) => match encode_batch(&b, &plans) {
                        Ok(rows) => {
                            // (rows returned, for pg_stat_database: one count per batch)
                            crate::metrics::global().rows("returned", rows.len() as u64);
                            rows.into_iter().map(Ok).collect()
                        }
                        Err(e) => vec![Err(e.into_pgwire())],
                    },
                    Err(e) => vec![Err(place.apply(e).into_pgwire())],
                };
                stream::iter(items)
            });
            Response::Query(QueryResponse::new(fields, rows))
        }
        Output::Batches {
            schema,
            batches,
            tag,
        } => {
            let fields = Arc::new(field_infos(&schema, |i| format.format_for(i)));
            let plans = column_plans(&schema, &fields, zone);
            let mut rows = Vec::new();
            for b in &batches {
                rows.extend(encode_batch(b, &plans)?.into_iter().map(Ok));
            }
            crate::metrics::global().rows("returned", rows.len() as u64);
            let mut q = QueryResponse::new(fields, stream::iter(rows));
            q.set_command_tag(tag);
            Response::Query(q)
        }
        Output::Command(tag) => Response::Execution(Tag::new(&tag)),
        Output::TransactionStart(tag) => Response::TransactionStart(Tag::new(tag)),
        Output::TransactionEnd(tag) => Response::TransactionEnd(Tag::new(tag)),
        Output::SetVariable { .. } => Response::Execution(Tag::new("SET")),
        Output::Reset => Response::Execution(Tag::new("RESET")),
        Output::Subscribe(sub) => {
            let schema = sub.schema();
            let fields = Arc::new(field_infos(&schema, |i| format.format_for(i)));
            let plans = column_plans(&schema, &fields, zone);
            let mut q = QueryResponse::new(fields, subscribe_rows(sub, plans, cancel));
            q.set_command_tag("SUBSCRIBE");
            Response::Query(q)
        }
        Output::CopyIn { columns } => {
            Response::CopyIn(CopyResponse::new(0, columns, stream::empty()))
        }
        Output::CopyOut {
            schema,
            rows,
            options,
        } => {
            let writer = CopyWriter::new(&schema, options, zone);
            let columns = writer.columns();
            Response::CopyOut(CopyResponse::new(
                0,
                columns,
                copy_data(rows, writer, cancel, timer),
            ))
        }
    })
}

/// A notice line for the client: NOTICE, or WARNING (01000) when it starts `WARNING: `;
/// what follows a `\nDETAIL: ` is its detail.
fn notice(line: String) -> PgWireBackendMessage {
    let (severity, code, text) = match line.strip_prefix("WARNING: ") {
        Some(rest) => ("WARNING", "01000", rest.to_owned()),
        None => ("NOTICE", "00000", line),
    };
    let (text, detail) = match text.split_once("\nDETAIL: ") {
        Some((t, d)) => (t.to_owned(), Some(d.to_owned())),
        None => (text, None),
    };
    let mut info = pgwire::error::ErrorInfo::new(severity.into(), code.into(), text);
    info.detail = detail;
    PgWireBackendMessage::NoticeResponse(info.into())
}

/// A result stream that ends with 57014 when the query is canceled or times out; `timer`
/// (the statement timeout) lives as long as the stream.
pub(crate) fn cancellable(
    stream: datafusion::execution::SendableRecordBatchStream,
    cancel: Arc<QueryCancel>,
    timer: Option<crate::server::session::TimeoutGuard>,
) -> impl futures::Stream<Item = Result<datafusion::arrow::record_batch::RecordBatch, WeirError>>
+ Send
+ 'static {
    stream::unfold(Some((stream, timer)), move |state| {
        let cancel = cancel.clone();
        async move {
            let (mut s, timer) = state?;
            tokio::select! {
                _ = cancel.cancelled() => Some((Err(cancel.error()), None)),
                item = s.next() => item.map(|r| (r.map_err(WeirError::from), Some((s, timer)))),
            }
        }
    })
}

/// Statements that change nothing, so that stopping them anywhere (a cancel, a statement
/// timeout) leaves nothing half done.
fn abandonable(stmt: &Statement) -> bool {
    match stmt {
        Statement::Query(_)
        | Statement::Flush
        | Statement::Subscribe(_)
        | Statement::Fetch(_)
        | Statement::Declare(_)
        | Statement::ShowVariable(_)
        | Statement::ShowRelations(_)
        | Statement::ExplainView(_) => true,
        Statement::Copy(c) => matches!(c.as_ref(), crate::sql::client_stmts::Copy::To { .. }),
        _ => false,
    }
}

/// Refuse everything but ending the block (or rolling back to a savepoint) after an error
/// inside a transaction block, as Postgres does. An error pgwire itself reported (a bad
/// Bind, say) also aborts the block.
fn check_aborted<C: ClientInfo>(
    client: &C,
    session: &mut Session,
    stmt: &Statement,
) -> Result<(), WeirError> {
    use pgwire::messages::response::TransactionStatus;
    if session.in_transaction && matches!(client.transaction_status(), TransactionStatus::Error) {
        session.aborted = true;
    }
    if session.aborted
        && !matches!(
            stmt,
            Statement::Rollback | Statement::Commit | Statement::RollbackTo(_)
        )
    {
        return Err(WeirError::new(
            "25P02",
            "current transaction is aborted, commands ignored until end of transaction block",
        ));
    }
    Ok(())
}

/// Now, in microseconds since the epoch (`pg_stat_activity`'s times).
fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

fn wire_status(s: TxState) -> TransactionStatus {
    match s {
        TxState::Idle => TransactionStatus::Idle,
        TxState::InBlock => TransactionStatus::Transaction,
        TxState::Failed => TransactionStatus::Error,
    }
}

/// SUBSCRIBE and `COPY (SUBSCRIBE ...) TO STDOUT`: results that never end on their own.
fn is_endless(stmt: &Statement) -> bool {
    match stmt {
        Statement::Subscribe(_) => true,
        Statement::Copy(c) => matches!(
            c.as_ref(),
            crate::sql::client_stmts::Copy::To {
                source: crate::sql::client_stmts::CopySource::Subscribe(_),
                ..
            }
        ),
        _ => false,
    }
}

/// The statement timeout for a statement: none for a subscription, which runs until it
/// is canceled (a session-wide timeout must not end every SUBSCRIBE).
fn statement_timeout(session: &Session, stmt: &Statement) -> Option<std::time::Duration> {
    if is_endless(stmt) {
        None
    } else {
        session.duration("statement_timeout")
    }
}

/// The settings clients track that changed since the client was last told, to report with
/// ParameterStatus.
fn reported_settings(session: &mut Session) -> Vec<ParameterStatus> {
    session
        .take_setting_reports()
        .into_iter()
        .map(|(n, v)| ParameterStatus::new(n, v))
        .collect()
}

/// A notification as the protocol's NotificationResponse.
pub fn notification_message(n: crate::server::notifications::Notification) -> PgWireBackendMessage {
    PgWireBackendMessage::NotificationResponse(
        pgwire::messages::response::NotificationResponse::new(n.pid, n.channel, n.payload),
    )
}

#[async_trait]
impl SimpleQueryHandler for Handle {
    /// The simple query protocol, handled whole here rather than by pgwire's default: each
    /// statement's response goes out as it is produced (a SUBSCRIBE never ends), COPY FROM
    /// STDIN hands the connection to the copy handler, and ReadyForQuery reports the
    /// session's own transaction state (pgwire's cannot go from failed back to in-block,
    /// which `ROLLBACK TO SAVEPOINT` needs).
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let copying = self.simple_query(client, &query.query).await?;
        if copying {
            client.set_state(PgWireConnectionState::CopyInProgress(false));
            return Ok(());
        }
        client.set_state(PgWireConnectionState::ReadyForQuery);
        self.send_late_setting_reports(client).await?;
        let status = self.tx_status(client).await;
        client.set_transaction_status(status);
        self.send_notifications(client, status).await?;
        send_ready_for_query(client, status).await
    }

    /// Not called: `on_query` above runs simple queries.
    async fn do_query<C>(&self, _client: &mut C, _query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        Err(err(WeirError::internal(
            "simple queries are run by Handle::on_query",
        )))
    }
}

impl Handle {
    /// ParameterStatus for the tracked settings changed while a statement's rows went out
    /// (`SELECT set_config('TimeZone', ...)` runs as its rows are made, after the report
    /// that follows the statement): before ReadyForQuery, where Postgres reports changes.
    async fn send_late_setting_reports<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(client);
        let mut session = session.lock().await;
        for status in reported_settings(&mut session) {
            client
                .feed(PgWireBackendMessage::ParameterStatus(status))
                .await?;
        }
        Ok(())
    }

    /// The notifications that reached the session (`LISTEN`), sent before a ReadyForQuery
    /// outside a transaction block (inside one they wait for its end, as in Postgres).
    async fn send_notifications<C>(
        &self,
        client: &mut C,
        status: TransactionStatus,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(status, TransactionStatus::Idle) {
            return Ok(());
        }
        let Some(inbox) = self.inbox(client) else {
            return Ok(());
        };
        for n in inbox.take() {
            client.feed(notification_message(n)).await?;
        }
        Ok(())
    }

    /// The session's inbox of notifications, when the session exists and is not busy.
    pub fn inbox<C: ClientInfo>(
        &self,
        client: &C,
    ) -> Option<Arc<crate::server::notifications::Inbox>> {
        let s = client.session_extensions().get::<Mutex<Session>>()?;
        let s = s.try_lock().ok()?;
        Some(s.inbox.clone())
    }

    /// The transaction state to report in ReadyForQuery.
    async fn tx_status<C: ClientInfo>(&self, client: &C) -> TransactionStatus {
        let session = self.session(client);
        let session = session.lock().await;
        wire_status(session.tx_state())
    }

    /// Run the statements of a simple query message, sending each response as it comes.
    /// Returns `true` when the last one started a COPY FROM STDIN.
    async fn simple_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<bool>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        debug!(query = %crate::sql::security::loggable(query), "simple query");
        let (memory, path) = {
            let s = self.session(client);
            let s = s.lock().await;
            (s.memory.limit(), self.path_resolver(&s))
        };
        let statements = match parse_with_path(query, memory, path) {
            Ok(s) => s,
            Err(e) => {
                self.note_failure(client).await;
                send_simple_response(
                    client,
                    Response::Error(Box::new(e.into_error_info())),
                    false,
                )
                .await?;
                return Ok(false);
            }
        };
        if statements.is_empty() {
            send_simple_response(client, Response::EmptyQuery, false).await?;
            return Ok(false);
        }
        let session = self.session(client);
        let mut session = session.lock().await;
        let cancel = self.begin_query(client);
        let last = statements.len() - 1;
        // several statements in one message run as one implicit transaction, as in Postgres
        session.implicit_transaction = statements.len() > 1;
        let whole: Option<Arc<str>> = (statements.len() > 1).then(|| query.into());
        let mut copying = false;
        // (a message of several statements is one transaction for pg_stat_database)
        let mut failed = false;
        let parsed_path = session.get("search_path");
        for (i, parsed) in statements.iter().enumerate() {
            // a statement after one that set the search path (or made a schema on it) is
            // read again with the path as it now is, as Postgres looks names up as each
            // statement runs
            let again;
            let parsed = match self.path_resolver(&session) {
                path if i > 0
                    && !matches!(parsed.stmt, Statement::BulkInsert(_))
                    && (session.get("search_path") != parsed_path
                        || (path.is_some() && changes_names(&statements[..i]))) =>
                {
                    match parse_with_path(&parsed.text, memory, path) {
                        Ok(mut p) if p.len() == 1 => {
                            let mut p = p.remove(0);
                            p.offset = parsed.offset;
                            again = p;
                            &again
                        }
                        _ => parsed,
                    }
                }
                _ => parsed,
            };
            // statement_timeout applies to each statement of the message
            if cancel.reason() == Some(crate::server::session::InterruptReason::StatementTimeout) {
                cancel.reset();
            }
            let timer = cancel.arm(statement_timeout(&session, &parsed.stmt));
            // (Postgres shows the message's whole text)
            let text = match &whole {
                Some(w) => w,
                None => &parsed.text,
            };
            self.note_activity(client, &session, Some(text));
            let result = match check_aborted(client, &mut session, &parsed.stmt) {
                Err(e) => Err(e),
                Ok(())
                    if i != last
                        && matches!(&parsed.stmt, Statement::Copy(c) if matches!(c.as_ref(), crate::sql::client_stmts::Copy::From { .. })) =>
                {
                    Err(WeirError::not_supported(
                        "COPY FROM STDIN must be the last statement of a multi-statement query",
                    ))
                }
                Ok(()) => {
                    let result = self.run(client, &mut session, parsed, None).await?;
                    for status in reported_settings(&mut session) {
                        client
                            .feed(PgWireBackendMessage::ParameterStatus(status))
                            .await?;
                    }
                    result
                }
            };
            let result = match result {
                Ok(output) => {
                    respond(
                        output,
                        &Format::UnifiedText,
                        session.time_zone(),
                        cancel.clone(),
                        None,
                        Place::of(parsed),
                    )
                    .await
                }
                Err(e) => Err(e),
            };
            // a statement that failed while its rows went out has sent its error already
            let result = match result {
                Ok(r) => {
                    let endless = is_endless(&parsed.stmt);
                    match send_simple_response(client, r, endless).await? {
                        Sent::Done => Ok(()),
                        Sent::CopyIn => {
                            copying = true;
                            // the timeout runs on while the data comes
                            session.statement_timer = Some(timer);
                            Ok(())
                        }
                        Sent::Failed(e) => Err((e, true)),
                    }
                }
                Err(e) => Err((e, false)),
            };
            match result {
                Ok(()) => {}
                Err((e, sent)) => {
                    failed = true;
                    debug!(error = %e, statement = %crate::sql::security::loggable(&parsed.text), "statement failed");
                    let mut e = placed(e, parsed);
                    if session.in_transaction {
                        session.aborted = true;
                    } else if let Err(undo_err) = self.engine.rollback(&mut session).await {
                        e = e.with_detail(format!(
                            "undoing the earlier statements of this query failed: {undo_err}"
                        ));
                    }
                    if !sent {
                        send_simple_response(
                            client,
                            Response::Error(Box::new(e.into_error_info())),
                            false,
                        )
                        .await?;
                    }
                    break;
                }
            }
        }
        session.implicit_transaction = false;
        if !session.in_transaction && !copying {
            if statements.len() > 1 {
                crate::metrics::global().transaction(!failed);
            }
            self.engine.commit_undo(&mut session);
            self.engine.transaction_ended(&mut session).await;
        }
        if !copying {
            self.note_activity(client, &session, None);
        }
        Ok(copying)
    }

    /// A statement failed before it reached the session (a syntax error): inside a block,
    /// the block is now aborted.
    async fn note_failure<C: ClientInfo>(&self, client: &C) {
        let session = self.session(client);
        let mut session = session.lock().await;
        if session.in_transaction {
            session.aborted = true;
        }
    }
}

#[async_trait]
impl CopyHandler for Handle {
    async fn on_copy_data<C>(&self, client: &mut C, data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(client);
        let mut session = session.lock().await;
        let interrupted = session.interrupt.check().err();
        if let Some(copy) = session.copy_in.as_mut()
            && copy.error.is_none()
        {
            // a cancel or statement timeout while the data comes: the rest is read and
            // dropped, and CopyDone reports the error (nothing is applied)
            if let Some(e) = interrupted {
                copy.error = Some(e);
            } else if let Err(e) = copy.feed(&data.data) {
                copy.error = Some(e);
            }
        }
        // rows past the chunk size go into the table now (a COPY larger than memory)
        if let Err(e) = self.engine.copy_in_apply(&mut session, false).await
            && let Some(copy) = session.copy_in.as_mut()
        {
            copy.error = Some(e);
        }
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(client);
        let mut session = session.lock().await;
        let result = self.engine.copy_in_done(&mut session).await;
        session.statement_timer = None;
        if !session.in_transaction {
            self.engine.commit_undo(&mut session);
        }
        match result {
            Ok(tag) => {
                client
                    .feed(PgWireBackendMessage::CommandComplete(Tag::new(&tag).into()))
                    .await?;
                client.set_transaction_status(wire_status(session.tx_state()));
                Ok(())
            }
            Err(e) => {
                if session.in_transaction {
                    session.aborted = true;
                }
                Err(err(e))
            }
        }
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(client);
        let mut session = session.lock().await;
        if let Err(e) = self.engine.copy_in_abort(&mut session).await {
            warn!(error = %e, "undoing a failed COPY's applied rows failed");
        }
        session.statement_timer = None;
        if session.in_transaction {
            session.aborted = true;
        }
        err(WeirError::new(
            "57014",
            format!("COPY from stdin failed: {}", fail.message),
        ))
    }
}

/// Parses statements for the extended protocol; planning happens at Describe and Execute,
/// where the session is at hand.
pub struct WeirQueryParser {
    /// `--query-memory-limit`, for a session that has not set `work_mem`.
    default_memory: usize,
    /// For the sessions' search paths.
    catalog: Arc<crate::catalog::Catalog>,
}

impl Debug for WeirQueryParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WeirQueryParser")
    }
}

impl WeirQueryParser {
    fn path_resolver(&self, s: &Session) -> Option<crate::sql::search_path::PathResolver> {
        session_path_resolver(&self.catalog, s)
    }
}

/// Whether one of these statements makes or drops a schema or relation, which an
/// unqualified name of a later one may then reach along the search path.
fn changes_names(before: &[Parsed]) -> bool {
    before.iter().any(|p| {
        matches!(
            p.stmt,
            Statement::CreateSchema { .. }
                | Statement::DropSchema { .. }
                | Statement::CreateTable(_)
                | Statement::CreateTableAs(_)
                | Statement::CreateView(_)
                | Statement::CreatePlainView(_)
                | Statement::CreateSequence(_)
                | Statement::CreateEnumType { .. }
                | Statement::CreateDomain(_)
                | Statement::Drop(_)
        )
    })
}

/// What applies a session's `search_path` to the statements it sends (None: the default
/// path, public).
fn session_path_resolver(
    catalog: &Arc<crate::catalog::Catalog>,
    s: &Session,
) -> Option<crate::sql::search_path::PathResolver> {
    let path = s.get("search_path")?;
    let user = catalog
        .role_name(s.identity.read().session_user)
        .unwrap_or_default();
    crate::catalog::schemas::path_resolver(catalog, &path, &user)
}

/// [`parse_within`] applying a session's search path (when it has one of its own).
fn parse_with_path(
    sql: &str,
    memory: usize,
    path: Option<crate::sql::search_path::PathResolver>,
) -> crate::error::Result<Vec<Parsed>> {
    match path {
        Some(p) => crate::sql::search_path::with_path(p, || parse_within(sql, memory)),
        None => parse_within(sql, memory),
    }
}

#[async_trait]
impl QueryParser for WeirQueryParser {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        // the session's work_mem bounds what parsing may take
        let (memory, path) = client
            .session_extensions()
            .get::<Mutex<Session>>()
            .and_then(|s| {
                s.try_lock()
                    .ok()
                    .map(|s| (s.memory.limit(), self.path_resolver(&s)))
            })
            .unwrap_or((self.default_memory, None));
        let mut stmts = parse_with_path(sql, memory, path).map_err(err)?;
        match stmts.len() {
            0 => Ok(None),
            1 => {
                let mut parsed = stmts.remove(0);
                params::type_array_placeholders(&mut parsed.stmt, types);
                Ok(Some(Prepared { parsed }))
            }
            _ => Err(err(WeirError::syntax(
                "cannot insert multiple commands into a prepared statement",
            ))),
        }
    }

    fn get_parameter_types(&self, _stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        Ok(vec![])
    }

    fn get_result_schema(
        &self,
        _stmt: &Prepared,
        _column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(vec![])
    }
}

impl Handle {
    /// Parameter types (client's where given, else inferred) and result fields.
    async fn describe(
        &self,
        session: &Session,
        stmt: &StoredStatement<Prepared>,
        format: &Format,
    ) -> Result<(Vec<Type>, Vec<FieldInfo>, Vec<Option<FieldRef>>), WeirError> {
        let (inferred, schema) = self
            .engine
            .describe(session, &stmt.statement.parsed)
            .await?;
        let n = inferred.len().max(stmt.parameter_types.len());
        let types = (0..n)
            .map(|i| {
                stmt.parameter_types
                    .get(i)
                    .cloned()
                    .flatten()
                    .filter(|t| t.oid() != 0)
                    .unwrap_or_else(|| {
                        params::pg_type_of_field(inferred.get(i).and_then(|t| t.as_deref()))
                    })
            })
            .collect();
        let fields = match schema {
            Some(s) => field_infos(&s, |i| format.format_for(i)),
            None => vec![],
        };
        Ok((types, fields, inferred))
    }
}

#[async_trait]
impl ExtendedQueryHandler for Handle {
    type Statement = Prepared;
    type QueryParser = WeirQueryParser;

    fn query_parser(&self) -> Arc<WeirQueryParser> {
        self.parser.clone()
    }

    /// pgwire's Sync, with the session's notifications sent before its ReadyForQuery.
    async fn on_sync<C>(
        &self,
        client: &mut C,
        _message: pgwire::messages::extendedquery::Sync,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        client.portal_store().rm_portal(DEFAULT_NAME);
        self.send_late_setting_reports(client).await?;
        let status = client.transaction_status();
        self.send_notifications(client, status).await?;
        client
            .send(PgWireBackendMessage::ReadyForQuery(
                pgwire::messages::response::ReadyForQuery::new(status),
            ))
            .await?;
        client.flush().await?;
        Ok(())
    }

    /// Describe, where a portal can also be a cursor DECLAREd in SQL: Postgres makes each
    /// cursor a protocol-level portal of that name (psycopg's server-side cursors describe
    /// it to learn the columns, then FETCH through SQL).
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if message.target_type == b'P'
            && let Some(name) = message.name.as_deref()
            && client.portal_store().get_portal(name).is_none()
        {
            let session = self.session(client);
            let schema = session
                .lock()
                .await
                .cursors
                .get(name)
                .map(|c| c.schema.clone());
            if let Some(schema) = schema {
                let fields = field_infos(&schema, |_| pgwire::api::results::FieldFormat::Text);
                return pgwire::api::query::send_describe_response(
                    client,
                    &DescribePortalResponse::new(fields),
                )
                .await;
            }
        }
        self._on_describe(client, message).await
    }

    /// pgwire's Execute, except that a SUBSCRIBE run without a row limit streams here
    /// (flushing each change as it comes; pgwire's would buffer them), and the transaction
    /// state afterwards is the session's (so `ROLLBACK TO SAVEPOINT` leaves the failed
    /// state).
    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let subscribe = match client.portal_store().get_portal(name) {
            Some(Entry::Value(p))
                if message.max_rows == 0 && is_endless(&p.statement.statement.parsed.stmt) =>
            {
                Some(p)
            }
            _ => None,
        };
        if let Some(portal) = subscribe
            && matches!(client.state(), PgWireConnectionState::ReadyForQuery)
        {
            client.set_state(PgWireConnectionState::QueryInProgress);
            let resp = ExtendedQueryHandler::do_query(self, client, &portal, 0).await;
            client.set_state(PgWireConnectionState::ReadyForQuery);
            match resp? {
                Response::Query(q) => {
                    let mut rows = q.data_rows;
                    let n = send_flushing(client, &mut rows, PgWireBackendMessage::DataRow, true)
                        .await?;
                    client
                        .send(PgWireBackendMessage::CommandComplete(
                            Tag::new("SUBSCRIBE").with_rows(n).into(),
                        ))
                        .await?;
                }
                Response::CopyOut(c) => {
                    crate::server::streaming::send_copy_out(client, c, true).await?;
                    client.flush().await?;
                }
                other => {
                    send_simple_response(client, other, false).await?;
                }
            }
            return Ok(());
        }
        let result = self._on_execute(client, message).await;
        if result.is_ok() {
            let status = self.tx_status(client).await;
            client.set_transaction_status(status);
        }
        result
    }

    async fn do_describe_statement<C>(
        &self,
        client: &mut C,
        stmt: &StoredStatement<Prepared>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(client);
        let session = session.lock().await;
        let (types, fields, _) = self
            .describe(&session, stmt, &Format::UnifiedText)
            .await
            .map_err(|e| err(placed(e, &stmt.statement.parsed)))?;
        Ok(DescribeStatementResponse::new(types, fields))
    }

    async fn do_describe_portal<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = self.session(client);
        let session = session.lock().await;
        let (_, fields, _) = self
            .describe(&session, &portal.statement, &portal.result_column_format)
            .await
            .map_err(|e| err(placed(e, &portal.statement.statement.parsed)))?;
        Ok(DescribePortalResponse::new(fields))
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let parsed = &portal.statement.statement.parsed;
        debug!(query = %crate::sql::security::loggable(&parsed.text), "extended query");
        let cancel = self.begin_query(client);
        let session = self.session(client);
        let mut session = session.lock().await;
        let timer = cancel.arm(statement_timeout(
            &session,
            &portal.statement.statement.parsed.stmt,
        ));
        self.note_activity(client, &session, Some(&parsed.text));
        let result = self
            .execute_portal(client, &mut session, portal, cancel, timer)
            .await;
        if matches!(&result, Ok(Err(_))) && session.in_transaction {
            session.aborted = true;
        }
        self.note_activity(client, &session, None);
        let result = result?;
        result.map_err(|e| err(placed(e, parsed)))
    }
}

impl Handle {
    async fn execute_portal<C>(
        &self,
        client: &mut C,
        session: &mut Session,
        portal: &Portal<Prepared>,
        cancel: Arc<QueryCancel>,
        timer: crate::server::session::TimeoutGuard,
    ) -> PgWireResult<Result<Response, WeirError>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let parsed = &portal.statement.statement.parsed;
        if let Err(e) = check_aborted(client, session, &parsed.stmt) {
            return Ok(Err(e));
        }
        let params = if portal.parameters.is_empty() {
            None
        } else {
            let inferred = match self
                .describe(session, &portal.statement, &portal.result_column_format)
                .await
            {
                Ok((_, _, inferred)) => inferred,
                Err(e) => return Ok(Err(e)),
            };
            let inferred: Vec<_> = inferred
                .iter()
                .map(|f| f.as_ref().map(|f| f.as_ref().clone()))
                .collect();
            match params::decode(
                &portal.parameters,
                &portal.statement.parameter_types,
                &inferred,
                |i| portal.parameter_format.is_binary(i),
                &session.time_zone(),
            ) {
                Ok(p) => Some(p),
                Err(e) => return Ok(Err(e)),
            }
        };
        let output = self.run(client, session, parsed, params).await?;
        for status in reported_settings(session) {
            client
                .feed(PgWireBackendMessage::ParameterStatus(status))
                .await?;
        }
        let output = match output {
            Ok(o) => o,
            Err(e) => return Ok(Err(e)),
        };
        if matches!(output, Output::CopyIn { .. }) {
            session.statement_timer = Some(timer);
            return Ok(respond(
                output,
                &portal.result_column_format,
                session.time_zone(),
                cancel,
                None,
                Place::of(parsed),
            )
            .await);
        }
        // the timeout covers sending the rows, which pgwire does after this returns
        Ok(respond(
            output,
            &portal.result_column_format,
            session.time_zone(),
            cancel,
            Some(timer),
            Place::of(parsed),
        )
        .await)
    }
}

/// A streamed result of a statement outside a block: its transaction is counted when its
/// rows end (committed) or fail (rolled back); one dropped part-way is not counted.
fn counted_transaction(
    stream: datafusion::execution::SendableRecordBatchStream,
) -> datafusion::execution::SendableRecordBatchStream {
    use std::sync::atomic::{AtomicBool, Ordering};
    let schema = stream.schema();
    let failed = Arc::new(AtomicBool::new(false));
    let seen = failed.clone();
    let rows = stream.inspect(move |r| {
        if r.is_err() && !seen.swap(true, Ordering::Relaxed) {
            crate::metrics::global().transaction(false);
        }
    });
    let end = stream::once(async move {
        if !failed.load(Ordering::Relaxed) {
            crate::metrics::global().transaction(true);
        }
    })
    .filter_map(|_| async { None });
    Box::pin(
        datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, rows.chain(end)),
    )
}
