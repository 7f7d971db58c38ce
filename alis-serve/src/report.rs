//! The Markdown tables of a serving benchmark: one row per (S, strategy), runs pooled (means of the
//! measured figures, sums of the counts); and, where a strategy has two or more runs (seeds or
//! `--repeats`), their spread and paired comparisons with the first strategy, the form a latency claim
//! on a shared machine needs.

use std::fmt::Write;

use crate::bench::CellReport;

/// Renders `cells` as one table per shard count, strategies in the order first seen.
#[must_use]
pub fn markdown(cells: &[CellReport]) -> String {
    let mut s = String::new();
    for sh in shard_counts(cells) {
        let _ = writeln!(s, "### S = {sh}\n");
        let _ = writeln!(
            s,
            "| strategy | p50 µs | p95 µs | p99 µs | req/s | mean fanout | epoch lag | migrated rows/update | \
             migration ms (mean / max) | misses | wrong values | retries | failed | kills | lost rows | wrong at rest | stray rows |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for name in strategies(cells, sh) {
            let runs = runs_of(cells, sh, name);
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
    s.push_str(&runs_markdown(cells));
    s
}

/// The shard counts of `cells`, ascending.
fn shard_counts(cells: &[CellReport]) -> Vec<usize> {
    let mut counts: Vec<usize> = cells.iter().map(|c| c.shards).collect();
    counts.sort_unstable();
    counts.dedup();
    counts
}

/// The strategies run with `sh` servers, in the order first seen.
fn strategies(cells: &[CellReport], sh: usize) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for c in cells.iter().filter(|c| c.shards == sh) {
        if !names.contains(&c.strategy.as_str()) {
            names.push(&c.strategy);
        }
    }
    names
}

/// The runs of strategy `name` with `sh` servers.
fn runs_of<'a>(cells: &'a [CellReport], sh: usize, name: &str) -> Vec<&'a CellReport> {
    cells.iter().filter(|c| c.shards == sh && c.strategy == name).collect()
}

/// The median of `xs` (the mean of the middle two for an even count); 0 when empty.
fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => 0.0,
        n if n % 2 == 1 => xs[n / 2],
        n => f64::midpoint(xs[n / 2 - 1], xs[n / 2]),
    }
}

/// `median [min–max]` of one figure over runs.
fn spread(runs: &[&CellReport], f: fn(&CellReport) -> f64) -> String {
    let mut xs: Vec<f64> = runs.iter().map(|c| f(c)).collect();
    let m = median(&mut xs);
    format!("{m:.0} [{:.0}–{:.0}]", xs.first().copied().unwrap_or(0.0), xs.last().copied().unwrap_or(0.0))
}

/// Where some (S, strategy) has two or more runs: per S, each strategy's median and range over its runs of
/// p50, p99 and throughput, and, paired with the first strategy's run of the same seed and repeat, in how
/// many pairs its p50 and p99 were lower and the median of its p50 and p99 over the reference's. Empty
/// otherwise.
#[must_use]
pub fn runs_markdown(cells: &[CellReport]) -> String {
    let mut s = String::new();
    for sh in shard_counts(cells) {
        let table: Vec<(&str, Vec<&CellReport>)> =
            strategies(cells, sh).into_iter().map(|name| (name, runs_of(cells, sh, name))).collect();
        if table.iter().all(|(_, runs)| runs.len() < 2) {
            continue;
        }
        let (reference, ref_runs) = (table[0].0, &table[0].1);
        let _ = writeln!(s, "### S = {sh}: spread over runs, and paired with {reference}\n");
        let _ = writeln!(
            s,
            "| strategy | runs | p50 µs, median [range] | p99 µs, median [range] | req/s, median [range] | \
             p50 below {reference}'s | p99 below {reference}'s | p50 ÷ {reference}'s, median | p99 ÷ {reference}'s, median |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
        for (i, (name, runs)) in table.iter().enumerate() {
            let paired = if i == 0 {
                "– | – | – | –".to_string()
            } else {
                let pairs: Vec<(&CellReport, &CellReport)> = runs
                    .iter()
                    .filter_map(|c| {
                        ref_runs.iter().find(|r| r.seed == c.seed && r.repeat == c.repeat).map(|r| (*c, *r))
                    })
                    .collect();
                let n = pairs.len();
                let below = |f: fn(&CellReport) -> f64| pairs.iter().filter(|(c, r)| f(c) < f(r)).count();
                let ratio = |f: fn(&CellReport) -> f64| {
                    let mut xs: Vec<f64> = pairs.iter().filter(|(_, r)| f(r) > 0.0).map(|(c, r)| f(c) / f(r)).collect();
                    if xs.is_empty() { "–".to_string() } else { format!("{:.2}", median(&mut xs)) }
                };
                format!(
                    "{}/{n} | {}/{n} | {} | {}",
                    below(|c| c.p50_us),
                    below(|c| c.p99_us),
                    ratio(|c| c.p50_us),
                    ratio(|c| c.p99_us)
                )
            };
            let _ = writeln!(
                s,
                "| {name} | {} | {} | {} | {} | {paired} |",
                runs.len(),
                spread(runs, |c| c.p50_us),
                spread(runs, |c| c.p99_us),
                spread(runs, |c| c.throughput_rps),
            );
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::Load;

    fn cell(strategy: &str, repeat: usize, p50: f64, p99: f64) -> CellReport {
        CellReport {
            strategy: strategy.into(),
            shards: 4,
            seed: 0,
            repeat,
            load: Load::Open { rate_per_s: 4000.0 },
            requests: 10,
            scored_requests: 9,
            windows_served: 2,
            scored_wall_s: 1.0,
            throughput_rps: 9.0,
            p50_us: p50,
            p95_us: p99,
            p99_us: p99,
            max_us: p99,
            mean_us: p50,
            mean_fanout: 2.0,
            mean_epoch_lag: 0.0,
            updates: 1,
            migrated_rows: vec![0],
            migrated_total: 0,
            update_ms: 0.0,
            migration_ms: 0.0,
            migration_max_ms: 0.0,
            misses: 0,
            wrong_values: 0,
            retries: 0,
            failed_requests: 0,
            stale_lookups: 0,
            stale_copies: 0,
            kills: 0,
            kills_by_phase: [0; 4],
            kills_interrupting: 0,
            torn_bytes: 0,
            checks: 1,
            lost_rows: 0,
            wrong_at_rest: 0,
            stray_rows: 0,
            source_missing: 0,
        }
    }

    #[test]
    fn one_run_each_has_no_spread_table() {
        let cells = [cell("hash", 0, 400.0, 3000.0), cell("alis", 0, 300.0, 2000.0)];
        assert_eq!(runs_markdown(&cells), "");
        assert!(!markdown(&cells).contains("spread over runs"));
    }

    #[test]
    fn runs_are_summarised_by_median_and_range_and_paired_by_repeat() {
        // alis beats hash's p50 in repeats 0 and 2, not in 1 (paired by repeat, not by rank); its p99 never.
        let cells = [
            cell("hash", 0, 400.0, 3000.0),
            cell("alis", 0, 300.0, 3500.0),
            cell("alis", 1, 900.0, 9000.0),
            cell("hash", 1, 500.0, 4000.0),
            cell("hash", 2, 1000.0, 5000.0),
            cell("alis", 2, 800.0, 6000.0),
        ];
        let t = runs_markdown(&cells);
        assert!(t.contains("### S = 4: spread over runs, and paired with hash"), "{t}");
        assert!(t.contains("| hash | 3 | 500 [400–1000] | 4000 [3000–5000] | 9 [9–9] | – | – | – | – |"), "{t}");
        // p50 ratios 0.75, 1.8, 0.8 → median 0.80; p99 ratios 1.167, 2.25, 1.2 → 1.20.
        assert!(
            t.contains("| alis | 3 | 800 [300–900] | 6000 [3500–9000] | 9 [9–9] | 2/3 | 0/3 | 0.80 | 1.20 |"),
            "{t}"
        );
        assert!(markdown(&cells).ends_with(&t));
    }

    #[test]
    fn median_of_even_counts_is_the_midpoint() {
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut []), 0.0);
    }
}
