//! FLUSH for a Kafka source instance. A request first records the log ends ListOffsets
//! reports; it is answered once fetches have run for a while since the request (and since
//! the last client error: a reconnect) and every partition has reported its end (EOF) with
//! its log end unchanged since (a message fetched but not yet polled moves it; control
//! records of transactions do not count as unread), nothing is pending, and the dataflow
//! has taken what was handed over. The high watermark in fetch responses alone is not
//! enough: some brokers report the end of the data returned rather than the log end.

use std::ffi::CString;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::poll::{
    ERROR_SETTLE, FETCH_WAIT_MS, Instance, Pending, SourceContext, cached_high_watermark,
};
use super::target::Target;
use crate::connectors::runner::{SyncRequest, wait_for_views};

/// FLUSH requests being served, with when each came.
pub(super) type Syncing = Vec<(SyncRequest, Instant)>;

impl Instance {
    /// A new FLUSH request: note the log ends as ListOffsets reports them, too (each source
    /// of the log end can lag; the largest seen is the target).
    pub(super) fn take_flush_request(
        &mut self,
        consumer: &BaseConsumer<SourceContext>,
        topic: &str,
        request: SyncRequest,
        syncing: &mut Syncing,
    ) {
        syncing.push((request, Instant::now()));
        for (p, st) in self.partitions.iter_mut() {
            if let Ok((_, hi)) = consumer.fetch_watermarks(topic, *p, Duration::from_secs(1)) {
                tracing::debug!(partition = *p, hi, "ListOffsets log end");
                st.max_log_end = st.max_log_end.max(hi);
            }
        }
    }

    /// Answer the waiting FLUSH requests if the instance has caught up (see the header).
    pub(super) fn serve_flush(
        &mut self,
        consumer: &BaseConsumer<SourceContext>,
        topic_c: &CString,
        pending: &Pending,
        last_error: Option<&(Instant, String)>,
        syncing: &mut Syncing,
    ) -> std::result::Result<(), String> {
        let oldest = syncing
            .iter()
            .map(|(_, t)| *t)
            .min()
            .unwrap_or_else(Instant::now);
        let settled = last_error.is_none_or(|(at, _)| at.elapsed() >= ERROR_SETTLE);
        let reached = settled
            && oldest.elapsed() >= Duration::from_millis(FETCH_WAIT_MS * 3)
            && !self.partitions.is_empty()
            && self.partitions.iter().all(|(p, s)| match s.at_end {
                Some(hw) => {
                    hw >= s.max_log_end
                        && cached_high_watermark(consumer, topic_c, *p).is_none_or(|now| now == hw)
                }
                None => false,
            });
        // journaled batches still being re-formed: not caught up
        if !reached || !pending.meta.is_empty() || self.replay.is_some() {
            return Ok(());
        }
        let served = std::mem::take(syncing);
        // the system tables agree with what FLUSH says
        self.refresh_progress(consumer, topic_c);
        tracing::debug!(
            source = %self.source,
            view = %self.view,
            partitions = ?self
                .partitions
                .iter()
                .map(|(p, s)| (*p, s.progress.offset, s.at_end, s.max_log_end))
                .collect::<Vec<_>>(),
            "caught up for FLUSH"
        );
        // a table's changes are in the dataflow's queue once applied
        if let Target::View { tx, .. } = &self.target
            && !wait_for_views(tx)
        {
            return Err("the dataflow worker has stopped".into());
        }
        for (s, _) in served {
            let _ = s.send(Ok(()));
        }
        Ok(())
    }
}
