//! SQL text in: the statement parser (sqlparser's Postgres dialect plus Weir's streaming
//! syntax) and the SQL type system.

pub mod bulk_insert;
pub mod bytea_codec;
pub mod client_stmts;
pub mod date_trunc;
pub mod datetime_in;
pub mod depth;
pub mod enum_functions;
pub mod error_position;
pub mod extension_functions;
pub mod extract;
pub mod hooked;
pub mod interval_in;
pub mod json;
pub mod json_build;
pub mod jsonb;
pub mod jsonpath;
pub mod numeric;
pub mod ordered_set;
pub mod parser;
pub mod pg_functions;
pub mod pg_math;
pub mod pg_text;
pub mod regression;
pub mod security;
pub mod time;
pub mod time_zone;
pub mod to_char;
pub mod to_number;
pub mod to_timestamp;
pub mod transaction_time;
pub mod typed_arrays;
pub mod types;
pub mod uuid;
pub mod variance;
pub mod windows;
