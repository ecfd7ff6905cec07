//! SQL text in: the statement parser (sqlparser's Postgres dialect plus Weir's streaming
//! syntax) and the SQL type system.

pub mod client_stmts;
pub mod depth;
pub mod json;
pub mod parser;
pub mod time;
pub mod types;
pub mod windows;
