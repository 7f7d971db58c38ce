//! planner-core: the sans-IO heart of shardplan (filled in below).
pub mod alis;
