//! The dataflow: changelog batches (rows + weights) that connect tables, operators and
//! views; a view's graph of operators; and the runtime that runs every view's graph epoch by
//! epoch and publishes consistent view contents.

pub mod backfill;
pub mod changelog;
pub mod checkpoint;
pub mod graph;
pub mod journal;
pub mod late;
pub mod position;
pub mod publication;
pub mod runtime;
pub mod shards;
pub mod stats;
pub mod watermark;
pub mod worker;
