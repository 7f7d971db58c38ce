//! The `shardplan` command line.

mod dynamic;

use clap::{Parser, Subcommand};

/// shardplan: plan how to shard embedding tables.
#[derive(Debug, Parser)]
#[command(name = "shardplan", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a request stream through the dynamic row-sharding policies (ALIS and baselines).
    Dynamic(Box<dynamic::DynamicArgs>),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Dynamic(args) => dynamic::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
