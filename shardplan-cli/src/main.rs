//! `shardplan`: the command line of shardplan.
//!
//! Subcommands: `plan` (plan one task and explain its cost), `tasks` (write a seeded task suite),
//! `eval` (run planners over a suite), `evaluate` (price existing plan files), `bench` (every planner on the NeuroShard protocol with both
//! judges, bound and optimality gaps, scale), `export-torchrec` (a plan as a TorchRec sharding plan),
//! `dynamic` (replay a request stream through the ALIS row-sharding strategies), `pool` (the built-in
//! table pool as CSV), `list` (planners and cost models). Arguments are parsed in two
//! stages: clap turns the command line into raw values, and planner-core's constructors validate them
//! into spec types, so every refusal names the field and the value. Errors print their whole chain and
//! exit with status 1 (usage errors: 2, from clap).

mod bench;
mod common;
mod dynamic;
mod eval_cmd;
mod evaluate_cmd;
mod export_cmd;
mod heap;
mod plan_cmd;
mod pool_cmd;
mod run_one;
mod tasks_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[global_allocator]
static HEAP: heap::Counting = heap::Counting;

/// Plan how to shard embedding tables across GPUs.
#[derive(Parser)]
#[command(name = "shardplan", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Plan one task (tables from a file or the built-in pool) and print the per-device costs.
    Plan(Box<plan_cmd::PlanArgs>),
    /// Write a seeded task suite (JSON Lines) for a seed paper's protocol.
    Tasks(tasks_cmd::TasksArgs),
    /// Run planners over a task suite: mean cost, valid plans, improvement, planning time.
    Eval(eval_cmd::EvalArgs),
    /// Price existing plans (ours, or TorchRec plans with --tables) under any cost model, definition and
    /// memory rule, with TorchRec's own estimate beside ours.
    Evaluate(Box<evaluate_cmd::EvaluateArgs>),
    /// Every planner on the NeuroShard protocol, judged by prediction and (optionally) measurement;
    /// lower-bound and optimality gaps; planning time at scale.
    Bench(Box<bench::BenchArgs>),
    /// Write a plan document as a TorchRec sharding plan (apply it in TorchRec: docs/TORCHREC.md).
    ExportTorchrec(export_cmd::ExportArgs),
    /// Replay a request stream through the dynamic row-sharding strategies (ALIS and baselines).
    Dynamic(Box<dynamic::DynamicArgs>),
    /// Write the built-in table pool (or one half of it) as a tables CSV.
    Pool(pool_cmd::PoolArgs),
    /// List the registered planners and cost models.
    List,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Plan(a) => plan_cmd::run(a),
        Command::Tasks(a) => tasks_cmd::run(a),
        Command::Eval(a) => eval_cmd::run(a),
        Command::Evaluate(a) => evaluate_cmd::run(a),
        Command::Bench(a) => bench::run(a),
        Command::ExportTorchrec(a) => export_cmd::run(a),
        Command::Dynamic(a) => dynamic::run(a),
        Command::Pool(a) => pool_cmd::run(a),
        Command::List => {
            list();
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn list() {
    let profiles = planner_core::cost::profiles::EMBEDDED;
    let width = planner_core::REGISTRY
        .iter()
        .map(|e| e.name.len())
        .chain(profiles.iter().map(|p| p.name.len()))
        .chain(["analytical".len()])
        .max()
        .unwrap_or(0);
    println!("planners:");
    for e in planner_core::REGISTRY {
        println!("  {:<width$}  {}", e.name, e.summary);
    }
    println!("cost models:");
    println!(
        "  {:<width$}  TorchRec's perf estimator; hardware profiles: {}",
        "analytical",
        planner_core::HardwareProfile::BUILTIN.join(", ")
    );
    for p in profiles {
        let default = if p.name == planner_core::cost::profiles::DEFAULT_PROFILE { " (default)" } else { "" };
        println!("  {:<width$}  trained profile{default}: {}", p.name, p.hardware);
    }
    let alias = planner_core::cost::profiles::CPU_ALIAS;
    let (model, llc) = (shardplan_files::cpu_model(), shardplan_files::llc_bytes());
    let here = format!("{model}, {}", planner_core::cost::card::last_level_cache_clause(llc));
    match planner_core::cost::profiles::cpu_profile_for(&model, llc) {
        Ok(p) => println!("  {alias:<width$}  the CPU profile of this machine ({here}): {}", p.name),
        Err(_) => println!("  {alias:<width$}  the CPU profile of this machine ({here}): none is embedded"),
    }
    println!("cost definitions:");
    println!("  {:<width$}  NeuroShard's: start delays feed forward comm (default)", "neuroshard");
    println!("  {:<width$}  DreamShard's: the largest sum of the four phases, no delays", "four-phase");
    println!("topologies (--topology):");
    for t in planner_core::topology::TOPOLOGY_PRESETS {
        println!("  {:<width$}  {}", t.name, t.description);
    }
}
