//! Planning: from parsed statements to what runs. DataFusion binds and optimizes; this
//! module lowers what is Weir-specific (DML onto the table store now; dataflow graphs for
//! materialized views later).

pub mod apply;
pub mod asof;
pub mod dml;
pub mod global_aggregate_filters;
pub mod insert_values;
pub mod match_recognize;
pub mod shared;
pub mod unnest_keys;
pub mod view;
pub mod wrapped_rule;
