//! `shardplan pool`: write the built-in DLRM table pool (or one half of it) as a tables CSV in the
//! shared format, e.g. to collect cost data on tables a model is never trained on.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use planner_core::pool::dlrm_pool;
use planner_core::table::NUM_BINS;
use planner_core::task::{PoolHalf, pool_half_ids};

use crate::tasks_cmd::HalfArg;
use shardplan_files::write_atomic;

/// Arguments of `shardplan pool`.
#[derive(Args, Debug)]
pub struct PoolArgs {
    /// Only this half of the pool (the fixed split the DreamShard/AutoShard protocols use).
    #[arg(long, value_enum)]
    pub half: Option<HalfArg>,
    /// Output CSV (`table_id,row,pooling_factor,bin_0..bin_16`).
    #[arg(long)]
    pub out: PathBuf,
}

/// Runs `shardplan pool`.
pub fn run(args: &PoolArgs) -> Result<()> {
    let pool = dlrm_pool()?;
    let ids: Vec<usize> = match args.half {
        None => (0..pool.len()).collect(),
        Some(HalfArg::Train) => pool_half_ids(PoolHalf::Train)?,
        Some(HalfArg::Test) => pool_half_ids(PoolHalf::Test)?,
    };
    let mut text = String::from("table_id,row,pooling_factor");
    for k in 0..NUM_BINS {
        write!(text, ",bin_{k}")?;
    }
    text.push('\n');
    for &id in &ids {
        let t = &pool[id];
        write!(text, "{},{},{}", t.table_id, t.rows, t.pooling_factor)?;
        for b in &t.bins {
            write!(text, ",{b}")?;
        }
        text.push('\n');
    }
    write_atomic(&args.out, text.as_bytes())?;
    println!("{} pool tables written to {}", ids.len(), args.out.display());
    Ok(())
}
