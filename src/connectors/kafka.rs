//! Kafka sources (`connector = 'kafka'`, `FORMAT PLAIN ENCODE JSON`), on rdkafka
//! (librdkafka).
//!
//! A source is read by one consumer (its shared reader, `connectors/shared.rs`) whose
//! batches every view over it receives: it assigns itself every partition of the topic
//! explicitly (no consumer group, no rebalancing), starting where `scan.startup.mode`
//! says, and picks up partitions added later (from their beginning). A view created later
//! over a source whose startup mode reaches back (`earliest`, `timestamp`) first reads the
//! history with a backfill consumer of its own (`backfill.rs`), then joins the shared
//! reader; under `latest` it joins at once. Offsets are Weir's own: nothing is committed to
//! Kafka. Restored from a checkpoint, the shared reader resumes at the source's
//! checkpointed offsets and first re-forms the batches its input journal recorded after
//! them (`replay.rs`, `dataflow/journal.rs`); a view rebuilt from its inputs backfills.
//!
//! Messages are decoded a batch at a time (`json.rs`); a record that does not decode goes
//! to `weir_dead_letters` (or, with `on_error = 'fail'`, stops the instance with an error
//! naming topic, partition and offset). The watermark is kept per partition (largest event
//! time minus the declared delay) and combined by minimum over the partitions that are not
//! idle (no message for `watermark.idle.timeout.ms`, default 5 s); it never moves back.
//!
//! The code: `options.rs` (WITH options, columns, decoder), `poll.rs` (the consumer loop,
//! partitions, watermark), `target.rs` (decoding a batch and handing it to a view or a
//! table), `flush.rs` (when FLUSH may be answered), `replay.rs` (re-forming journaled
//! batches after a restore).

mod backfill;
mod flush;
mod options;
mod poll;
mod replay;
mod target;

pub use options::{
    Include, KafkaOptions, KafkaSpec, OnError, Startup, ValueDecoder, columns, known_option,
};
pub(crate) use poll::cached_high_watermark_of;
pub use poll::{run, run_table};
