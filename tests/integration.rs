//! The integration test binary: every test drives a real `weir` server over the wire.

mod broker;
mod clients;
mod docs;
mod durability;
mod event_time;
mod hardening;
mod harness;
mod kafka;
mod memory;
mod nexmark;
mod nexmark_queries;
mod observability;
mod oracle;
mod postgres;
mod protocol;
mod recovery;
mod security;
mod slt;
mod subscribe;
mod views;
