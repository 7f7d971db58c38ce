//! The measurement backends behind one trait: [`CpuBackend`] here, `CudaBackend` in `cuda.rs`.

use std::time::Instant;

use anyhow::{Result, bail};
use planner_core::dataset::{BackendKind, Hardware};
use planner_core::table::{ElementType, TableSpec};
use serde_json::json;

use crate::cpu::{self, Arena, CommTimes, ComputeTimes, FusedSet};
use crate::workload::{Bags, CommSample};

/// Timing protocol knobs shared by every measurement (SPEC section 4: 5 warm-up + 10 timed runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Untimed runs first.
    pub warmup: u32,
    /// Timed runs.
    pub reps: u32,
}

/// A place where fused embedding-bag kernels and all-to-alls run and are timed.
pub trait Backend {
    /// The hardware identity written into every record.
    fn hardware(&self) -> &Hardware;
    /// Whether caches are flushed before every timed run.
    fn cache_flush(&self) -> bool;
    /// Devices available to an all-to-all (the CPU backend simulates any number with threads).
    fn max_comm_devices(&self) -> Option<usize>;
    /// Bytes a compute set may occupy on `device` (weights; the buffers are small next to them).
    fn memory_bytes(&self, device: usize) -> Result<u64>;
    /// Times one fused forward + backward (SGD) over `tables` with `bags`, on `device`.
    fn compute(
        &mut self,
        device: usize,
        tables: &[TableSpec],
        bags: Vec<Bags>,
        seed: u64,
        timing: Timing,
    ) -> Result<ComputeTimes>;
    /// Times the forward (with the sample's delays) and backward all-to-all of `sample`.
    fn comm(&mut self, sample: &CommSample, batch: usize, timing: Timing) -> Result<CommTimes>;
    /// Describes the devices and measures the copy bandwidth that bounds every kernel.
    fn probe(&mut self) -> Result<serde_json::Value>;
    /// Gives the weights' memory back, so the next set is placed in fresh physical memory. Where a set's
    /// pages land changes how its rows share the caches; a measurement repeated in rounds on fresh memory
    /// averages that out instead of keeping one layout's luck. (No-op where memory is not reused.)
    fn renew_memory(&mut self) {}
}

/// A directory for what the collector keeps across runs (compiled kernels, the machine's reference
/// speed): `$XDG_CACHE_HOME/shardplan/<sub>` or `~/.cache/shardplan/<sub>`.
#[must_use]
pub fn cache_dir(sub: &str) -> Option<std::path::PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))?;
    Some(base.join("shardplan").join(sub))
}

/// Refuses what the kernels cannot run, naming the table and the field: only fp32 weights.
pub fn check_fp32(tables: &[TableSpec]) -> Result<()> {
    if let Some(t) = tables.iter().find(|t| t.dtype != ElementType::Fp32) {
        bail!(
            "table `{}`: field `dtype` = {:?} is not supported: the collector's kernels are fp32 only",
            t.name,
            t.dtype
        );
    }
    Ok(())
}

/// Checks that a set fits the backend's memory before allocating anything.
pub fn check_fits(backend: &dyn Backend, device: usize, tables: &[TableSpec]) -> Result<()> {
    let need: u64 = tables.iter().map(TableSpec::size_bytes).sum();
    let have = backend.memory_bytes(device)?;
    if need > have {
        bail!(
            "the table set ({} tables) needs {need} bytes ({}) but the {} backend has {have} bytes ({}) on device {device}",
            tables.len(),
            planner_core::units::format_bytes(need),
            backend.hardware().backend.name(),
            planner_core::units::format_bytes(have),
        );
    }
    Ok(())
}

/// The CPU backend: all threads of this machine, wall-clock timing, weights in a reusable
/// huge-page arena.
pub struct CpuBackend {
    threads: usize,
    hardware: Hardware,
    flush: Vec<u8>,
    arena: Arena,
}

fn read_text(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// A `/proc/meminfo` field in bytes.
fn meminfo_bytes(field: &str) -> Option<u64> {
    let text = read_text("/proc/meminfo")?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

impl CpuBackend {
    /// A backend on `threads` threads (default: all available). `flush` enables the cache flush.
    pub fn new(threads: Option<usize>, flush: bool) -> Result<Self> {
        let available = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let threads = threads.unwrap_or(available);
        if threads == 0 || threads > 4096 {
            bail!("--threads = {threads} is invalid: use 1..=4096");
        }
        let model = shardplan_files::cpu_model();
        // Weights live on transparent huge pages when the kernel offers them, on 4 KiB pages otherwise;
        // random row reads cost very differently on the two, so they are different hardware to a model.
        let pages = if cpu::transparent_huge_pages_available() { "thp" } else { "4k" };
        let llc = shardplan_files::llc_bytes();
        // The generation goes in the note, not the fingerprint, so that profiles measured before it was
        // recorded keep their fingerprint; `other_machine` compares it where both records have one.
        let generation = shardplan_files::cpu_signature().map_or_else(String::new, |s| format!("; {s}"));
        let hardware = Hardware {
            backend: BackendKind::Cpu,
            fingerprint: format!("cpu:{model}:{threads}t:{pages}"),
            devices: vec![model],
            software: format!(
                "{threads} threads of {available}{generation}; weights on {pages} pages; {}; shardplan-collect {}",
                planner_core::cost::card::last_level_cache_clause(llc),
                env!("CARGO_PKG_VERSION")
            ),
        };
        // Twice the last-level cache (64 MiB when unknown) is read before every timed run. It is written
        // once here: a never-written buffer is the kernel's zero page and would flush nothing.
        // A cache sysfs reports beyond 2 GiB is not believed: the buffer stays at 4 GiB.
        let flush_bytes = llc.unwrap_or(32 << 20).min(2 << 30) * 2;
        let flush = if flush { vec![1u8; usize::try_from(flush_bytes)?] } else { Vec::new() };
        Ok(Self { threads, hardware, flush, arena: Arena::default() })
    }
}

/// Copy bandwidth of `threads` threads over a buffer of `bytes` (2 × bytes moved per copy / best time).
fn copy_bandwidth(bytes: usize, threads: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let chunk = bytes.div_ceil(threads.max(1));
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for (d, c) in dst.chunks_mut(chunk).zip(src.chunks(chunk)) {
                s.spawn(move || d.copy_from_slice(c));
            }
        });
        best = best.min(t0.elapsed().as_secs_f64());
    }
    std::hint::black_box(&dst);
    2.0 * bytes as f64 / best
}

impl Backend for CpuBackend {
    fn hardware(&self) -> &Hardware {
        &self.hardware
    }

    fn cache_flush(&self) -> bool {
        !self.flush.is_empty()
    }

    fn max_comm_devices(&self) -> Option<usize> {
        None
    }

    fn memory_bytes(&self, _device: usize) -> Result<u64> {
        let available = meminfo_bytes("MemAvailable:")
            .ok_or_else(|| anyhow::anyhow!("cannot read MemAvailable from /proc/meminfo"))?;
        // The arena is reused for the next set, so its bytes count as available to it.
        Ok(available.saturating_add(self.arena.bytes() as u64))
    }

    fn compute(
        &mut self,
        _device: usize,
        tables: &[TableSpec],
        bags: Vec<Bags>,
        seed: u64,
        timing: Timing,
    ) -> Result<ComputeTimes> {
        check_fp32(tables)?;
        let _ = seed; // the arena's weights are initialised once; their values do not change the cost
        let mut set = FusedSet::in_arena(tables, bags, &mut self.arena, self.threads)?;
        Ok(cpu::time_compute(&mut set, timing.warmup, timing.reps, self.threads, &self.flush))
    }

    fn comm(&mut self, sample: &CommSample, batch: usize, timing: Timing) -> Result<CommTimes> {
        cpu::time_comm(sample, batch, timing.warmup, timing.reps)
    }

    fn renew_memory(&mut self) {
        self.arena = Arena::default();
    }

    fn probe(&mut self) -> Result<serde_json::Value> {
        let bytes = 256 << 20;
        let one = copy_bandwidth(bytes, 1);
        let all = copy_bandwidth(bytes, self.threads);
        Ok(json!({
            "backend": "cpu",
            "fingerprint": self.hardware.fingerprint,
            "cpu_model": self.hardware.devices[0],
            "threads": self.threads,
            "available_parallelism": std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            "mem_total_bytes": meminfo_bytes("MemTotal:"),
            "mem_available_bytes": meminfo_bytes("MemAvailable:"),
            "llc_bytes": shardplan_files::llc_bytes(),
            "copy_bandwidth": {
                "buffer_bytes": bytes,
                "formula": "2 x buffer bytes (read + write) / best of 5 copies",
                "one_thread_gb_per_s": one / 1e9,
                "all_threads_gb_per_s": all / 1e9,
            },
        }))
    }
}
