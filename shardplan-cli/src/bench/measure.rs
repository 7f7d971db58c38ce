//! The client of `shardplan-collect measure-plan`: a task's plan documents measured together in a
//! subprocess, its result read back as `shardplan.measured-plans/v1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use planner_core::document::MeasuredPlans;

use super::BenchArgs;

/// A `shardplan-collect` binary with the bench's measurement flags.
pub struct Collector<'a> {
    bin: &'a Path,
    backend: &'a str,
    batch: u32,
    reps: u32,
    rounds: u32,
    comm_from_plan: bool,
    guard: bool,
    quiet_reference_ms: Option<f64>,
}

impl<'a> Collector<'a> {
    /// `bin`, run with the `--measure-*` flags of `args`.
    pub fn new(bin: &'a Path, args: &'a BenchArgs) -> Self {
        Self {
            bin,
            backend: &args.measure_backend,
            batch: args.measure_batch,
            reps: args.measure_reps,
            rounds: args.measure_rounds,
            comm_from_plan: args.measure_comm_from_plan,
            guard: !args.measure_no_guard,
            quiet_reference_ms: args.measure_quiet_reference_ms,
        }
    }

    /// Measures the plans `docs` of one task together into `out_path` (reusing an earlier measurement
    /// there).
    pub fn measure(&self, docs: &[PathBuf], out_path: &Path, seed: u64) -> Result<MeasuredPlans> {
        let bin = self.bin;
        if !out_path.is_file() {
            let mut cmd = Command::new(bin);
            cmd.args(["--backend", self.backend, "--quiet"]);
            if !self.guard {
                cmd.arg("--no-guard");
            }
            if let Some(q) = self.quiet_reference_ms {
                cmd.args(["--guard-quiet-reference-ms", &q.to_string()]);
            }
            cmd.arg("measure-plan").args(docs).args([
                "--batch-size",
                &self.batch.to_string(),
                "--reps",
                &self.reps.to_string(),
                "--rounds",
                &self.rounds.to_string(),
                "--seed",
                &seed.to_string(),
                "--out",
            ]);
            cmd.arg(out_path);
            if self.comm_from_plan {
                cmd.arg("--comm-from-plan");
            }
            let output = cmd.output().with_context(|| format!("running {}", bin.display()))?;
            if !output.status.success() {
                bail!("{} measure-plan failed: {}", bin.display(), String::from_utf8_lossy(&output.stderr).trim());
            }
        }
        let text = std::fs::read_to_string(out_path).with_context(|| format!("reading {}", out_path.display()))?;
        MeasuredPlans::from_json(&text).with_context(|| format!("parsing {}", out_path.display()))
    }
}
