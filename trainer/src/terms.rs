//! Fitting a profile's memory-terms compute model (`planner_core::cost::terms`): non-negative least
//! squares of the measured set times on the sets' summed terms, each sample weighted by the inverse of its
//! time so that every set counts by its relative error (a planner compares devices of very different
//! loads). Non-negative, because every term is work the machine does: a negative cost per unit would let
//! a search gain by adding work.
//!
//! The solver is Lawson and Hanson's active-set method (C. L. Lawson, R. J. Hanson, *Solving Least
//! Squares Problems*, 1974, chapter 23), exact for the six columns here; the passive-set subproblems are
//! solved by Householder QR on the weighted rows (no normal equations, so no squared condition number).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use planner_core::cost::card::ModelCard;
use planner_core::cost::terms::{TERM_COUNT, TERM_NAMES, TermsCard, piece_terms};

use crate::data::{self, ComputeSample, Loaded};
use crate::models::metrics;
use shardplan_files::write_atomic;

use crate::split_80_10_10;

/// The summed terms of every sample's set, at the data's batch.
#[must_use]
pub fn sample_terms(samples: &[ComputeSample], batch: u32, llc_bytes: u64) -> Vec<[f64; TERM_COUNT]> {
    samples
        .iter()
        .map(|s| {
            let mut sum = [0.0; TERM_COUNT];
            for p in s.piece_refs() {
                for (a, b) in sum.iter_mut().zip(piece_terms(&p, batch, llc_bytes)) {
                    *a += b;
                }
            }
            sum
        })
        .collect()
}

/// The least-squares solution of `a x ≈ b` over the columns in `cols` (others 0), by Householder QR.
/// `None` when those columns are linearly dependent.
#[allow(clippy::many_single_char_names)] // A, b, x as in the least-squares problem; R, y, v, z as in the QR solve
#[allow(clippy::needless_range_loop)] // column j of R is updated down its rows i: the indices are the algorithm
fn least_squares(a: &[[f64; TERM_COUNT]], b: &[f64], cols: &[usize]) -> Option<[f64; TERM_COUNT]> {
    let (m, n) = (a.len(), cols.len());
    if n == 0 || m < n {
        return None;
    }
    let mut r: Vec<Vec<f64>> = a.iter().map(|row| cols.iter().map(|&j| row[j]).collect()).collect();
    let mut y = b.to_vec();
    for k in 0..n {
        let norm = (k..m).map(|i| r[i][k] * r[i][k]).sum::<f64>().sqrt();
        if norm <= 1e-12 * (1.0 + r.iter().map(|row| row[k].abs()).fold(0.0, f64::max)) {
            return None;
        }
        let alpha = if r[k][k] > 0.0 { -norm } else { norm };
        let mut v: Vec<f64> = (k..m).map(|i| r[i][k]).collect();
        v[0] -= alpha;
        let vv: f64 = v.iter().map(|x| x * x).sum();
        if vv > 0.0 {
            for j in k..n {
                let dot: f64 = (k..m).map(|i| v[i - k] * r[i][j]).sum();
                for i in k..m {
                    r[i][j] -= 2.0 * dot / vv * v[i - k];
                }
            }
            let dot: f64 = (k..m).map(|i| v[i - k] * y[i]).sum();
            for i in k..m {
                y[i] -= 2.0 * dot / vv * v[i - k];
            }
        }
    }
    let mut z = vec![0.0; n];
    for k in (0..n).rev() {
        let s: f64 = (k + 1..n).map(|j| r[k][j] * z[j]).sum();
        z[k] = (y[k] - s) / r[k][k];
    }
    let mut x = [0.0; TERM_COUNT];
    for (&j, v) in cols.iter().zip(z) {
        x[j] = v;
    }
    Some(x)
}

/// Non-negative least squares: `x ≥ 0` minimising `‖a x − b‖` (Lawson–Hanson).
#[must_use]
#[allow(clippy::many_single_char_names)] // A, b, x, w, s as in Lawson and Hanson's statement of the method
pub fn nnls(a: &[[f64; TERM_COUNT]], b: &[f64]) -> [f64; TERM_COUNT] {
    let gradient = |x: &[f64; TERM_COUNT]| {
        let mut w = [0.0; TERM_COUNT];
        for (row, bi) in a.iter().zip(b) {
            let resid = bi - row.iter().zip(x).map(|(r, v)| r * v).sum::<f64>();
            for (wj, rj) in w.iter_mut().zip(row) {
                *wj += rj * resid;
            }
        }
        w
    };
    let scale = b.iter().map(|v| v.abs()).fold(0.0, f64::max).max(1.0);
    let tol = 1e-10 * scale * a.len().max(1) as f64;
    let mut x = [0.0; TERM_COUNT];
    let mut passive: Vec<usize> = Vec::new();
    // Columns that add nothing (linearly dependent on the passive ones): left at 0 for good.
    let mut dependent: Vec<usize> = Vec::new();
    for _ in 0..3 * TERM_COUNT {
        let w = gradient(&x);
        let Some(j) = (0..TERM_COUNT)
            .filter(|j| !passive.contains(j) && !dependent.contains(j) && w[*j] > tol)
            .max_by(|&p, &q| w[p].total_cmp(&w[q]))
        else {
            break;
        };
        passive.push(j);
        // Every pass of this loop drops at least one column from `passive`, so it ends.
        while !passive.is_empty() {
            let Some(s) = least_squares(a, b, &passive) else {
                passive.retain(|&k| k != j);
                dependent.push(j);
                break;
            };
            if passive.iter().all(|&k| s[k] > 0.0) {
                x = s;
                break;
            }
            // Step from x towards s until the first passive coefficient reaches 0, and drop it.
            let alpha =
                passive.iter().filter(|&&k| s[k] <= 0.0).map(|&k| x[k] / (x[k] - s[k])).fold(f64::INFINITY, f64::min);
            for k in 0..TERM_COUNT {
                x[k] += alpha * (s[k] - x[k]);
            }
            passive.retain(|&k| x[k] > 1e-15);
            for (k, v) in x.iter_mut().enumerate() {
                if !passive.contains(&k) {
                    *v = 0.0;
                }
            }
        }
    }
    x
}

/// Coefficients fitted on the samples `idx` by relative error: each row and target divided by the
/// sample's time (samples under 0.01 ms are left out: their relative error is noise).
#[must_use]
pub fn fit_relative(terms: &[[f64; TERM_COUNT]], targets: &[f64], idx: &[usize]) -> [f64; TERM_COUNT] {
    let rows: Vec<usize> = idx.iter().copied().filter(|&i| targets[i] >= crate::models::MAPE_FLOOR_MS).collect();
    let a: Vec<[f64; TERM_COUNT]> = rows.iter().map(|&i| terms[i].map(|t| t / targets[i])).collect();
    nnls(&a, &vec![1.0; rows.len()])
}

/// The last-level cache a collector recorded in its hardware note (`… last-level cache 32.0 MiB …`),
/// bytes.
#[must_use]
pub fn llc_from_hardware(hardware: &serde_json::Value) -> Option<u64> {
    let clause = planner_core::cost::card::last_level_cache(hardware.get("software")?.as_str()?)?;
    let mut words = clause.strip_prefix("last-level cache ")?.split_whitespace();
    let mib: f64 = words.next()?.parse().ok()?;
    let unit = words.next()?.trim_end_matches([';', ',']);
    (unit == "MiB" && mib.is_finite() && mib > 0.0).then(|| (mib * 1024.0 * 1024.0).round() as u64)
}

/// Fits the terms model on `data`'s compute samples with the 80/10/10 split of `seed` (the split the
/// profile's networks use), reporting each split's accuracy.
pub fn fit_terms(data: &Loaded, seed: u64, llc_bytes: u64) -> Result<TermsCard> {
    if llc_bytes == 0 {
        bail!("`--llc-mib` must be > 0");
    }
    let samples = data.compute.len();
    if samples < 10 {
        bail!("{samples} compute samples: at least 10 are needed for an 80/10/10 split");
    }
    let terms = sample_terms(&data.compute, data.batch_size, llc_bytes);
    let targets: Vec<f64> = data.compute.iter().map(|s| s.target_ms).collect();
    let (tr, va, te) = split_80_10_10(samples, seed);
    let c = fit_relative(&terms, &targets, &tr);
    let predict = |idx: &[usize]| -> (Vec<f64>, Vec<f64>) {
        idx.iter().map(|&i| (terms[i].iter().zip(&c).map(|(t, k)| t * k).sum::<f64>(), targets[i])).unzip()
    };
    let mut m = BTreeMap::new();
    for (split, idx) in [("train", &tr), ("val", &va), ("test", &te)] {
        let (p, t) = predict(idx);
        m.insert(format!("terms/random/{split}"), metrics(&p, &t));
    }
    Ok(TermsCard {
        coefficients: TERM_NAMES.iter().zip(c).map(|(name, v)| ((*name).to_string(), v)).collect(),
        llc_bytes,
        fitted_on: format!(
            "non-negative least squares on relative error, training split of {} samples (80/10/10, seed {seed}), dataset sha256 {}",
            tr.len(),
            data.sha256
        ),
        metrics: m,
    })
}

/// `shardplan-train fit-terms`: fits the memory-terms model on a profile's datasets and writes it into
/// the profile's card (`compute_terms`), leaving everything else in the card as it was.
pub fn fit_into_profile(profile: &Path, datasets: &[PathBuf], llc_mib: Option<f64>) -> Result<TermsCard> {
    let card_path = profile.join("card.json");
    let text = std::fs::read_to_string(&card_path)
        .with_context(|| format!("reading the profile's card {}", card_path.display()))?;
    let mut card = ModelCard::from_json(&text).with_context(|| format!("reading {}", card_path.display()))?;
    if card.compute.on_terms {
        bail!(
            "profile `{}`'s networks learned on its memory-terms model (compute.on_terms): refitting the terms alone \
             would change what they scale; retrain the profile (`shardplan-train profile --target over-terms`) instead",
            card.name
        );
    }
    // The cache size is settled before any dataset is read.
    let llc = match llc_mib {
        Some(m) if m.is_finite() && m > 0.0 && m <= 1e6 => (m * 1024.0 * 1024.0).round() as u64,
        Some(m) => bail!("`--llc-mib` = {m} is invalid: a size in (0, 1e6] MiB"),
        None => llc_from_hardware(&card.hardware).ok_or_else(|| {
            anyhow::anyhow!(
                "the profile's hardware note records no last-level cache size: give it with `--llc-mib` (an H100's L2 is 50 MiB)"
            )
        })?,
    };
    let mut loaded = data::load(datasets, &card.compute.normalisation)?;
    if loaded.hardware.get("fingerprint") != card.hardware.get("fingerprint") {
        bail!(
            "the datasets were measured on {} but the profile on {}: fit a profile on its own hardware's data",
            loaded.hardware.get("fingerprint").unwrap_or(&serde_json::Value::Null),
            card.hardware.get("fingerprint").unwrap_or(&serde_json::Value::Null)
        );
    }
    if loaded.batch_size != card.compute.batch_size {
        bail!(
            "the datasets were measured at batch {} but the profile at {}",
            loaded.batch_size,
            card.compute.batch_size
        );
    }
    if let Some(r) = card.compute.reference_ms {
        loaded.normalise_speed(r)?;
    }
    if loaded.sha256 != card.compute.dataset.sha256 {
        eprintln!(
            "note: these datasets (sha256 {}) are not the ones the profile's networks were trained on ({})",
            loaded.sha256, card.compute.dataset.sha256
        );
    }
    let terms = fit_terms(&loaded, card.seed, llc)?;
    card.compute_terms = Some(terms.clone());
    card.check()?;
    write_atomic(&card_path, (serde_json::to_string_pretty(&card)? + "\n").as_bytes())?;
    Ok(terms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nnls_recovers_non_negative_coefficients_and_clamps_negative_ones() {
        // b = 2·t0 + 0.5·t3 exactly, on varied rows: the fit finds it.
        let rows: Vec<[f64; TERM_COUNT]> = (0..40)
            .map(|i| {
                let f = f64::from(i);
                [1.0, (f * 0.37).sin().abs(), f * 0.1, (f * 0.71).cos().abs() * 3.0, (f % 7.0) * 0.2, f.sqrt()]
            })
            .collect();
        let truth = [2.0, 0.0, 0.0, 0.5, 0.0, 0.0];
        let b: Vec<f64> = rows.iter().map(|r| r.iter().zip(&truth).map(|(x, c)| x * c).sum()).collect();
        let x = nnls(&rows, &b);
        for (got, want) in x.iter().zip(&truth) {
            assert!((got - want).abs() < 1e-8, "{x:?}");
        }
        // A target that only a negative coefficient would fit: the fit stays at 0 there.
        let b: Vec<f64> = rows.iter().map(|r| 3.0 * r[0] - 0.4 * r[2]).collect();
        let x = nnls(&rows, &b);
        assert!(x.iter().all(|&v| v >= 0.0), "{x:?}");
        assert_eq!(x[2], 0.0, "{x:?}");
        // No worse than any single non-negative column alone.
        let err = |x: &[f64; TERM_COUNT]| -> f64 {
            rows.iter().zip(&b).map(|(r, bi)| (r.iter().zip(x).map(|(a, c)| a * c).sum::<f64>() - bi).powi(2)).sum()
        };
        let mut alone = [0.0; TERM_COUNT];
        alone[0] = 3.0 * 0.5;
        assert!(err(&x) <= err(&alone) + 1e-9);
        // Two identical columns: one of them carries the weight, the fit is still exact.
        let twins: Vec<[f64; TERM_COUNT]> = rows.iter().map(|r| [r[0], r[1], r[2], r[3], r[3], r[5]]).collect();
        let b: Vec<f64> = twins.iter().map(|r| 2.0 * r[0] + 0.5 * r[3]).collect();
        let x = nnls(&twins, &b);
        assert!((x[0] - 2.0).abs() < 1e-8 && (x[3] + x[4] - 0.5).abs() < 1e-8, "{x:?}");
    }

    #[test]
    fn the_cache_size_is_read_from_the_hardware_note() {
        let hw = serde_json::json!({"software": "2 threads of 2; weights on thp pages; last-level cache 32.0 MiB; shardplan-collect 0.1.0"});
        assert_eq!(llc_from_hardware(&hw), Some(32 << 20));
        assert_eq!(llc_from_hardware(&serde_json::json!({"software": "driver 13000, nccl 22803"})), None);
        assert_eq!(llc_from_hardware(&serde_json::json!({"software": "last-level cache x MiB;"})), None);
        assert_eq!(llc_from_hardware(&serde_json::json!({})), None);
    }
}
