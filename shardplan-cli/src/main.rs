//! The `shardplan` command line.
fn main() {}
