//! `shardplan-train`: trains a cost profile (compute model and comm models) from collector datasets,
//! exports ONNX graphs and a model card, and checks the result loads in planner-core; and trains the
//! AutoShard placement policy (`autoshard`), checking the planner reproduces it.
//! See the `trainer` library docs for the design.
//!
//! `main.rs` holds the command line and the dispatch; each subcommand's body is its own file
//! (`profile_cmd.rs`, `autoshard_cmd.rs`, `predict_cmd.rs`, `bench_cmd.rs`, `calibrate_cmd.rs`,
//! `dreamshard_cmd.rs`, `fit_terms_cmd.rs`, `fit_comm_cmd.rs`), reading its arguments as one struct; `common.rs` holds what two of them share.
//! Errors print their whole chain and exit with status 1 (usage errors: 2, from clap).

mod autoshard_cmd;
mod bench_cmd;
mod calibrate_cmd;
mod common;
mod dreamshard_cmd;
mod fit_comm_cmd;
mod fit_terms_cmd;
mod predict_cmd;
mod profile_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Train shardplan's learned cost models.
#[derive(Parser)]
#[command(name = "shardplan-train", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a profile from datasets and write it (card.json + ONNX graphs) to --out.
    Profile(Box<profile_cmd::ProfileArgs>),
    /// Train the AutoShard placement policy (LSTM actor-critic with V-trace targets) on the h100
    /// compute model and write it (policy.json + ONNX graphs + curve.csv) to --out.
    Autoshard(autoshard_cmd::AutoshardArgs),
    /// Price the sets of a request file (`shardplan.set-request/v1` lines, as `shardplan-collect sets`
    /// reads) with a profile: one CSV line per set with the mean, every member and the interval; with
    /// `--measured`, the dataset `shardplan-collect sets` wrote for the same file is joined by line.
    Predict(predict_cmd::PredictArgs),
    /// Measure a profile's evaluation speed: incremental shard evaluations per second and the
    /// end-to-end graph's latency.
    Bench(bench_cmd::BenchArgs),
    /// The plan → measure → learn loop: measure the device sets planners produce with a
    /// `shardplan-collect` binary, retrain the profile, re-plan; reports each round's measured judge on
    /// held-out tasks. Resumable: rerun the same command.
    Calibrate(Box<calibrate_cmd::CalibrateArgs>),
    /// Train a DreamShard policy (cost network + policy network, REINFORCE on the estimated MDP) and
    /// write it (policy.json + ONNX graphs + curve.json) to --out.
    Dreamshard(Box<dreamshard_cmd::DreamShardArgs>),
    /// Fit a profile's memory-terms compute model (non-negative costs per distinct row, cache line,
    /// lookup and piece) on its datasets and write it into the profile's card (`compute_terms`);
    /// `--compute-terms` then prices compute with it.
    FitTerms(fit_terms_cmd::FitTermsArgs),
    /// Retrain a profile's comm models on comm datasets (`shardplan-collect comm`) and write them into
    /// the profile; its compute networks stay as they are.
    FitComm(fit_comm_cmd::FitCommArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Profile(a) => profile_cmd::run(a),
        Command::Autoshard(a) => autoshard_cmd::run(a),
        Command::Predict(a) => predict_cmd::run(a),
        Command::Bench(a) => bench_cmd::run(a),
        Command::Calibrate(a) => calibrate_cmd::run(a),
        Command::Dreamshard(a) => dreamshard_cmd::run(a),
        Command::FitTerms(a) => fit_terms_cmd::run(a),
        Command::FitComm(a) => fit_comm_cmd::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
