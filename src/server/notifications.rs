//! `LISTEN`, `UNLISTEN`, `NOTIFY` and `pg_notify`, as Postgres has them: a session listens
//! on channels; a notification sent on a channel reaches every session listening on it
//! (the sender too) when the sender's transaction commits — at once outside a transaction
//! block, at COMMIT inside one, never after a ROLLBACK or a failed statement. The same
//! channel and payload sent twice in one transaction is delivered once, as in Postgres.
//!
//! Each session has an [`Inbox`] (registered by channel in one process-wide table, held
//! weakly: a closed session's inbox goes with it) and an [`Outbox`] of what its transaction
//! sent. A client gets its notifications (`NotificationResponse`) before the
//! ReadyForQuery that ends a statement outside a block, and while it is idle between
//! transactions (`server/connection.rs` waits on the inbox beside the socket); never inside
//! a transaction block, as Postgres holds them until the block ends.
//!
//! Differences from Postgres: `LISTEN` and `UNLISTEN` take effect at once, also inside a
//! block (Postgres applies them at COMMIT); a `ROLLBACK TO SAVEPOINT` keeps what was
//! notified after the savepoint; notifications are not kept across a restart (neither are
//! Postgres').

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Weak};

use parking_lot::Mutex;

use crate::error::{Result, WeirError, sqlstate};
use crate::sql::pg_functions::LISTENING_CHANNELS;

/// Postgres' limit on a payload (bytes).
const MAX_PAYLOAD: usize = 7999;
/// Postgres' limit on a channel name (bytes, `NAMEDATALEN - 1`).
const MAX_CHANNEL: usize = 63;

/// One notification as a client receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The sending session's backend pid.
    pub pid: i32,
    pub channel: String,
    pub payload: String,
}

/// The sessions listening, by channel.
static LISTENERS: LazyLock<Mutex<HashMap<String, Vec<Weak<Inbox>>>>> =
    LazyLock::new(Default::default);

/// What a session receives.
#[derive(Default)]
pub struct Inbox {
    queue: Mutex<VecDeque<Notification>>,
    /// Woken on each notification queued (a permit is kept when nobody waits).
    wake: tokio::sync::Notify,
    /// The channels it listens on, in the order LISTENed.
    channels: Mutex<Vec<String>>,
}

impl Inbox {
    pub fn new() -> Arc<Inbox> {
        Arc::new(Inbox::default())
    }

    /// `LISTEN channel`.
    pub fn listen(self: &Arc<Self>, channel: &str) -> Result<()> {
        check_channel(channel)?;
        let mut channels = self.channels.lock();
        if channels.iter().any(|c| c == channel) {
            return Ok(());
        }
        channels.push(channel.to_owned());
        let mut all = LISTENERS.lock();
        let list = all.entry(channel.to_owned()).or_default();
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(self));
        Ok(())
    }

    /// `UNLISTEN channel`; `None`: `UNLISTEN *`.
    pub fn unlisten(self: &Arc<Self>, channel: Option<&str>) {
        let gone: Vec<String> = {
            let mut channels = self.channels.lock();
            match channel {
                Some(c) => {
                    let had = channels.iter().any(|x| x == c);
                    channels.retain(|x| x != c);
                    if had { vec![c.to_owned()] } else { vec![] }
                }
                None => std::mem::take(&mut *channels),
            }
        };
        let me = Arc::as_ptr(self);
        forget(gone, |w| w.as_ptr() != me);
    }

    /// The channels listened on (`pg_listening_channels()`).
    pub fn channels(&self) -> Vec<String> {
        self.channels.lock().clone()
    }

    /// The notifications received and not yet taken.
    pub fn take(&self) -> Vec<Notification> {
        self.queue.lock().drain(..).collect()
    }

    /// Wait for the next notification.
    pub async fn next(&self) -> Notification {
        loop {
            if let Some(n) = self.queue.lock().pop_front() {
                return n;
            }
            self.wake.notified().await;
        }
    }

    fn deliver(&self, n: Notification) {
        self.queue.lock().push_back(n);
        self.wake.notify_one();
    }
}

impl Drop for Inbox {
    fn drop(&mut self) {
        // (this inbox's own entries are dead already)
        forget(std::mem::take(&mut *self.channels.lock()), |_| true);
    }
}

/// Drop from the channels' listener lists the inboxes gone and those `keep` refuses; a
/// channel nobody listens on any more leaves the table.
fn forget(channels: Vec<String>, keep: impl Fn(&Weak<Inbox>) -> bool) {
    let mut all = LISTENERS.lock();
    for c in channels {
        if let Some(list) = all.get_mut(&c) {
            list.retain(|w| w.strong_count() > 0 && keep(w));
            if list.is_empty() {
                all.remove(&c);
            }
        }
    }
}

/// What a session's transaction notified, sent when it commits. Shared with the session's
/// `pg_notify` function.
#[derive(Default)]
pub struct Outbox {
    sent: Mutex<Sent>,
}

/// The notifications of a transaction in the order sent, each once (`pg_notify` per row
/// of a large query stays linear).
#[derive(Default)]
struct Sent {
    order: Vec<(String, String)>,
    seen: std::collections::HashSet<(String, String)>,
}

impl Outbox {
    /// `NOTIFY channel, payload` / `pg_notify(channel, payload)`: kept until the
    /// transaction commits (a repeat of one already kept is dropped).
    pub fn notify(&self, channel: &str, payload: &str) -> Result<()> {
        check_channel(channel)?;
        if payload.len() > MAX_PAYLOAD {
            return Err(WeirError::new(
                sqlstate::INVALID_PARAMETER_VALUE,
                "payload string too long",
            ));
        }
        let mut sent = self.sent.lock();
        let n = (channel.to_owned(), payload.to_owned());
        if sent.seen.insert(n.clone()) {
            sent.order.push(n);
        }
        Ok(())
    }

    /// The transaction committed: what it notified goes to the sessions listening.
    pub fn commit(&self, pid: i32) {
        let sent = std::mem::take(&mut *self.sent.lock()).order;
        if sent.is_empty() {
            return;
        }
        let all = LISTENERS.lock();
        for (channel, payload) in sent {
            for inbox in all.get(&channel).into_iter().flatten() {
                if let Some(inbox) = inbox.upgrade() {
                    inbox.deliver(Notification {
                        pid,
                        channel: channel.clone(),
                        payload: payload.clone(),
                    });
                }
            }
        }
    }

    /// The transaction rolled back (or its statement failed): nothing is sent.
    pub fn discard(&self) {
        *self.sent.lock() = Sent::default();
    }
}

/// Register `pg_notify(channel, payload)` for a session: each row's notification goes to
/// the session's outbox (a NULL payload is an empty one). Answers `void`. And the list
/// behind `pg_listening_channels()`.
pub fn register(ctx: &datafusion::prelude::SessionContext, outbox: Arc<Outbox>, inbox: Arc<Inbox>) {
    ctx.register_udf(datafusion::logical_expr::ScalarUDF::new_from_impl(
        ListeningChannels {
            inbox,
            signature: datafusion::logical_expr::Signature::nullary(
                datafusion::logical_expr::Volatility::Volatile,
            ),
        },
    ));
    use datafusion::arrow::array::{Array, AsArray, NullArray};
    use datafusion::arrow::datatypes::DataType;
    use datafusion::common::Result as DfResult;
    use datafusion::logical_expr::{
        ColumnarValue, ScalarUDF, Signature, SimpleScalarUDF, TypeSignature, Volatility,
    };
    let f = move |args: &[ColumnarValue]| -> DfResult<ColumnarValue> {
        let rows = crate::sql::pg_functions::rows_of(args);
        let texts: Vec<_> = args
            .iter()
            .map(|a| {
                a.to_array(rows)
                    .and_then(|a| Ok(datafusion::arrow::compute::cast(&a, &DataType::Utf8)?))
            })
            .collect::<DfResult<_>>()?;
        let (channels, payloads) = (texts[0].as_string::<i32>(), texts[1].as_string::<i32>());
        for i in 0..rows {
            let channel = if channels.is_null(i) {
                ""
            } else {
                channels.value(i)
            };
            let payload = if payloads.is_null(i) {
                ""
            } else {
                payloads.value(i)
            };
            outbox
                .notify(channel, payload)
                .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        }
        Ok(ColumnarValue::Array(Arc::new(NullArray::new(rows))))
    };
    ctx.register_udf(crate::sql::void::void(ScalarUDF::from(
        SimpleScalarUDF::new_with_signature(
            "pg_notify",
            Signature::one_of(
                vec![TypeSignature::Exact(vec![DataType::Utf8, DataType::Utf8])],
                Volatility::Volatile,
            ),
            DataType::Null,
            Arc::new(f),
        ),
    )));
}

/// `pg_listening_channels()` (a set-returning function: the query rewriter unnests the
/// list [`LISTENING_CHANNELS`] answers per row, `catalog/rewrite.rs::srf_list`): the
/// channels the session listens on.
#[derive(Debug)]
struct ListeningChannels {
    inbox: Arc<Inbox>,
    signature: datafusion::logical_expr::Signature,
}

impl PartialEq for ListeningChannels {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inbox, &other.inbox)
    }
}
impl Eq for ListeningChannels {}
impl std::hash::Hash for ListeningChannels {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.inbox).hash(state)
    }
}
impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox")
            .field("channels", &self.channels.lock())
            .finish()
    }
}

impl datafusion::logical_expr::ScalarUDFImpl for ListeningChannels {
    fn name(&self) -> &str {
        LISTENING_CHANNELS
    }
    fn signature(&self) -> &datafusion::logical_expr::Signature {
        &self.signature
    }
    fn return_type(
        &self,
        _: &[datafusion::arrow::datatypes::DataType],
    ) -> datafusion::common::Result<datafusion::arrow::datatypes::DataType> {
        Ok(datafusion::arrow::datatypes::DataType::List(Arc::new(
            datafusion::arrow::datatypes::Field::new_list_field(
                datafusion::arrow::datatypes::DataType::Utf8,
                true,
            ),
        )))
    }
    fn invoke_with_args(
        &self,
        args: datafusion::logical_expr::ScalarFunctionArgs,
    ) -> datafusion::common::Result<datafusion::logical_expr::ColumnarValue> {
        use datafusion::arrow::array::{ListBuilder, StringBuilder};
        let channels = self.inbox.channels();
        let mut b = ListBuilder::new(StringBuilder::new());
        for _ in 0..args.number_rows {
            for c in &channels {
                b.values().append_value(c);
            }
            b.append(true);
        }
        Ok(datafusion::logical_expr::ColumnarValue::Array(Arc::new(
            b.finish(),
        )))
    }
}

fn check_channel(channel: &str) -> Result<()> {
    if channel.is_empty() {
        return Err(WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "channel name cannot be empty",
        ));
    }
    if channel.len() > MAX_CHANNEL {
        return Err(WeirError::new(
            sqlstate::INVALID_PARAMETER_VALUE,
            "channel name too long",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_reaches_the_listeners_once_and_a_discard_nobody() {
        let (a, b) = (Inbox::new(), Inbox::new());
        a.listen("n_test_ch").expect("listen");
        b.listen("n_test_ch").expect("listen");
        b.listen("n_test_other").expect("listen");
        let out = Outbox::default();
        out.notify("n_test_ch", "x").expect("notify");
        out.notify("n_test_ch", "x").expect("notify");
        out.notify("n_test_ch", "y").expect("notify");
        out.commit(7);
        let got: Vec<String> = a.take().into_iter().map(|n| n.payload).collect();
        assert_eq!(got, vec!["x", "y"], "a repeat in one transaction is folded");
        assert_eq!(b.take().len(), 2);
        out.notify("n_test_other", "z").expect("notify");
        out.discard();
        out.commit(7);
        assert!(b.take().is_empty(), "a rolled back notify is not sent");
        b.unlisten(None);
        out.notify("n_test_ch", "w").expect("notify");
        out.commit(7);
        assert!(b.take().is_empty() && b.channels().is_empty());
        assert_eq!(a.take().len(), 1);
        drop(a);
        assert!(
            !LISTENERS.lock().contains_key("n_test_ch"),
            "a dropped inbox unlistens"
        );
        assert!(out.notify("", "p").is_err());
        assert!(out.notify("c", &"p".repeat(8000)).is_err());
    }
}
