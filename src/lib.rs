//! Weir: a streaming SQL database that speaks the Postgres wire protocol.
//!
//! Modules follow the data: `sql` (parse) → `plan` (bind, lower) → `dataflow` (changelogs,
//! runtime) → `state` (store, tables) → `serving` (ad-hoc queries), with `server`
//! (pgwire), `catalog` (relations, pg_catalog) and `engine` (statement execution) beside
//! them. See `docs/ARCHITECTURE.md`.

pub mod catalog;
pub mod connectors;
pub mod dataflow;
pub mod engine;
pub mod error;
pub mod limits;
pub mod metrics;
pub mod operators;
pub mod parallel;
pub mod plan;
pub mod server;
pub mod serving;
pub mod sql;
pub mod state;
