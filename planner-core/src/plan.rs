//! Plans: how every table is split (column-wise or row-wise) and the device of every piece.
//!
//! A table is split along **one** axis:
//! * **column-wise**: pieces of whole rows covering the columns `[0, dim)` contiguously, either the dim
//!   halved k times (NeuroShard's dyadic splits, aligned to their size) or equal blocks that divide the
//!   dim (TorchRec's column-wise blocks, e.g. 384 = 3 × 128);
//! * **row-wise**: pieces of all columns covering the rows `[0, rows)` in contiguous, non-empty ranges
//!   (TorchRec's row-wise sharding: each piece serves the lookups that hit its rows and produces partial
//!   sums for the whole batch, reduced across devices).
//!
//! The two do not combine: TorchRec's grid sharding (row ranges of column blocks) is not modelled.
//!
//! A task's [`SplitRule`] narrows this to what a TorchRec sharding plan can express
//! ([`SplitRule::TorchRec`]: equal column blocks; one row range per rank in rank order), checked by
//! [`Plan::new`] for that task and by the TorchRec export for any plan ([`Plan::check_torchrec_buildable`]).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::task::Task;

/// Which splits a task's plans may use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SplitRule {
    /// Every split [`Plan::new`] accepts: column pieces as dyadic halvings (NeuroShard's, e.g. 64 as
    /// [32, 16, 16]) or equal blocks, row ranges on any devices.
    #[default]
    #[serde(rename = "any")]
    Any,
    /// Only splits TorchRec can build: a column-split table in equal blocks (TorchRec's `column_wise`
    /// shards all have one width), a row-split table as one contiguous range per rank, rank 0 first
    /// (TorchRec's `row_wise` layout).
    #[serde(rename = "torchrec")]
    TorchRec,
}

impl SplitRule {
    /// The rule's name (`any`, `torchrec`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::TorchRec => "torchrec",
        }
    }

    /// Parses a rule's name.
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "any" => Ok(Self::Any),
            "torchrec" => Ok(Self::TorchRec),
            _ => Err(Error::field("split rule", "splits", format!("{text:?}"), "one of any, torchrec")),
        }
    }
}

/// A contiguous range of rows `[offset, offset + count)` of a table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowRange {
    /// First row.
    pub offset: u64,
    /// Number of rows (at least 1).
    pub count: u64,
}

/// One piece of a table placed on a device: columns `[col_offset, col_offset + dim)` of table
/// `table_id` (its index in the task), and either all its rows (`rows: None`) or the row range `rows`.
/// An unsplit table is one piece with offset 0, its full dim and all rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Piece {
    /// Index of the table in the task.
    pub table_id: usize,
    /// First column of the piece.
    pub col_offset: u32,
    /// Number of columns (a multiple of 4 dividing the table's dim).
    pub dim: u32,
    /// Device the piece is placed on.
    pub device: usize,
    /// The piece's rows when the table is split row-wise; `None` (the default, and absent in JSON) = all rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<RowRange>,
}

impl Piece {
    /// A piece of whole rows: columns `[col_offset, col_offset + dim)` of `table_id` on `device`.
    #[must_use]
    pub fn cols(table_id: usize, col_offset: u32, dim: u32, device: usize) -> Self {
        Self { table_id, col_offset, dim, device, rows: None }
    }

    /// A row-wise piece: rows `[row_offset, row_offset + rows)` and all `dim` columns of `table_id` on `device`.
    #[must_use]
    pub fn row_range(table_id: usize, dim: u32, device: usize, row_offset: u64, rows: u64) -> Self {
        Self { table_id, col_offset: 0, dim, device, rows: Some(RowRange { offset: row_offset, count: rows }) }
    }

    /// Rows held by the piece, given its table's row count.
    #[must_use]
    pub fn row_count(&self, table_rows: u64) -> u64 {
        self.rows.map_or(table_rows, |r| r.count)
    }

    fn sort_key(&self) -> (usize, u64, u32) {
        (self.table_id, self.rows.map_or(0, |r| r.offset), self.col_offset)
    }
}

/// A sharding plan for a task. Every instance returned by [`Plan::new`] is valid for its task:
/// each table is covered exactly once, either by column pieces (dyadic halvings aligned to their size,
/// or equal blocks dividing the dim; dims multiples of 4) or by row pieces (contiguous non-empty row
/// ranges of all columns), and every device index exists. Memory feasibility is a property of the plan's
/// report, not of the plan: the random baseline, for one, may overfill a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pieces: Vec<Piece>,
}

impl Plan {
    /// Validates `pieces` against `task` and builds the plan (pieces are kept sorted by table, then
    /// row offset, then column offset). A row split into a single range covering every row is stored
    /// as an unsplit piece (`rows: None`).
    pub fn new(task: &Task, mut pieces: Vec<Piece>) -> Result<Self> {
        pieces.sort_unstable_by_key(Piece::sort_key);
        let n_tables = task.tables.len();
        let n_dev = task.devices.count();
        for p in &pieces {
            let Some(table) = task.tables.get(p.table_id) else {
                return Err(Error::InvalidPlan(format!(
                    "piece names table_id {} but the task has {n_tables} tables",
                    p.table_id
                )));
            };
            if p.device >= n_dev {
                return Err(Error::InvalidPlan(format!(
                    "a piece of table `{}` is on device {} but the task has {n_dev} devices",
                    table.name, p.device
                )));
            }
        }
        let mut start = 0;
        while start < pieces.len() {
            let t = pieces[start].table_id;
            let end = start + pieces[start..].iter().take_while(|p| p.table_id == t).count();
            let group = &mut pieces[start..end];
            if group.iter().any(|p| p.rows.is_some()) {
                check_row_split(task, group)?;
                if let [only] = group {
                    only.rows = None;
                }
            } else {
                check_col_split(task, group)?;
            }
            if task.splits == SplitRule::TorchRec {
                check_torchrec_group(task, group)?;
            }
            start = end;
        }
        let mut covered = vec![false; n_tables];
        for p in &pieces {
            covered[p.table_id] = true;
        }
        if let Some(t) = covered.iter().position(|c| !c) {
            return Err(Error::InvalidPlan(format!(
                "table `{}` has 0 of its {} columns placed",
                task.tables[t].name, task.tables[t].dim
            )));
        }
        Ok(Self { pieces })
    }

    /// Every table unsplit, table `t` on `devices[t]`.
    pub fn unsplit(task: &Task, devices: &[usize]) -> Result<Self> {
        if devices.len() != task.tables.len() {
            return Err(Error::InvalidPlan(format!(
                "{} devices given for {} tables",
                devices.len(),
                task.tables.len()
            )));
        }
        let pieces = task
            .tables
            .iter()
            .zip(devices)
            .enumerate()
            .map(|(table_id, (t, &device))| Piece::cols(table_id, 0, t.dim, device))
            .collect();
        Self::new(task, pieces)
    }

    /// The pieces, sorted by table, then row offset, then column offset.
    #[must_use]
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// Indices into [`Plan::pieces`] of the pieces on each device.
    #[must_use]
    pub fn pieces_by_device(&self, n_devices: usize) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); n_devices];
        for (i, p) in self.pieces.iter().enumerate() {
            if let Some(v) = out.get_mut(p.device) {
                v.push(i);
            }
        }
        out
    }

    /// Number of tables that are split into more than one piece (column-wise or row-wise).
    #[must_use]
    pub fn split_tables(&self) -> usize {
        let mut n = 0;
        let mut last = None;
        for w in self.pieces.windows(2) {
            if w[0].table_id == w[1].table_id && last != Some(w[0].table_id) {
                n += 1;
                last = Some(w[0].table_id);
            }
        }
        n
    }

    /// Number of tables split row-wise.
    #[must_use]
    pub fn row_split_tables(&self) -> usize {
        self.pieces.iter().filter(|p| p.rows.is_some_and(|r| r.offset == 0)).count()
    }

    /// Every table's pieces, in table order (each sorted by row, then column offset).
    pub fn table_groups(&self) -> impl Iterator<Item = &[Piece]> {
        self.pieces.chunk_by(|a, b| a.table_id == b.table_id)
    }

    /// The plan with co-located column pieces merged: two pieces of one table on the same device that are
    /// the aligned halves of a wider piece (what a search's halving makes) become that piece, again and
    /// again, wherever the table's split stays valid under `task.splits` (under [`SplitRule::TorchRec`]
    /// only when every block of the table pairs up on one device, so that the blocks stay equal). A device
    /// then holds the same columns of the same rows in fewer pieces: the same bytes, and one lookup of each
    /// row where it took two. A table whose pieces all merge on one device is unsplit.
    pub fn coalesced(&self, task: &Task) -> Result<Self> {
        let mut pieces = Vec::with_capacity(self.pieces.len());
        for group in self.table_groups() {
            if group.len() < 2 || group[0].rows.is_some() {
                pieces.extend_from_slice(group);
                continue;
            }
            let mut g = group.to_vec();
            while let Some(merged) = merge_buddies(task, &g) {
                g = merged;
            }
            pieces.extend(g);
        }
        Self::new(task, pieces)
    }

    /// Refuses, naming the table and its pieces, a plan TorchRec cannot build ([`SplitRule::TorchRec`]),
    /// whatever rule `task` was planned under.
    pub fn check_torchrec_buildable(&self, task: &Task) -> Result<()> {
        self.table_groups().try_for_each(|g| check_torchrec_group(task, g))
    }
}

/// One round of [`Plan::coalesced`] on one table's column pieces (a valid split, sorted by column): the split
/// with co-located aligned buddies merged (under [`SplitRule::Any`] the first such pair; under
/// [`SplitRule::TorchRec`] every pair at once, or none), or `None` when no merge keeps the split valid.
fn merge_buddies(task: &Task, group: &[Piece]) -> Option<Vec<Piece>> {
    let buddies = |a: &Piece, b: &Piece| {
        a.device == b.device
            && a.dim == b.dim
            && b.col_offset == a.col_offset + a.dim
            && a.col_offset.is_multiple_of(2 * a.dim)
    };
    let merge = |a: &Piece| Piece::cols(a.table_id, a.col_offset, 2 * a.dim, a.device);
    let valid = |g: &[Piece]| {
        check_col_split(task, g).is_ok()
            && (task.splits != SplitRule::TorchRec || check_torchrec_group(task, g).is_ok())
    };
    if task.splits == SplitRule::TorchRec {
        let pairs = group.chunks_exact(2);
        if !group.len().is_multiple_of(2) || !pairs.clone().all(|p| buddies(&p[0], &p[1])) {
            return None;
        }
        let merged: Vec<Piece> = pairs.map(|p| merge(&p[0])).collect();
        return valid(&merged).then_some(merged);
    }
    (0..group.len() - 1).find_map(|i| {
        if !buddies(&group[i], &group[i + 1]) {
            return None;
        }
        let mut merged = group.to_vec();
        merged[i] = merge(&group[i]);
        merged.remove(i + 1);
        valid(&merged).then_some(merged)
    })
}

/// One table's pieces (a valid split, sorted) against TorchRec's layouts: column pieces of one width, row
/// pieces on ranks 0, 1, … in row order (row-wise), or on the ranks of one host in rank order
/// (table-row-wise, with several hosts).
fn check_torchrec_group(task: &Task, group: &[Piece]) -> Result<()> {
    let table = &task.tables[group[0].table_id];
    if group[0].rows.is_some() {
        let devices: Vec<usize> = group.iter().map(|p| p.device).collect();
        let local = task.devices_per_host().max(1);
        let base = devices[0] - devices[0] % local;
        let in_rank_order = |from: usize| devices.iter().enumerate().all(|(k, &d)| d == from + k);
        let one_host = local < task.devices.count() && devices.len() <= local && in_rank_order(base);
        if !in_rank_order(0) && !one_host {
            return Err(Error::InvalidPlan(format!(
                "table `{}` has row-wise pieces on devices {devices:?} in row order: TorchRec's row-wise layout is one range per rank in rank order (rows of rank 0, then rank 1, ...), and its table-row-wise layout the same on the ranks of one host",
                table.name
            )));
        }
    } else if group.iter().any(|p| p.dim != group[0].dim) {
        let widths: Vec<u32> = group.iter().map(|p| p.dim).collect();
        return Err(Error::InvalidPlan(format!(
            "table `{}` (dim {}) has column pieces of widths {widths:?}: TorchRec's column-wise sharding builds only equal blocks (split rule `torchrec`)",
            table.name, table.dim
        )));
    }
    Ok(())
}

/// Column pieces of one table (sorted by column offset): contiguous from 0 to the dim, each a
/// multiple of 4 dividing the dim, and either all of one width or all dyadic halvings aligned to their size.
fn check_col_split(task: &Task, group: &[Piece]) -> Result<()> {
    let table = &task.tables[group[0].table_id];
    let name = &table.name;
    let mut next = 0u32;
    for p in group {
        if p.dim == 0 || !p.dim.is_multiple_of(4) || !table.dim.is_multiple_of(p.dim) {
            return Err(Error::InvalidPlan(format!(
                "table `{name}` (dim {}) has a piece of dim {}: pieces must be the dim halved k times (or equal blocks dividing it) and a multiple of 4",
                table.dim, p.dim
            )));
        }
        if p.col_offset != next {
            return Err(Error::InvalidPlan(format!(
                "table `{name}`: piece at column {} (dim {}) overlaps, leaves a gap or is not aligned to its size",
                p.col_offset, p.dim
            )));
        }
        next += p.dim;
    }
    if next != table.dim {
        return Err(Error::InvalidPlan(format!("table `{name}` has {next} of its {} columns placed", table.dim)));
    }
    let equal_blocks = group.iter().all(|p| p.dim == group[0].dim);
    if !equal_blocks {
        for p in group {
            if !(table.dim / p.dim).is_power_of_two() {
                return Err(Error::InvalidPlan(format!(
                    "table `{name}` (dim {}) has a piece of dim {}: pieces of different widths must be the dim halved k times",
                    table.dim, p.dim
                )));
            }
            if p.col_offset % p.dim != 0 {
                return Err(Error::InvalidPlan(format!(
                    "table `{name}`: piece at column {} (dim {}) overlaps, leaves a gap or is not aligned to its size",
                    p.col_offset, p.dim
                )));
            }
        }
    }
    Ok(())
}

/// Row pieces of one table (sorted by row offset): all columns, contiguous non-empty ranges covering every row.
fn check_row_split(task: &Task, group: &[Piece]) -> Result<()> {
    let table = &task.tables[group[0].table_id];
    let name = &table.name;
    let mut next = 0u64;
    for p in group {
        let Some(r) = p.rows else {
            return Err(Error::InvalidPlan(format!(
                "table `{name}` mixes row-wise pieces with a column piece at column {}: a table is split along one axis only",
                p.col_offset
            )));
        };
        if p.col_offset != 0 || p.dim != table.dim {
            return Err(Error::InvalidPlan(format!(
                "table `{name}` (dim {}): row-wise piece at rows {}.. has columns {}..{}; row-wise pieces span all columns (column and row splits do not combine)",
                table.dim,
                r.offset,
                p.col_offset,
                p.col_offset + p.dim
            )));
        }
        if r.count == 0 || r.offset != next {
            return Err(Error::InvalidPlan(format!(
                "table `{name}`: row-wise piece at rows {}..{} is empty, overlaps or leaves a gap (expected it to start at row {next})",
                r.offset,
                r.offset.saturating_add(r.count)
            )));
        }
        next = next.saturating_add(r.count);
    }
    if next != table.rows {
        return Err(Error::InvalidPlan(format!("table `{name}` has {next} of its {} rows placed", table.rows)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::{ElementType, NUM_BINS, OptimizerState, TableSpec};
    use crate::task::Devices;

    fn task() -> Task {
        let t = |name: &str, dim| {
            TableSpec::new("t", name.into(), 100, dim, 1.0, [0.0; NUM_BINS], ElementType::Fp32, OptimizerState::None)
                .unwrap()
        };
        Task::new(vec![t("a", 32), t("b", 8)], Devices::uniform(2, 1 << 20).unwrap()).unwrap()
    }

    fn p(table_id: usize, col_offset: u32, dim: u32, device: usize) -> Piece {
        Piece::cols(table_id, col_offset, dim, device)
    }

    fn r(table_id: usize, dim: u32, device: usize, offset: u64, count: u64) -> Piece {
        Piece::row_range(table_id, dim, device, offset, count)
    }

    #[test]
    fn coalescing_merges_aligned_halves_on_one_device_and_nothing_else() {
        let t = task();
        let pieces_of = |plan: &Plan| plan.pieces().to_vec();
        let coalesce = |t: &Task, pieces: Vec<Piece>| pieces_of(&Plan::new(t, pieces).unwrap().coalesced(t).unwrap());
        // Four blocks of 8 on devices 0, 0, 1, 1: two pieces of 16.
        let four = |d: [usize; 4]| (0..4).map(|i| p(0, 8 * i as u32, 8, d[i])).chain([p(1, 0, 8, 0)]).collect();
        assert_eq!(coalesce(&t, four([0, 0, 1, 1])), vec![p(0, 0, 16, 0), p(0, 16, 16, 1), p(1, 0, 8, 0)]);
        // Halves that are not buddies (8..16 and 16..24 are not the halves of one aligned piece) stay.
        assert_eq!(coalesce(&t, four([0, 1, 1, 0])), four([0, 1, 1, 0]));
        // A halving whose pieces all sit on one device merges back into the whole table.
        let whole = coalesce(&t, vec![p(0, 0, 16, 1), p(0, 16, 8, 1), p(0, 24, 8, 1), p(1, 0, 8, 0)]);
        assert_eq!(whole, vec![p(0, 0, 32, 1), p(1, 0, 8, 0)]);
        // Row pieces are never touched.
        let rows = vec![r(0, 32, 0, 0, 50), r(0, 32, 0, 50, 50), p(1, 0, 8, 0)];
        assert_eq!(coalesce(&t, rows.clone()), Plan::new(&t, rows).unwrap().pieces().to_vec());
        // Under TorchRec's rule blocks stay equal: every pair merges, or none does.
        let tr = task().with_splits(SplitRule::TorchRec);
        assert_eq!(coalesce(&tr, four([0, 0, 1, 1])), vec![p(0, 0, 16, 0), p(0, 16, 16, 1), p(1, 0, 8, 0)]);
        assert_eq!(coalesce(&tr, four([0, 0, 1, 0])), four([0, 0, 1, 0]));
        // Equal blocks that are not a halving (384 = 3 x 128) cannot merge two of three.
        let t384 = Task::new(
            vec![
                TableSpec::new("t", "c".into(), 10, 384, 1.0, [0.0; NUM_BINS], ElementType::Fp32, OptimizerState::None)
                    .unwrap(),
            ],
            Devices::uniform(2, 1 << 20).unwrap(),
        )
        .unwrap();
        let thirds = vec![p(0, 0, 128, 0), p(0, 128, 128, 0), p(0, 256, 128, 1)];
        assert_eq!(coalesce(&t384, thirds.clone()), thirds);
    }

    #[test]
    fn accepts_dyadic_splits() {
        let plan = Plan::new(&task(), vec![p(0, 16, 8, 1), p(0, 0, 16, 0), p(0, 24, 8, 0), p(1, 0, 8, 1)]).unwrap();
        assert_eq!(plan.split_tables(), 1);
        assert_eq!(plan.pieces_by_device(2), vec![vec![0, 2], vec![1, 3]]);
    }

    #[test]
    fn rejects_bad_plans() {
        let t = task();
        for (pieces, why) in [
            (vec![p(0, 0, 32, 0)], "b` has 0"),
            (vec![p(0, 0, 32, 0), p(1, 0, 8, 2)], "device 2"),
            (vec![p(0, 0, 32, 0), p(1, 0, 4, 0), p(1, 4, 4, 0)], ""),
            (vec![p(0, 0, 24, 0), p(0, 24, 8, 0), p(1, 0, 8, 0)], "halved"),
            (vec![p(0, 0, 8, 0), p(0, 8, 16, 0), p(0, 24, 8, 0), p(1, 0, 8, 0)], "aligned"),
            (vec![p(0, 0, 32, 0), p(1, 0, 8, 0), p(1, 0, 8, 1)], "overlaps"),
            (vec![p(0, 0, 32, 0), p(1, 0, 8, 0), p(5, 0, 8, 0)], "table_id 5"),
        ] {
            match Plan::new(&t, pieces.clone()) {
                Ok(_) => assert!(why.is_empty(), "accepted {pieces:?}"),
                Err(e) => assert!(!why.is_empty() && e.to_string().contains(why), "{e} / {why}"),
            }
        }
    }

    #[test]
    fn accepts_equal_column_blocks_and_row_ranges() {
        let t = task();
        // Row ranges of `a` across both devices (given out of order).
        let plan = Plan::new(&t, vec![r(0, 32, 1, 60, 40), r(0, 32, 0, 0, 60), p(1, 0, 8, 1)]).unwrap();
        assert_eq!(plan.split_tables(), 1);
        assert_eq!(plan.row_split_tables(), 1);
        assert_eq!(plan.pieces()[0].rows, Some(RowRange { offset: 0, count: 60 }));
        // A single range covering every row is an unsplit piece.
        let whole = Plan::new(&t, vec![r(0, 32, 0, 0, 100), p(1, 0, 8, 1)]).unwrap();
        assert_eq!(whole.pieces()[0], p(0, 0, 32, 0));
        // TorchRec's column-wise blocks need not be dyadic: a dim-12 table in three blocks of 4.
        let twelve = |name: &str| {
            TableSpec::new("t", name.into(), 10, 12, 1.0, [0.0; NUM_BINS], ElementType::Fp32, OptimizerState::None)
                .unwrap()
        };
        let t12 = Task::new(vec![twelve("c")], Devices::uniform(3, 1 << 20).unwrap()).unwrap();
        assert!(Plan::new(&t12, vec![p(0, 0, 4, 0), p(0, 4, 4, 1), p(0, 8, 4, 2)]).is_ok());
        // Unequal widths must be dyadic: 12 = 8 + 4 is not a halving of 12.
        let e = Plan::new(&t12, vec![p(0, 0, 8, 0), p(0, 8, 4, 1)]).unwrap_err().to_string();
        assert!(e.contains("dim 8"), "{e}");
    }

    #[test]
    fn rejects_bad_row_splits() {
        let t = task();
        for (pieces, why) in [
            (vec![r(0, 32, 0, 0, 50), r(0, 32, 1, 60, 40), p(1, 0, 8, 0)], "leaves a gap"),
            (vec![r(0, 32, 0, 0, 60), r(0, 32, 1, 50, 50), p(1, 0, 8, 0)], "overlaps"),
            (vec![r(0, 32, 0, 0, 60), r(0, 32, 1, 60, 30), p(1, 0, 8, 0)], "90 of its 100 rows"),
            (vec![r(0, 32, 0, 0, 0), r(0, 32, 1, 0, 100), p(1, 0, 8, 0)], "is empty"),
            (vec![r(0, 16, 0, 0, 60), r(0, 16, 1, 60, 40), p(1, 0, 8, 0)], "span all columns"),
            (vec![r(0, 32, 0, 0, 100), p(0, 0, 32, 1), p(1, 0, 8, 0)], "one axis"),
        ] {
            let e = Plan::new(&t, pieces.clone()).unwrap_err().to_string();
            assert!(e.contains(why), "{e} / {why}");
        }
    }

    #[test]
    fn plan_json_without_rows_loads_as_whole_rows() {
        let piece: Piece = serde_json::from_str(r#"{"table_id": 1, "col_offset": 0, "dim": 8, "device": 0}"#).unwrap();
        assert_eq!(piece, p(1, 0, 8, 0));
        assert!(!serde_json::to_string(&piece).unwrap().contains("rows"));
        let rp = r(0, 32, 1, 60, 40);
        let back: Piece = serde_json::from_str(&serde_json::to_string(&rp).unwrap()).unwrap();
        assert_eq!(back, rp);
    }
}
