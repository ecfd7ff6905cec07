//! The dataflow: changelog batches (rows + weights) that connect tables, operators and
//! views.

pub mod changelog;
