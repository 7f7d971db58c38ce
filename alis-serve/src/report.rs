//! The Markdown table of a serving benchmark: one row per (S, strategy), seeds pooled (means of the
//! measured figures, sums of the counts).

use std::fmt::Write;

use crate::bench::CellReport;

/// Renders `cells` as one table per shard count, strategies in the order first seen.
#[must_use]
pub fn markdown(cells: &[CellReport]) -> String {
    let mut s = String::new();
    let mut shard_counts: Vec<usize> = cells.iter().map(|c| c.shards).collect();
    shard_counts.dedup();
    shard_counts.sort_unstable();
    shard_counts.dedup();
    for sh in shard_counts {
        let _ = writeln!(s, "### S = {sh}\n");
        let _ = writeln!(
            s,
            "| strategy | p50 µs | p95 µs | p99 µs | req/s | mean fanout | epoch lag | migrated rows/update | \
             migration ms (mean / max) | misses | wrong values | retries | failed | kills | lost rows | wrong at rest | stray rows |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        let mut names: Vec<&str> = Vec::new();
        for c in cells.iter().filter(|c| c.shards == sh) {
            if !names.contains(&c.strategy.as_str()) {
                names.push(&c.strategy);
            }
        }
        for name in names {
            let runs: Vec<&CellReport> = cells.iter().filter(|c| c.shards == sh && c.strategy == name).collect();
            let n = runs.len() as f64;
            let mean = |f: &dyn Fn(&CellReport) -> f64| runs.iter().map(|c| f(c)).sum::<f64>() / n;
            let sum = |f: &dyn Fn(&CellReport) -> u64| runs.iter().map(|c| f(c)).sum::<u64>();
            let per_update = {
                let (moved, updates) =
                    runs.iter().fold((0u64, 0usize), |a, c| (a.0 + c.migrated_total, a.1 + c.updates));
                moved as f64 / updates.max(1) as f64
            };
            let _ = writeln!(
                s,
                "| {name} | {:.0} | {:.0} | {:.0} | {:.0} | {:.3} | {:.2} | {:.1} | {:.1} / {:.1} | {} | {} | {} | {} | {} | {} | {} | {} |",
                mean(&|c| c.p50_us),
                mean(&|c| c.p95_us),
                mean(&|c| c.p99_us),
                mean(&|c| c.throughput_rps),
                mean(&|c| c.mean_fanout),
                mean(&|c| c.mean_epoch_lag),
                per_update,
                mean(&|c| c.migration_ms),
                runs.iter().map(|c| c.migration_max_ms).fold(0.0, f64::max),
                sum(&|c| c.misses),
                sum(&|c| c.wrong_values),
                sum(&|c| c.retries),
                sum(&|c| c.failed_requests),
                sum(&|c| c.kills),
                sum(&|c| c.lost_rows),
                sum(&|c| c.wrong_at_rest),
                sum(&|c| c.stray_rows),
            );
        }
        s.push('\n');
    }
    s
}
