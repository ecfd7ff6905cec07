//! The integration test binary: every test drives a real `weir` server over the wire.

mod harness;
mod slt;
mod protocol;
mod durability;
mod clients;
mod docs;
