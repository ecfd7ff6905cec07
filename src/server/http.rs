//! The HTTP port (`--http-listen`, default `127.0.0.1:9348`, `off` to disable), on axum
//! over the tokio runtime the SQL port runs on:
//!
//! - `/metrics`: Prometheus metrics in the OpenMetrics text format (prometheus-client);
//! - `/healthz`: 200 while the process serves;
//! - `/readyz`: 200 once recovery finished and every source runs, 503 with the reasons
//!   otherwise.
//!
//! On a loopback address anyone on the machine may read it (as the SQL port trusts
//! loopback by default). On any other address every `/metrics` request is authenticated by
//! the SQL port's rules (`auth.rs`) for the client's address: `trust` lets it in,
//! `scram-sha-256` and `password` ask for HTTP Basic credentials of a role that may log in,
//! anything else is refused. `/healthz` and `/readyz` answer anyone (probes), and say
//! nothing about what runs beyond a count.
//!
//! Metrics that are states of the running system (rows, lag, watermarks, state sizes, late
//! rows, dead letters, connections) are read at each scrape from the same numbers the
//! system tables show, by [`WeirCollector`]; events (checkpoints, statements) are counted
//! where they happen (`metrics.rs`). Label values are relation, operator and partition
//! names: bounded by the catalog, never by data.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};
use tracing::{info, warn};

use crate::engine::Engine;
use crate::error::{Result, WeirError};
use crate::server::auth::{AuthConfig, Method};

/// Where the HTTP port listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpListen {
    Off,
    /// The default address: if it is taken the server runs without it (logged).
    Default(SocketAddr),
    /// Asked for with `--http-listen`: failing to listen stops the server.
    At(SocketAddr),
}

struct HttpState {
    engine: Arc<Engine>,
    /// Edge rates of the drawn graphs.
    rates: crate::server::console::Rates,
    registry: Registry,
    /// None on loopback: no authentication.
    auth: Option<AuthConfig>,
}

/// Start the HTTP port; returns the address it listens on.
pub async fn start(
    listen: HttpListen,
    engine: Arc<Engine>,
    auth: AuthConfig,
) -> Result<Option<SocketAddr>> {
    let (addr, required) = match listen {
        HttpListen::Off => return Ok(None),
        HttpListen::Default(a) => (a, false),
        HttpListen::At(a) => (a, true),
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) if !required => {
            warn!(%addr, error = %e, "cannot listen for HTTP (metrics, health, console): running without it; choose an address with --http-listen");
            return Ok(None);
        }
        Err(e) => {
            return Err(WeirError::io(
                &format!("cannot listen for HTTP on {addr}"),
                e,
            ));
        }
    };
    let bound = listener
        .local_addr()
        .map_err(|e| WeirError::io("HTTP listener address", e))?;
    let mut registry = Registry::default();
    crate::metrics::global().register(&mut registry);
    registry.register_collector(Box::new(WeirCollector {
        engine: engine.clone(),
    }));
    let state = Arc::new(HttpState {
        engine,
        rates: Default::default(),
        registry,
        auth: (!addr.ip().is_loopback()).then_some(auth),
    });
    // the console's rates: the counters read every second
    {
        let state = Arc::downgrade(&state);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                every.tick().await;
                let Some(state) = state.upgrade() else {
                    return;
                };
                let engine = state.engine.clone();
                let tick = tokio::task::spawn_blocking(move || state.rates.tick(&engine)).await;
                if tick.is_err() {
                    return;
                }
            }
        });
    }
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/", get(console_page))
        .route("/api/v1/relations", get(api_relations))
        .route("/api/v1/views/{name}", get(api_view))
        .route("/api/v1/views/{name}/graph.svg", get(api_view_svg))
        .with_state(state);
    tokio::spawn(async move {
        let served = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await;
        if let Err(e) = served {
            warn!(error = %e, "the HTTP port stopped");
        }
    });
    info!(addr = %bound, "HTTP port: /metrics, /healthz, /readyz");
    Ok(Some(bound))
}

/// Whether a request may be answered (see the module's header).
fn authorized(state: &HttpState, peer: SocketAddr, headers: &HeaderMap) -> Option<Response> {
    who(state, peer, headers).err().map(Refusal::into_response)
}

/// Why a request is refused.
enum Refusal {
    /// Credentials are needed (or were wrong): 401 with a Basic challenge.
    Challenge,
    /// No rule lets this address in: 403.
    Forbidden,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Challenge => (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Basic realm=\"weir\"")],
                "authentication required\n",
            )
                .into_response(),
            Refusal::Forbidden => (StatusCode::FORBIDDEN, "forbidden\n").into_response(),
        }
    }
}

/// Who a request is: Ok(None) for anyone (loopback, or a `trust` rule), Ok(Some(role)) for
/// a role that gave its password; Err with the refusal otherwise.
fn who(
    state: &HttpState,
    peer: SocketAddr,
    headers: &HeaderMap,
) -> std::result::Result<Option<u32>, Refusal> {
    let Some(auth) = state.auth.as_ref() else {
        return Ok(None);
    };
    let catalog = &state.engine.catalog;
    let basic = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Basic "))
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.split_once(':').map(|(u, p)| (u.to_owned(), p.to_owned())));
    let user = basic.as_ref().map(|(u, _)| u.as_str()).unwrap_or("");
    match auth.method_for(catalog, peer.ip(), false, "weir", user) {
        Some((Method::Trust, _)) => Ok(None),
        Some((Method::ScramSha256 | Method::Password, _)) => {
            let Some((user, password)) = basic else {
                return Err(Refusal::Challenge);
            };
            let role = catalog.role(&user).filter(|r| {
                r.login
                    && r.password
                        .as_deref()
                        .and_then(crate::catalog::scram::Verifier::parse)
                        .is_some_and(|v| v.matches(&password))
            });
            match role {
                Some(r) => Ok(Some(r.oid)),
                None => {
                    warn!(%peer, user, "HTTP login failed");
                    Err(Refusal::Challenge)
                }
            }
        }
        _ => Err(Refusal::Forbidden),
    }
}

async fn metrics(
    State(state): State<Arc<HttpState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = authorized(&state, peer, &headers) {
        return refused;
    }
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &state.registry) {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn console_page(
    State(state): State<Arc<HttpState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = authorized(&state, peer, &headers) {
        return refused;
    }
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        crate::server::console::PAGE,
    )
        .into_response()
}

async fn api_relations(
    State(state): State<Arc<HttpState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    let role = match who(&state, peer, &headers) {
        Ok(r) => r,
        Err(refused) => return refused.into_response(),
    };
    axum::Json(crate::server::console::relations(
        &state.engine,
        &state.rates,
        role,
    ))
    .into_response()
}

async fn api_view(
    State(state): State<Arc<HttpState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    axum::extract::Path(name): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    let role = match who(&state, peer, &headers) {
        Ok(r) => r,
        Err(refused) => return refused.into_response(),
    };
    match crate::server::console::view(&state.engine, &state.rates, role, &name) {
        Some(v) => axum::Json(v).into_response(),
        None => (StatusCode::NOT_FOUND, "no such materialized view\n").into_response(),
    }
}

async fn api_view_svg(
    State(state): State<Arc<HttpState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    axum::extract::Path(name): axum::extract::Path<String>,
    headers: HeaderMap,
) -> Response {
    let role = match who(&state, peer, &headers) {
        Ok(r) => r,
        Err(refused) => return refused.into_response(),
    };
    match crate::server::console::graph_svg(&state.engine, &state.rates, role, &name) {
        Some(svg) => ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response(),
        None => (StatusCode::NOT_FOUND, "no such materialized view\n").into_response(),
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready: recovery finished (it runs before either port listens) and every source runs.
/// Open to anyone who reaches the port, for orchestrators' probes: it says how many
/// sources are not running, not which (`weir_sources` says which, to those who may read
/// them).
async fn readyz(State(state): State<Arc<HttpState>>) -> Response {
    let waiting = state
        .engine
        .dataflow
        .sources
        .progress()
        .into_iter()
        .filter(|p| !(p.done || matches!(p.status.as_str(), "running" | "joined")))
        .count();
    if waiting == 0 {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {waiting} source reader(s) not running (see weir_sources)\n"),
        )
            .into_response()
    }
}

/// Reads the running system's numbers at each scrape.
struct WeirCollector {
    engine: Arc<Engine>,
}

impl std::fmt::Debug for WeirCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WeirCollector")
    }
}

type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// One metric family of constant values.
fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    metric_type: MetricType,
    values: Vec<(Labels, M)>,
) -> std::result::Result<(), std::fmt::Error> {
    let mut m = encoder.encode_descriptor(name, help, unit.as_ref(), metric_type)?;
    for (l, v) in values {
        v.encode(m.encode_family(&l)?)?;
    }
    Ok(())
}

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

impl Collector for WeirCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::result::Result<(), std::fmt::Error> {
        let engine = &self.engine;
        let dataflow = &engine.dataflow;
        let catalog = &engine.catalog;
        let now = now_us();
        let name_of = |oid: u32| {
            catalog
                .get_by_oid(oid)
                .map(|e| e.desc.name.clone())
                .unwrap_or_else(|| oid.to_string())
        };

        // sources: one shared reader per source (and a consumer per Kafka-fed table);
        // backfill readers are a view's catch-up and would count rows twice
        let progress: Vec<_> = dataflow
            .sources
            .progress()
            .into_iter()
            .filter(|p| p.reader != "backfill")
            .collect();
        let mut rows = Vec::new();
        let mut lag = Vec::new();
        let mut dead = Vec::new();
        let mut watermark_delay = Vec::new();
        for p in &progress {
            if p.partitions.is_empty() {
                rows.push((
                    labels(&[("source", &p.source_name), ("partition", "")]),
                    ConstCounter::new(p.rows),
                ));
            }
            for part in &p.partitions {
                let partition = part.partition.to_string();
                let l = labels(&[("source", &p.source_name), ("partition", &partition)]);
                rows.push((l.clone(), ConstCounter::new(part.rows)));
                if part.high_watermark >= 0 {
                    lag.push((
                        l,
                        ConstGauge::new((part.high_watermark - part.offset).max(0)),
                    ));
                }
            }
            dead.push((
                labels(&[("source", &p.source_name)]),
                ConstCounter::new(p.dead_letters),
            ));
            if let Some(w) = p.watermark {
                watermark_delay.push((
                    labels(&[("relation", &p.source_name)]),
                    ConstGauge::new((now - w) as f64 / 1e6),
                ));
            }
        }
        family(
            &mut encoder,
            "weir_source_rows",
            "Rows a source produced, per partition",
            None,
            MetricType::Counter,
            rows,
        )?;
        family(
            &mut encoder,
            "weir_source_lag_records",
            "Records a Kafka partition holds beyond what was read (high watermark - next offset)",
            None,
            MetricType::Gauge,
            lag,
        )?;
        family(
            &mut encoder,
            "weir_dead_letters",
            "Records a source could not decode",
            None,
            MetricType::Counter,
            dead,
        )?;

        let stats = dataflow.stats();
        let mut view_rows = Vec::new();
        let mut state_rows = Vec::new();
        let mut state_bytes = Vec::new();
        let mut late = Vec::new();
        let mut failed = Vec::new();
        let mut operator_rows = Vec::new();
        let mut busy = Vec::new();
        for s in &stats {
            let view = name_of(s.oid);
            view_rows.push((labels(&[("view", &view)]), ConstGauge::new(s.rows as i64)));
            if let Some(w) = s.watermark {
                watermark_delay.push((
                    labels(&[("relation", &view)]),
                    ConstGauge::new((now - w) as f64 / 1e6),
                ));
            }
            for o in &s.operators {
                let operator = format!("{} {}", o.node, o.name);
                for (direction, n) in [("in", o.rows_in), ("out", o.rows_out)] {
                    operator_rows.push((
                        labels(&[
                            ("view", &view),
                            ("operator", &operator),
                            ("direction", direction),
                        ]),
                        ConstCounter::new(n),
                    ));
                }
                busy.push((
                    labels(&[("view", &view), ("operator", &operator)]),
                    ConstCounter::new(o.busy_ns as f64 / 1e9),
                ));
                if o.source {
                    continue;
                }
                let l = labels(&[("view", &view), ("operator", &operator)]);
                state_rows.push((l.clone(), ConstGauge::new(o.rows as i64)));
                state_bytes.push((l, ConstGauge::new((o.bytes + o.spilled) as i64)));
            }
            late.push((
                labels(&[("view", &view)]),
                ConstCounter::new(dataflow.late.count(&view)),
            ));
            failed.push((
                labels(&[("view", &view)]),
                ConstGauge::new(i64::from(s.failed.is_some())),
            ));
        }
        family(
            &mut encoder,
            "weir_view_rows",
            "Rows in a materialized view",
            None,
            MetricType::Gauge,
            view_rows,
        )?;
        family(
            &mut encoder,
            "weir_watermark_delay",
            "Wall clock minus the event-time watermark of a view or source",
            Some(Unit::Seconds),
            MetricType::Gauge,
            watermark_delay,
        )?;
        family(
            &mut encoder,
            "weir_state_rows",
            "Rows an operator keeps in its state",
            None,
            MetricType::Gauge,
            state_rows,
        )?;
        family(
            &mut encoder,
            "weir_state",
            "Bytes an operator's state takes, in memory and spilled",
            Some(Unit::Bytes),
            MetricType::Gauge,
            state_bytes,
        )?;
        family(
            &mut encoder,
            "weir_late_rows",
            "Rows a view dropped as late",
            None,
            MetricType::Counter,
            late,
        )?;
        family(
            &mut encoder,
            "weir_operator_rows",
            "Change rows into and out of each node of a view's graph (sources included)",
            None,
            MetricType::Counter,
            operator_rows,
        )?;
        family(
            &mut encoder,
            "weir_operator_busy",
            "Time spent in each node of a view's graph",
            Some(Unit::Seconds),
            MetricType::Counter,
            busy,
        )?;
        family(
            &mut encoder,
            "weir_view_failed",
            "1 when a view stopped on an error (weir_views.failed)",
            None,
            MetricType::Gauge,
            failed,
        )?;

        family(
            &mut encoder,
            "weir_connections",
            "Client connections open on the SQL port",
            None,
            MetricType::Gauge,
            vec![(
                Vec::new(),
                ConstGauge::new(catalog.connections.lock().len() as i64),
            )],
        )?;
        let memory = &dataflow.sources.memory;
        family(
            &mut encoder,
            "process_resident_memory",
            "Resident memory of the process",
            Some(Unit::Bytes),
            MetricType::Gauge,
            vec![(
                Vec::new(),
                ConstGauge::new(
                    crate::state::memory::resident_bytes().unwrap_or(memory.resident()) as i64,
                ),
            )],
        )?;
        if let Some(limit) = memory.limit() {
            family(
                &mut encoder,
                "weir_memory_limit",
                "--memory-limit",
                Some(Unit::Bytes),
                MetricType::Gauge,
                vec![(Vec::new(), ConstGauge::new(limit as i64))],
            )?;
        }
        if let Some((cpu, start)) = crate::metrics::process_times() {
            family(
                &mut encoder,
                "process_cpu",
                "User and system CPU time the process used",
                Some(Unit::Seconds),
                MetricType::Counter,
                vec![(Vec::new(), ConstCounter::new(cpu))],
            )?;
            family(
                &mut encoder,
                "process_start_time",
                "When the process started, seconds since the Unix epoch",
                Some(Unit::Seconds),
                MetricType::Gauge,
                vec![(Vec::new(), ConstGauge::new(start))],
            )?;
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            family(
                &mut encoder,
                "process_open_fds",
                "Open file descriptors",
                None,
                MetricType::Gauge,
                vec![(Vec::new(), ConstGauge::new(fds.count() as i64))],
            )?;
        }
        Ok(())
    }
}
