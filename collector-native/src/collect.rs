//! The collection loop: which samples this shard owns, resuming a killed run, appending one flushed
//! line per sample, the progress bar and stopping on Ctrl-C after the sample in flight.
//!
//! A run holds the exclusive advisory lock of its output from before it reads it until it ends, so a
//! second run on the same `--out` (both with `--resume`, say) fails at once naming the file, instead
//! of measuring the same samples again and appending them beside the first run's.
//!
//! Preparing a sample (drawing its tables and generating 65,536 bags of synthetic lookups per table)
//! costs far more host time than timing it on a GPU. So the loop prepares a chunk of samples on all
//! host threads first, then times them one after another: nothing runs on the host while a sample is
//! timed, so preparation never disturbs a measurement.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use planner_core::dataset::{CostRecord, HardwarePolicy, complete_prefix_len, parse_dataset};

/// `--shard i/n`: this process measures global sample indices `g` with `g % n == i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// i, in `0..n`.
    pub index: u32,
    /// n ≥ 1.
    pub count: u32,
}

impl Shard {
    /// Whether global sample `g` belongs to this shard.
    #[must_use]
    pub fn owns(self, g: u64) -> bool {
        g % u64::from(self.count) == u64::from(self.index)
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || format!("--shard = {text:?} is invalid: expected i/n with n >= 1 and 0 <= i < n, e.g. 0/4");
        let (i, n) = text.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }
}

/// What the loop needs to know about a run.
#[derive(Debug, Clone)]
pub struct RunPlan {
    /// Output file (JSON Lines).
    pub out: PathBuf,
    /// Total samples of the whole run (all shards).
    pub samples: u64,
    /// This shard.
    pub shard: Shard,
    /// Continue an existing file.
    pub resume: bool,
    /// Hide the progress bar.
    pub quiet: bool,
}

/// Outcome of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Records already in the file.
    pub existing: u64,
    /// Records written now.
    pub written: u64,
    /// Samples of this shard still missing (non-zero after Ctrl-C).
    pub remaining: u64,
    /// Bytes of a truncated last line cut on resume.
    pub repaired_bytes: u64,
}

/// Reads an existing output for `--resume`: cuts a truncated last line, validates every record and
/// checks it belongs to this run. Returns the indices already measured and the bytes cut.
fn load_existing(plan: &RunPlan, template: &CostRecord) -> Result<(BTreeSet<u64>, u64)> {
    let path = &plan.out;
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((BTreeSet::new(), 0)),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let keep = complete_prefix_len(&text);
    let cut = (text.len() - keep) as u64;
    if cut > 0 {
        let f = OpenOptions::new()
            .write(true)
            .open(path)
            .with_context(|| format!("opening {} to repair it", path.display()))?;
        f.set_len(keep as u64).with_context(|| format!("cutting the truncated last line of {}", path.display()))?;
        f.sync_all().with_context(|| format!("syncing {}", path.display()))?;
    }
    let records = parse_dataset(&path.display().to_string(), &text[..keep], HardwarePolicy::Single)?;
    let mut done = BTreeSet::new();
    for r in &records {
        let ctx = format!("{} (record of sample {})", path.display(), r.sample_index);
        let checks: [(&str, String, String); 6] = [
            ("kind", r.kind().into(), template.kind().into()),
            ("run", serde_json::to_string(&r.run)?, serde_json::to_string(&template.run)?),
            ("hardware.fingerprint", r.hardware.fingerprint.clone(), template.hardware.fingerprint.clone()),
            ("batch_size", r.batch_size.to_string(), template.batch_size.to_string()),
            ("protocol", serde_json::to_string(&r.protocol)?, serde_json::to_string(&template.protocol)?),
            ("dtype", format!("{:?}", r.dtype), format!("{:?}", template.dtype)),
        ];
        for (field, got, want) in checks {
            if got != want {
                bail!(
                    "{ctx}: field `{field}` = {got} differs from this run's {want}; resume with the same options, or write to another --out"
                );
            }
        }
        if !plan.shard.owns(r.sample_index) {
            bail!(
                "{ctx}: sample {} does not belong to --shard {}/{}",
                r.sample_index,
                plan.shard.index,
                plan.shard.count
            );
        }
        if !done.insert(r.sample_index) {
            bail!("{ctx}: sample {} appears twice; the file was not written by one run of this tool", r.sample_index);
        }
    }
    Ok((done, cut))
}

/// Appends one record as one line and flushes it to the operating system.
fn append(file: &mut File, record: &CostRecord) -> Result<()> {
    let mut line = serde_json::to_string(record)?;
    line.push('\n');
    file.write_all(line.as_bytes())?;
    file.flush()?;
    Ok(())
}

/// Opens a run's output for appending (creating it and its directory) with its exclusive lock: the
/// first thing a collection does, so a second run on the same file fails before it sets anything up.
/// The lock is held until the returned file is dropped (by [`run`], when the run ends).
pub fn lock_output(path: &Path) -> Result<File> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    shardplan_files::open_append_locked(path).context("--out")
}

/// Runs the loop, appending to `file` (`plan.out` as [`lock_output`] opened it). `template` is a record
/// carrying the run's identity (kind, run, hardware, batch, protocol, dtype) used to check a resumed
/// file; `prepare(g)` builds global sample `g`'s workload (called in parallel, a chunk ahead) and
/// `measure(g, workload)` times it.
pub fn run<P: Send>(
    plan: &RunPlan,
    mut file: File,
    template: &CostRecord,
    stop: &AtomicBool,
    prepare: impl Fn(u64) -> Result<P> + Sync,
    mut measure: impl FnMut(u64, P) -> Result<CostRecord>,
) -> Result<Summary> {
    let path: &Path = &plan.out;
    let Start { done, repaired_bytes, todo, bar } = start(plan, &file, template)?;
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let mut written = 0u64;
    'chunks: for chunk in todo.chunks(2 * threads) {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let prepared = prepare_parallel(chunk, threads, &prepare);
        for (&g, work) in chunk.iter().zip(prepared) {
            if stop.load(Ordering::SeqCst) {
                break 'chunks;
            }
            let work = work.with_context(|| format!("preparing sample {g}"))?;
            let record = measure(g, work).with_context(|| format!("measuring sample {g}"))?;
            append(&mut file, &record).with_context(|| format!("appending sample {g} to {}", path.display()))?;
            written += 1;
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(Summary { existing: done.len() as u64, written, remaining: todo.len() as u64 - written, repaired_bytes })
}

/// What a run knows before its first sample: the samples already in the file, the bytes a resume cut,
/// the samples to measure and the progress bar.
struct Start {
    done: BTreeSet<u64>,
    repaired_bytes: u64,
    todo: Vec<u64>,
    bar: ProgressBar,
}

/// Refuses a non-empty output without `--resume`, loads a resumed one, and lists what is left to measure.
fn start(plan: &RunPlan, file: &File, template: &CostRecord) -> Result<Start> {
    let path: &Path = &plan.out;
    let exists_nonempty = file.metadata().with_context(|| format!("reading {}", path.display()))?.len() > 0;
    if exists_nonempty && !plan.resume {
        bail!(
            "--out {} already exists and is not empty; pass --resume to continue it, or choose another --out",
            path.display()
        );
    }
    let (done, repaired_bytes) = if plan.resume { load_existing(plan, template)? } else { (BTreeSet::new(), 0) };
    let todo: Vec<u64> = (0..plan.samples).filter(|&g| plan.shard.owns(g) && !done.contains(&g)).collect();
    let bar = ProgressBar::new(todo.len() as u64);
    if plan.quiet {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} samples  {per_sec}  ETA {eta}  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    Ok(Start { done, repaired_bytes, todo, bar })
}

/// How [`run_rounds`] spreads each sample's timing: `count` rounds over groups of `group` samples, in an
/// order drawn from `seed` (and the group and round) each round.
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    /// Rounds per sample (≥ 1).
    pub count: u32,
    /// Samples per group (≥ 1).
    pub group: usize,
    /// Seed of the rounds' orders.
    pub seed: u64,
}

/// [`run`] with every sample timed in several rounds: the samples are taken in groups, a group prepared
/// (in parallel) and then timed once per round, every round in a new seeded order, so that a slow moment
/// of the host falls on one round of many samples instead of on all of one sample's runs. `time(g, work)`
/// times sample `g` once; `combine(g, work, times)` makes its record from its rounds, in round order. The
/// records of a group are appended when its last round ends: Ctrl-C or a failure loses at most the group
/// in flight, and `--resume` measures it again.
#[allow(clippy::too_many_arguments)] // `run`'s arguments, and the rounds' timing and combining apart
pub fn run_rounds<P: Send, T>(
    plan: &RunPlan,
    mut file: File,
    template: &CostRecord,
    stop: &AtomicBool,
    rounds: Rounds,
    prepare: impl Fn(u64) -> Result<P> + Sync,
    mut time: impl FnMut(u64, &P) -> Result<T>,
    mut combine: impl FnMut(u64, P, Vec<T>) -> Result<CostRecord>,
) -> Result<Summary> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let path: &Path = &plan.out;
    let Start { done, repaired_bytes, todo, bar } = start(plan, &file, template)?;
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let mut written = 0u64;
    'groups: for group in todo.chunks(rounds.group.max(1)) {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let mut works = Vec::with_capacity(group.len());
        for (&g, work) in group.iter().zip(prepare_parallel(group, threads, &prepare)) {
            works.push(work.with_context(|| format!("preparing sample {g}"))?);
        }
        let mut times: Vec<Vec<T>> = group.iter().map(|_| Vec::with_capacity(rounds.count as usize)).collect();
        let (first, last) = (group[0], group[group.len() - 1]);
        for r in 0..rounds.count {
            let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(
                rounds.seed ^ first.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(r).rotate_left(32),
            );
            let mut order: Vec<usize> = (0..group.len()).collect();
            order.shuffle(&mut rng);
            bar.set_message(format!("round {}/{} of samples {first}..={last}", r + 1, rounds.count));
            for i in order {
                if stop.load(Ordering::SeqCst) {
                    break 'groups;
                }
                let g = group[i];
                times[i].push(time(g, &works[i]).with_context(|| format!("measuring sample {g} (round {})", r + 1))?);
            }
        }
        for ((&g, work), t) in group.iter().zip(works).zip(times) {
            let record = combine(g, work, t).with_context(|| format!("combining the rounds of sample {g}"))?;
            append(&mut file, &record).with_context(|| format!("appending sample {g} to {}", path.display()))?;
            written += 1;
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(Summary { existing: done.len() as u64, written, remaining: todo.len() as u64 - written, repaired_bytes })
}

/// `prepare` over `items` on up to `threads` scoped threads (contiguous parts), results in item order.
pub fn prepare_parallel<P: Send>(
    items: &[u64],
    threads: usize,
    prepare: &(impl Fn(u64) -> Result<P> + Sync),
) -> Vec<Result<P>> {
    let part = items.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(part)
            .map(|part| scope.spawn(move || part.iter().map(|&g| prepare(g)).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_preparation_keeps_item_order_and_errors() {
        let items: Vec<u64> = (0..23).collect();
        for threads in [1, 2, 5, 64] {
            let out = prepare_parallel(&items, threads, &|g| if g == 7 { bail!("bad {g}") } else { Ok(g * g) });
            assert_eq!(out.len(), items.len());
            for (g, r) in items.iter().zip(&out) {
                match r {
                    Ok(v) => assert_eq!(*v, g * g),
                    Err(e) => assert_eq!((g, e.to_string()), (&7, "bad 7".to_string())),
                }
            }
        }
        assert!(prepare_parallel(&[], 4, &|g| Ok(g)).is_empty());
    }

    #[test]
    fn shards_parse_and_partition_the_indices() {
        let s: Shard = "1/3".parse().unwrap();
        assert_eq!(s, Shard { index: 1, count: 3 });
        for bad in ["3/3", "1", "a/2", "0/0", "-1/2", ""] {
            let e = bad.parse::<Shard>().unwrap_err();
            assert!(e.contains("--shard") && e.contains(&format!("{bad:?}")), "{e}");
        }
        let shards: Vec<Shard> = (0..3).map(|i| Shard { index: i, count: 3 }).collect();
        for g in 0..30 {
            assert_eq!(shards.iter().filter(|s| s.owns(g)).count(), 1);
        }
    }
}
