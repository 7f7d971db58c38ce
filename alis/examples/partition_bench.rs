//! The multilevel partitioner on the hypergraphs of a `shardplan dynamic --dump-dir` folder, timed alone
//! (no replay, no files written): per scope and shard count, summed km1 and summed CPU time, and with
//! Mt-KaHyPar's results of `tools/alis_kahypar.py --out` on the same folder, the km1 gap and the time ratio.
//!
//! ```sh
//! cargo run --release -p alis --example partition_bench -- out/dump-ml [out/mtk-ml.json] [--reps 3] [--scope direct|full] [--shards S] [--partitioner multilevel|deep] [--each]
//! ```
//!
//! Each hypergraph is partitioned `--reps` times from the same seed (the replay's: the stream's seed) and
//! the median time is kept, as `--dump-dir` does. `--each` prints every hypergraph's km1, gap and a hash of
//! its partition to stderr. Wall time of one thread: run it on a quiet machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use alis::partition::{Hypergraph, PartitionParams, Partitioner, UNASSIGNED, km1, partition_seeded};
use serde_json::Value;

type Res<T> = Result<T, Box<dyn std::error::Error>>;
/// A net: its pins and its weight.
type Net = (Vec<u32>, u32);

/// Totals of one scope and shard count.
#[derive(Default)]
struct Sums {
    km1: f64,
    mtk_km1: f64,
    ms: f64,
    mtk_ms: f64,
    count: usize,
}

/// A file's text; the error names the file.
fn read(path: &Path) -> Res<String> {
    Ok(std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?)
}

/// Reads an hMETIS file: the vertex count and the weighted nets (0-based pins).
fn read_hmetis(path: &Path) -> Res<(usize, Vec<Net>)> {
    let text = read(path)?;
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().ok_or("empty hMETIS file")?.split_whitespace().collect();
    let [m, n, ..] = head[..] else { return Err(format!("{}: header {head:?}", path.display()).into()) };
    let (m, n): (usize, usize) = (m.parse()?, n.parse()?);
    let weighted = matches!(head.get(2), Some(&"1" | &"11"));
    // Not sized from the header: a corrupt count must not allocate before the lines are read.
    let mut nets = Vec::new();
    for _ in 0..m {
        let vals: Vec<u32> = lines
            .next()
            .ok_or_else(|| format!("{}: fewer nets than its header's {m}", path.display()))?
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        let (w, pins) = match (weighted, vals.split_first()) {
            (true, Some((w, pins))) => (*w, pins),
            (true, None) => return Err(format!("{}: an empty weighted net", path.display()).into()),
            (false, _) => (1, &vals[..]),
        };
        let pins = pins
            .iter()
            .map(|p| p.checked_sub(1).ok_or_else(|| format!("{}: pin 0 (hMETIS pins count from 1)", path.display())))
            .collect::<Result<_, _>>()?;
        nets.push((pins, w));
    }
    Ok((n, nets))
}

fn main() -> Res<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut take = |flag: &str| -> Res<Option<String>> {
        let Some(i) = args.iter().position(|a| a == flag) else { return Ok(None) };
        let value = args.get(i + 1).ok_or(format!("{flag} needs a value"))?.clone();
        args.drain(i..=i + 1);
        Ok(Some(value))
    };
    let reps: usize = take("--reps")?.map_or(Ok(3), |v| v.parse())?;
    let only_scope = take("--scope")?;
    let only_shards: Option<usize> = take("--shards")?.map(|v| v.parse()).transpose()?;
    let partitioner: Partitioner = take("--partitioner")?.map_or(Ok(Partitioner::Multilevel), |v| v.parse())?;
    let each = args.iter().position(|a| a == "--each").map(|i| args.remove(i)).is_some();
    let dir = PathBuf::from(args.first().ok_or(
        "usage: partition_bench DUMP_DIR [MTK.json] [--reps N] [--scope direct|full] [--shards S] [--partitioner P] [--each]",
    )?);
    let manifest: Value = serde_json::from_str(&read(&dir.join("manifest.json"))?)?;
    let mut mtk: BTreeMap<(String, u64, u64, u64), (f64, f64)> = BTreeMap::new();
    if let Some(path) = args.get(1) {
        let v: Value = serde_json::from_str(&read(Path::new(path))?)?;
        for r in v["rows"].as_array().ok_or("no rows in the Mt-KaHyPar results")? {
            let key = (
                r["scope"].as_str().unwrap_or_default().to_string(),
                r["seed"].as_u64().unwrap_or(0),
                r["update"].as_u64().unwrap_or(0),
                r["shards"].as_u64().unwrap_or(0),
            );
            mtk.insert(key, (r["mtk_km1"].as_f64().unwrap_or(f64::NAN), r["mtk_cpu_ms"].as_f64().unwrap_or(f64::NAN)));
        }
    }
    let cfg = &manifest["config"];
    let eps = manifest["epsilon"].as_f64().ok_or("no epsilon")?;
    let max_iters = cfg["max_iters"].as_u64().unwrap_or(8) as usize;
    let mut sums: BTreeMap<(String, usize), Sums> = BTreeMap::new();
    for inst in manifest["instances"].as_array().ok_or("no instances")? {
        let scope = inst["scope"].as_str().unwrap_or_default().to_string();
        if only_scope.as_ref().is_some_and(|s| *s != scope) {
            continue;
        }
        let seed = inst["seed"].as_u64().unwrap_or(0);
        let update = inst["update"].as_u64().unwrap_or(0);
        let (n, nets) = read_hmetis(&dir.join(inst["file"].as_str().ok_or("no file")?))?;
        let hg = Hypergraph::with_weights(n, nets.iter().map(|(p, w)| (p.as_slice(), *w)))?;
        for o in inst["ours"].as_array().ok_or("no results")? {
            let shards = o["shards"].as_u64().ok_or("no shards")? as usize;
            if only_shards.is_some_and(|s| s != shards) {
                continue;
            }
            let cap = o["cap"]
                .as_u64()
                .map_or_else(|| ((1.0 + eps) * n as f64 / shards as f64).ceil() as usize, |c| c as usize);
            let params = PartitionParams { shards, caps: vec![cap; shards], max_iters, p_fanout: 0.5, partitioner };
            let init = vec![UNASSIGNED; n];
            let mut times = Vec::with_capacity(reps);
            let mut part = Vec::new();
            for _ in 0..reps.max(1) {
                let t = Instant::now();
                part = partition_seeded(&hg, &init, &params, seed)?.0;
                times.push(t.elapsed().as_secs_f64() * 1e3);
            }
            times.sort_by(f64::total_cmp);
            let ours = km1(&hg, &part) as f64;
            let (theirs, their_ms) =
                mtk.get(&(scope.clone(), seed, update, shards as u64)).copied().unwrap_or((f64::NAN, f64::NAN));
            if each {
                // FNV-1a over the blocks: two builds that print the same hash made the same partition.
                let hash = part
                    .iter()
                    .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
                eprintln!(
                    "{scope} seed {seed} update {update} S {shards}: rows {n} nets {} km1 {ours:.0} Mt-KaHyPar {theirs:.0} gap {:+.1}% partition {hash:016x}",
                    nets.len(),
                    100.0 * (ours / theirs - 1.0)
                );
            }
            let s = sums.entry((scope.clone(), shards)).or_default();
            s.km1 += ours;
            s.mtk_km1 += theirs;
            s.ms += times[times.len() / 2];
            s.mtk_ms += their_ms;
            s.count += 1;
        }
    }
    println!("| scope | S | hypergraphs | km1 | Mt-KaHyPar km1 | gap | ms | Mt-KaHyPar CPU ms | ratio |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for ((scope, shards), s) in &sums {
        println!(
            "| {scope} | {shards} | {} | {:.0} | {:.0} | {:+.1}% | {:.1} | {:.1} | {:.1}× |",
            s.count,
            s.km1,
            s.mtk_km1,
            100.0 * (s.km1 / s.mtk_km1 - 1.0),
            s.ms,
            s.mtk_ms,
            s.mtk_ms / s.ms
        );
    }
    Ok(())
}
