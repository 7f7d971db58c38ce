//! Plans: column-wise halving splits of tables and the device of every piece.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::task::Task;

/// One piece of a table placed on a device: columns `[col_offset, col_offset + dim)` of table
/// `table_id` (its index in the task). An unsplit table is one piece with offset 0 and its full dim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Piece {
    /// Index of the table in the task.
    pub table_id: usize,
    /// First column of the piece.
    pub col_offset: u32,
    /// Number of columns (the table's dim divided by a power of two; a multiple of 4).
    pub dim: u32,
    /// Device the piece is placed on.
    pub device: usize,
}

/// A sharding plan for a task. Every instance returned by [`Plan::new`] is valid for its task:
/// each table is covered exactly once by aligned halving pieces whose dims stay multiples of 4, and
/// every device index exists. Memory feasibility is a property of the plan's report, not of the
/// plan: the random baseline, for one, may overfill a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pieces: Vec<Piece>,
}

impl Plan {
    /// Validates `pieces` against `task` and builds the plan (pieces are kept sorted by table, then offset).
    pub fn new(task: &Task, mut pieces: Vec<Piece>) -> Result<Self> {
        pieces.sort_unstable_by_key(|p| (p.table_id, p.col_offset));
        let n_tables = task.tables.len();
        let n_dev = task.devices.count();
        let mut next = vec![0u32; n_tables];
        for p in &pieces {
            let Some(table) = task.tables.get(p.table_id) else {
                return Err(Error::InvalidPlan(format!(
                    "piece names table_id {} but the task has {n_tables} tables",
                    p.table_id
                )));
            };
            let name = &table.name;
            if p.device >= n_dev {
                return Err(Error::InvalidPlan(format!(
                    "a piece of table `{name}` is on device {} but the task has {n_dev} devices",
                    p.device
                )));
            }
            let halving = p.dim > 0 && table.dim % p.dim == 0 && (table.dim / p.dim).is_power_of_two();
            if !halving || p.dim % 4 != 0 {
                return Err(Error::InvalidPlan(format!(
                    "table `{name}` (dim {}) has a piece of dim {}: pieces must be the dim halved k times and a multiple of 4",
                    table.dim, p.dim
                )));
            }
            if p.col_offset != next[p.table_id] || p.col_offset % p.dim != 0 {
                return Err(Error::InvalidPlan(format!(
                    "table `{name}`: piece at column {} (dim {}) overlaps, leaves a gap or is not aligned to its size",
                    p.col_offset, p.dim
                )));
            }
            next[p.table_id] += p.dim;
        }
        for (t, table) in task.tables.iter().enumerate() {
            if next[t] != table.dim {
                return Err(Error::InvalidPlan(format!(
                    "table `{}` has {} of its {} columns placed",
                    table.name, next[t], table.dim
                )));
            }
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
            .map(|(table_id, (t, &device))| Piece { table_id, col_offset: 0, dim: t.dim, device })
            .collect();
        Self::new(task, pieces)
    }

    /// The pieces, sorted by table then column offset.
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

    /// Number of tables that are split into more than one piece.
    #[must_use]
    pub fn split_tables(&self) -> usize {
        let mut n = 0;
        let mut last = None;
        for p in &self.pieces {
            if p.col_offset > 0 && last != Some(p.table_id) {
                n += 1;
                last = Some(p.table_id);
            }
        }
        n
    }
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
        Piece { table_id, col_offset, dim, device }
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
}
