//! Durable state: the storage backend trait and its fjall implementation, the Arrow IPC
//! codec for stored batches, and durable tables.

pub mod codec;
pub mod fjall_store;
pub mod memory;
pub mod rows;
pub mod spill;
pub mod state_table;
pub mod store;
pub mod table;
pub mod table_activity;
pub mod table_index;
pub mod zset;
