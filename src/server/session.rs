//! Per-connection state: the DataFusion context, settings changed with SET, and the
//! transaction block status.

use std::collections::{BTreeMap, HashMap};

use std::sync::Arc;

use datafusion::execution::context::SessionContext;

use crate::dataflow::changelog::Changelog;
use crate::serving::PinnedViews;
use crate::state::table::TableStore;

/// Settings a client can read with SHOW (and `pg_settings`), with their defaults. Names are
/// lower case; SHOW and SET match case-insensitively.
pub const DEFAULT_SETTINGS: &[(&str, &str)] = &[
    ("application_name", ""),
    ("block_size", "8192"),
    ("bytea_output", "hex"),
    ("client_encoding", "UTF8"),
    ("client_min_messages", "notice"),
    ("datestyle", "ISO, MDY"),
    ("default_transaction_isolation", "read committed"),
    ("default_transaction_read_only", "off"),
    ("extra_float_digits", "1"),
    ("idle_in_transaction_session_timeout", "0"),
    ("integer_datetimes", "on"),
    ("intervalstyle", "postgres"),
    ("is_superuser", "on"),
    ("lc_collate", "C.UTF-8"),
    ("lc_ctype", "C.UTF-8"),
    ("lc_messages", "C.UTF-8"),
    ("lc_monetary", "C.UTF-8"),
    ("lc_numeric", "C.UTF-8"),
    ("lc_time", "C.UTF-8"),
    ("lock_timeout", "0"),
    ("max_connections", "100"),
    ("max_identifier_length", "63"),
    ("max_index_keys", "32"),
    ("row_security", "on"),
    ("search_path", "\"$user\", public"),
    ("server_encoding", "UTF8"),
    ("server_version", crate::server::PG_VERSION),
    ("server_version_num", crate::server::PG_VERSION_NUM),
    ("ssl", "off"),
    ("standard_conforming_strings", "on"),
    ("statement_timeout", "0"),
    ("timezone", "UTC"),
    ("transaction_isolation", "read committed"),
    ("transaction_read_only", "off"),
    ("work_mem", "4MB"),
];

/// How SHOW names a setting's column (Postgres keeps the spelling of the canonical name).
pub fn canonical_name(name: &str) -> &str {
    match name {
        "datestyle" => "DateStyle",
        "timezone" => "TimeZone",
        "intervalstyle" => "IntervalStyle",
        other => other,
    }
}

/// Settings reported to the client with ParameterStatus when they change.
pub fn is_reported(name: &str) -> bool {
    matches!(
        name,
        "application_name"
            | "client_encoding"
            | "datestyle"
            | "timezone"
            | "intervalstyle"
            | "standard_conforming_strings"
            | "integer_datetimes"
            | "is_superuser"
            | "server_version"
    )
}

pub struct Session {
    pub ctx: SessionContext,
    /// Views pinned for the query being run (shared with the context's catalog).
    pub pinned: Arc<PinnedViews>,
    /// Shared with the session's `current_setting()` function.
    settings: Arc<parking_lot::RwLock<BTreeMap<String, String>>>,
    /// Inside BEGIN ... COMMIT/ROLLBACK.
    pub in_transaction: bool,
    /// Changes made since the transaction (explicit, or the implicit one of a
    /// multi-statement query) began, to undo on ROLLBACK or error; oldest first.
    pub undo: Vec<(Arc<TableStore>, Changelog)>,
    /// Collect undo entries even outside BEGIN (a multi-statement simple query).
    pub implicit_transaction: bool,
    /// A statement failed inside the transaction block: everything but ROLLBACK [TO] is
    /// refused until the block ends.
    pub aborted: bool,
    /// Savepoints of the transaction block, oldest first: name and the undo log's length
    /// when it was set.
    pub savepoints: Vec<(String, usize)>,
    /// Open cursors by name.
    pub cursors: HashMap<String, Cursor>,
    /// A `COPY ... FROM STDIN` waiting for its data.
    pub copy_in: Option<crate::server::copy::CopyIn>,
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
        let undo = std::mem::take(&mut self.undo);
        if undo.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        rt.spawn(async move {
            for (table, changelog) in undo.into_iter().rev() {
                let _writer = table.writer.lock().await;
                let t = table.clone();
                let result = tokio::task::spawn_blocking(move || {
                    t.apply(crate::state::table::Change::Revert(changelog))
                })
                .await;
                if let Ok(Err(e)) = result {
                    tracing::warn!(table = %table.name, error = %e, "rollback on disconnect failed");
                }
            }
        });
    }
}

impl Session {
    pub fn new(ctx: SessionContext, pinned: Arc<PinnedViews>) -> Self {
        let settings = Arc::new(parking_lot::RwLock::new(BTreeMap::new()));
        register_current_setting(&ctx, settings.clone());
        Session {
            ctx,
            pinned,
            settings,
            in_transaction: false,
            undo: Vec::new(),
            implicit_transaction: false,
            aborted: false,
            savepoints: Vec::new(),
            cursors: HashMap::new(),
            copy_in: None,
        }
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
        self.aborted = false;
        self.savepoints.clear();
        self.cursors.retain(|_, c| c.hold);
    }

    /// Normalize a SHOW/SET name: lower case, multi-word aliases mapped.
    pub fn normalize(name: &str) -> String {
        let n = name.trim().to_lowercase();
        match n.as_str() {
            "transaction isolation level" => "transaction_isolation".into(),
            "time zone" => "timezone".into(),
            "session authorization" => "session_authorization".into(),
            _ => n,
        }
    }

    pub fn get(&self, name: &str) -> Option<String> {
        lookup(&self.settings.read(), name)
    }

    pub fn set(&mut self, name: &str, value: &str) {
        self.settings
            .write()
            .insert(Self::normalize(name), value.to_owned());
    }

    pub fn reset(&mut self, name: &str) {
        if name.eq_ignore_ascii_case("all") {
            self.settings.write().clear();
        } else {
            self.settings.write().remove(&Self::normalize(name));
        }
    }

    /// Every setting with its current value.
    pub fn all(&self) -> Vec<(String, String)> {
        let mut out: BTreeMap<String, String> = DEFAULT_SETTINGS
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        for (k, v) in self.settings.read().iter() {
            out.insert(k.clone(), v.clone());
        }
        out.into_iter().collect()
    }
}

/// A setting's value: set in the session, else its default.
fn lookup(settings: &BTreeMap<String, String>, name: &str) -> Option<String> {
    let n = Session::normalize(name);
    if let Some(v) = settings.get(&n) {
        return Some(v.clone());
    }
    if n == "session_authorization" {
        return Some(crate::catalog::SUPERUSER_NAME.to_owned());
    }
    DEFAULT_SETTINGS
        .iter()
        .find(|(k, _)| *k == n)
        .map(|(_, v)| (*v).to_owned())
}

/// `current_setting(name [, missing_ok])`, reading this session's settings.
fn register_current_setting(
    ctx: &SessionContext,
    settings: Arc<parking_lot::RwLock<BTreeMap<String, String>>>,
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
            match lookup(&s, names.value(i)) {
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
    let signature = Signature::one_of(
        vec![
            TypeSignature::Exact(vec![DataType::Utf8]),
            TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
        ],
        Volatility::Stable,
    );
    ctx.register_udf(ScalarUDF::from(SimpleScalarUDF::new_with_signature(
        "current_setting",
        signature,
        DataType::Utf8,
        Arc::new(f),
    )));
    // set_config(name, value, is_local): sets it for the session and returns the value
    // (is_local is treated as session-wide: there are no per-transaction settings)
    let set = move |args: &[ColumnarValue]| -> datafusion::error::Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(args)?;
        let names = datafusion::arrow::compute::cast(&arrays[0], &DataType::Utf8)?;
        let values = datafusion::arrow::compute::cast(&arrays[1], &DataType::Utf8)?;
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
            let n = Session::normalize(names.value(i));
            if let Err(e) = crate::engine::check_setting(&n, v) {
                return Err(datafusion::error::DataFusionError::External(Box::new(e)));
            }
            writer.write().insert(n, v.to_owned());
            out.push(Some(v.to_owned()));
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
