//! What-if edits of a plan: move a piece, split a table piece in half, merge two halves back,
//! change the device count or a device's memory cap.
//!
//! Every edit takes a task and a valid [`Plan`] of it and returns a new task and a new valid plan
//! (the inputs are not touched), so an interactive front-end can keep an undo stack of plain values.
//! The cost of the result comes from [`crate::evaluate`], as for any plan. An edit never refuses a
//! result for overfilling memory: the report says so (`feasible: false`), which is what a what-if
//! user wants to see.
//!
//! Pieces are named by `(table_id, col_offset)`: a table's pieces never overlap, so the first column
//! identifies one. Refusals name the edit, the field and the value, and list what is allowed.
//!
//! Removing devices ([`Edit::SetDeviceCount`] with a smaller count) reassigns the pieces of the
//! removed devices rather than refusing: largest piece first (ties by table, then column), each onto
//! the remaining device with the most free memory (ties to the lowest index), bytes and free memory
//! counted by the task's memory rule. That keeps the edit
//! always possible and easy to predict; the report shows whether the result still fits.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::plan::{Piece, Plan};
use crate::task::{Devices, MAX_DEVICES, Task};
use crate::topology::Topology;

/// One what-if edit, as a front-end sends it (JSON: `{"op": "move", "table_id": 3, "col_offset": 0,
/// "to_device": 1}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Edit {
    /// Move the piece of table `table_id` starting at column `col_offset` to `to_device`.
    Move {
        /// Table of the piece.
        table_id: usize,
        /// First column of the piece.
        col_offset: u32,
        /// Destination device.
        to_device: usize,
    },
    /// Halve the piece of table `table_id` starting at `col_offset` column-wise; both halves stay on
    /// its device. The halves' dims must stay multiples of 4.
    Split {
        /// Table of the piece.
        table_id: usize,
        /// First column of the piece.
        col_offset: u32,
    },
    /// Merge the piece of table `table_id` starting at `col_offset` with its other half (the aligned
    /// piece of the same dim next to it) into one piece on this piece's device.
    Merge {
        /// Table of the piece.
        table_id: usize,
        /// First column of the piece.
        col_offset: u32,
    },
    /// Change the number of devices. New devices get `mem_cap_bytes` (default: the last device's
    /// cap); pieces on removed devices are reassigned (see the module docs).
    SetDeviceCount {
        /// New number of devices.
        count: usize,
        /// Cap of added devices.
        #[serde(default)]
        mem_cap_bytes: Option<u64>,
    },
    /// Change one device's memory cap.
    SetMemCap {
        /// The device.
        device: usize,
        /// Its new cap.
        mem_cap_bytes: u64,
    },
}

impl Edit {
    /// Short name of the edit, as in its JSON `op` tag.
    #[must_use]
    pub fn op(&self) -> &'static str {
        match self {
            Self::Move { .. } => "move",
            Self::Split { .. } => "split",
            Self::Merge { .. } => "merge",
            Self::SetDeviceCount { .. } => "set_device_count",
            Self::SetMemCap { .. } => "set_mem_cap",
        }
    }
}

/// Applies `edit` to a plan of `task`, returning the edited task and plan.
pub fn apply(task: &Task, plan: &Plan, edit: &Edit) -> Result<(Task, Plan)> {
    match *edit {
        Edit::Move { table_id, col_offset, to_device } => {
            Ok((task.clone(), move_piece(task, plan, table_id, col_offset, to_device)?))
        }
        Edit::Split { table_id, col_offset } => Ok((task.clone(), split_piece(task, plan, table_id, col_offset)?)),
        Edit::Merge { table_id, col_offset } => Ok((task.clone(), merge_piece(task, plan, table_id, col_offset)?)),
        Edit::SetDeviceCount { count, mem_cap_bytes } => set_device_count(task, plan, count, mem_cap_bytes),
        Edit::SetMemCap { device, mem_cap_bytes } => Ok((set_mem_cap(task, device, mem_cap_bytes)?, plan.clone())),
    }
}

/// Moves the piece of `table_id` starting at `col_offset` to `to_device`.
pub fn move_piece(task: &Task, plan: &Plan, table_id: usize, col_offset: u32, to_device: usize) -> Result<Plan> {
    let n = task.devices.count();
    if to_device >= n {
        return Err(Error::field("what-if move", "to_device", to_device, format!("a device in 0..={}", n - 1)));
    }
    let i = find_piece(task, plan, "what-if move", table_id, col_offset)?;
    let mut pieces = plan.pieces().to_vec();
    pieces[i].device = to_device;
    Plan::new(task, pieces)
}

/// Splits the piece of `table_id` starting at `col_offset` into two halves on its device.
pub fn split_piece(task: &Task, plan: &Plan, table_id: usize, col_offset: u32) -> Result<Plan> {
    let ctx = "what-if split";
    let i = find_piece(task, plan, ctx, table_id, col_offset)?;
    let p = plan.pieces()[i];
    let half = p.dim / 2;
    if !p.dim.is_multiple_of(2) || !half.is_multiple_of(4) || half == 0 {
        return Err(Error::field(
            format!("{ctx} of table `{}`", task.tables[table_id].name),
            "dim",
            p.dim,
            "a piece whose half is a multiple of 4 (dim a multiple of 8)",
        ));
    }
    let mut pieces = plan.pieces().to_vec();
    pieces[i].dim = half;
    pieces.push(Piece { col_offset: p.col_offset + half, ..pieces[i] });
    Plan::new(task, pieces)
}

/// Merges the piece of `table_id` starting at `col_offset` with its other half, onto this piece's device.
pub fn merge_piece(task: &Task, plan: &Plan, table_id: usize, col_offset: u32) -> Result<Plan> {
    let ctx = "what-if merge";
    let i = find_piece(task, plan, ctx, table_id, col_offset)?;
    let p = plan.pieces()[i];
    let table = &task.tables[table_id];
    let context = format!("{ctx} of table `{}`", table.name);
    if p.dim == table.dim {
        return Err(Error::field(context, "col_offset", col_offset, "a piece of a split table (this table is whole)"));
    }
    // Pieces are aligned to their size, so the other half of [o, o + d) starts at o + d when o / d is
    // even and at o - d when it is odd.
    let lower = (p.col_offset / p.dim).is_multiple_of(2);
    let other_offset = if lower { p.col_offset + p.dim } else { p.col_offset - p.dim };
    let Some(j) = plan.pieces().iter().position(|q| q.table_id == table_id && q.col_offset == other_offset) else {
        return Err(Error::InvalidPlan(format!("table `{}` has no piece at column {other_offset}", table.name)));
    };
    let other = plan.pieces()[j];
    if other.dim != p.dim {
        return Err(Error::field(
            context,
            "col_offset",
            col_offset,
            format!(
                "a piece whose other half is whole: columns {other_offset}..{} are split further; merge those first",
                other_offset + p.dim
            ),
        ));
    }
    if other.rows != p.rows {
        return Err(Error::field(
            context,
            "col_offset",
            col_offset,
            "a piece whose other half covers the same rows (row-wise pieces merge only with their twin)",
        ));
    }
    let mut pieces = plan.pieces().to_vec();
    pieces[i] =
        Piece { table_id, col_offset: p.col_offset.min(other_offset), dim: p.dim * 2, device: p.device, rows: p.rows };
    pieces.remove(j);
    Plan::new(task, pieces)
}

/// Changes the number of devices to `count`; added devices get `new_cap_bytes` (default: the last
/// device's cap), pieces on removed devices are reassigned (largest first, to the device with the
/// most free memory).
pub fn set_device_count(task: &Task, plan: &Plan, count: usize, new_cap_bytes: Option<u64>) -> Result<(Task, Plan)> {
    let ctx = "what-if set_device_count";
    if count == 0 || count > MAX_DEVICES {
        return Err(Error::field(ctx, "count", count, format!("1..={MAX_DEVICES}")));
    }
    if new_cap_bytes == Some(0) {
        return Err(Error::field(ctx, "mem_cap_bytes", 0, "at least 1 byte"));
    }
    let old = task.devices.mem_cap_bytes();
    let last = old.last().copied().unwrap_or(1);
    let caps: Vec<u64> = (0..count).map(|d| old.get(d).copied().unwrap_or(new_cap_bytes.unwrap_or(last))).collect();
    // A topology keeps its devices per host; the new count must fill whole hosts.
    let topology = match &task.topology {
        Some(t) => {
            let hosts = Topology::hosts_for(count, t.devices_per_host).map_err(|_| {
                Error::field(
                    ctx,
                    "count",
                    count,
                    format!("a multiple of the topology's {} devices per host", t.devices_per_host),
                )
            })?;
            Some(Topology { hosts, ..t.clone() })
        }
        None => None,
    };
    let new_task = Task {
        tables: task.tables.clone(),
        devices: Devices::new(caps)?,
        memory: task.memory,
        splits: task.splits,
        topology: None,
    }
    .with_topology(topology)?;

    // Memory as the new task counts it (its device count is the world size of the torchrec rule).
    // A reservation larger than a cap leaves that device 0 usable bytes; the report says so.
    let usable: Vec<u64> = new_task.device_memory()?.iter().map(|d| d.usable_bytes).collect();
    let mut pieces = plan.pieces().to_vec();
    let bytes = pieces.iter().map(|p| new_task.piece_bytes(p)).collect::<Result<Vec<u64>>>()?;
    let mut used = vec![0u128; count];
    for (p, &b) in pieces.iter().zip(&bytes) {
        if p.device < count {
            used[p.device] += u128::from(b);
        }
    }
    let mut orphans: Vec<usize> = (0..pieces.len()).filter(|&i| pieces[i].device >= count).collect();
    // Largest first; the sort is stable and pieces are sorted by (table, column), which breaks ties.
    orphans.sort_by_key(|&i| std::cmp::Reverse(bytes[i]));
    for i in orphans {
        let free = |d: usize| i128::from(usable[d]) - used[d] as i128;
        // `count >= 1` was checked above, so there is always a device to choose.
        let best = (1..count).fold(0, |best, d| if free(d) > free(best) { d } else { best });
        used[best] += u128::from(bytes[i]);
        pieces[i].device = best;
    }
    let new_plan = Plan::new(&new_task, pieces)?;
    Ok((new_task, new_plan))
}

/// Sets device `device`'s memory cap to `mem_cap_bytes`.
pub fn set_mem_cap(task: &Task, device: usize, mem_cap_bytes: u64) -> Result<Task> {
    let ctx = "what-if set_mem_cap";
    let n = task.devices.count();
    if device >= n {
        return Err(Error::field(ctx, "device", device, format!("a device in 0..={}", n - 1)));
    }
    if mem_cap_bytes == 0 {
        return Err(Error::field(ctx, "mem_cap_bytes", 0, "at least 1 byte"));
    }
    let mut caps = task.devices.mem_cap_bytes().to_vec();
    caps[device] = mem_cap_bytes;
    Ok(Task { devices: Devices::new(caps)?, ..task.clone() })
}

/// Index in `plan.pieces()` of the piece of `table_id` starting at `col_offset`.
fn find_piece(task: &Task, plan: &Plan, ctx: &str, table_id: usize, col_offset: u32) -> Result<usize> {
    let n = task.tables.len();
    let Some(table) = task.tables.get(table_id) else {
        return Err(Error::field(ctx, "table_id", table_id, format!("a table in 0..={}", n.saturating_sub(1))));
    };
    let mut starts = Vec::new();
    let mut found = Vec::new();
    for (i, p) in plan.pieces().iter().enumerate().filter(|(_, p)| p.table_id == table_id) {
        if p.col_offset == col_offset {
            found.push(i);
        }
        starts.push(p.col_offset.to_string());
    }
    match found[..] {
        [i] => return Ok(i),
        [] => {}
        _ => {
            return Err(Error::field(
                format!("{ctx} of table `{}`", table.name),
                "col_offset",
                col_offset,
                format!(
                    "one piece, but the table is split row-wise into {} shards there; what-if edits address column pieces only",
                    found.len()
                ),
            ));
        }
    }
    Err(Error::field(
        format!("{ctx} of table `{}`", table.name),
        "col_offset",
        col_offset,
        format!("the first column of one of its pieces: {}", starts.join(", ")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{AnalyticalModel, CostDefinition, evaluate};
    use crate::table::{ElementType, NUM_BINS, OptimizerState, TableSpec};

    /// Three tables (dims 32, 8, 4) of 1000 rows on three 1 MiB devices, one table per device.
    fn fixture() -> (Task, Plan) {
        let t = |name: &str, dim, pf| {
            let mut bins = [0.0; NUM_BINS];
            bins[0] = 1.0;
            TableSpec::new("t", name.into(), 1000, dim, pf, bins, ElementType::Fp32, OptimizerState::None).unwrap()
        };
        let task =
            Task::new(vec![t("a", 32, 4.0), t("b", 8, 1.0), t("c", 4, 2.0)], Devices::uniform(3, 1 << 20).unwrap())
                .unwrap();
        let plan = Plan::unsplit(&task, &[0, 1, 2]).unwrap();
        (task, plan)
    }

    fn devices_of(plan: &Plan) -> Vec<(usize, u32, u32, usize)> {
        plan.pieces().iter().map(|p| (p.table_id, p.col_offset, p.dim, p.device)).collect()
    }

    /// Checks that `edit` is refused with a message containing every one of `needles`.
    fn check_refused(task: &Task, plan: &Plan, edit: &Edit, needles: &[&str]) {
        let e = apply(task, plan, edit).unwrap_err().to_string();
        for n in needles {
            assert!(e.contains(n), "{edit:?}: `{e}` lacks `{n}`");
        }
    }

    #[test]
    fn move_changes_the_device_and_the_cost() {
        let (task, plan) = fixture();
        let model = AnalyticalModel::default();
        let before = evaluate(&task, &plan, &model, CostDefinition::NeuroShard).unwrap();
        let (t2, moved) = apply(&task, &plan, &Edit::Move { table_id: 1, col_offset: 0, to_device: 0 }).unwrap();
        assert_eq!(t2, task);
        assert_eq!(devices_of(&moved), vec![(0, 0, 32, 0), (1, 0, 8, 0), (2, 0, 4, 2)]);
        let after = evaluate(&task, &moved, &model, CostDefinition::NeuroShard).unwrap();
        assert_eq!(after.devices[1].dim_sum, 0);
        assert!(after.cost_ms > before.cost_ms, "{} vs {}", after.cost_ms, before.cost_ms);
        // The input plan is untouched.
        assert_eq!(devices_of(&plan)[1], (1, 0, 8, 1));
    }

    #[test]
    fn split_then_merge_round_trips() {
        let (task, plan) = fixture();
        let (_, s1) = apply(&task, &plan, &Edit::Split { table_id: 0, col_offset: 0 }).unwrap();
        assert_eq!(devices_of(&s1)[..2], [(0, 0, 16, 0), (0, 16, 16, 0)]);
        let (_, s2) = apply(&task, &s1, &Edit::Split { table_id: 0, col_offset: 16 }).unwrap();
        let (_, s3) = apply(&task, &s2, &Edit::Move { table_id: 0, col_offset: 24, to_device: 2 }).unwrap();
        assert_eq!(devices_of(&s3)[..3], [(0, 0, 16, 0), (0, 16, 8, 0), (0, 24, 8, 2)]);
        // Merging from the upper half keeps the upper half's device.
        let (_, m1) = apply(&task, &s3, &Edit::Merge { table_id: 0, col_offset: 24 }).unwrap();
        assert_eq!(devices_of(&m1)[..2], [(0, 0, 16, 0), (0, 16, 16, 2)]);
        let (_, m2) = apply(&task, &m1, &Edit::Merge { table_id: 0, col_offset: 0 }).unwrap();
        assert_eq!(devices_of(&m2)[0], (0, 0, 32, 0));
        assert_eq!(m2.pieces().len(), 3);
    }

    #[test]
    fn bad_edits_name_the_field_and_value() {
        let (task, plan) = fixture();
        let (_, split) = apply(&task, &plan, &Edit::Split { table_id: 0, col_offset: 0 }).unwrap();
        let (_, split2) = apply(&task, &split, &Edit::Split { table_id: 0, col_offset: 16 }).unwrap();
        // Why each case exists: every refusal path of every edit.
        check_refused(
            &task,
            &plan,
            &Edit::Move { table_id: 0, col_offset: 0, to_device: 3 },
            &["`to_device` = 3", "0..=2"],
        );
        check_refused(
            &task,
            &plan,
            &Edit::Move { table_id: 9, col_offset: 0, to_device: 0 },
            &["`table_id` = 9", "0..=2"],
        );
        check_refused(
            &task,
            &split,
            &Edit::Move { table_id: 0, col_offset: 8, to_device: 0 },
            &["`col_offset` = 8", "0, 16"],
        );
        check_refused(&task, &plan, &Edit::Split { table_id: 2, col_offset: 0 }, &["table `c`", "`dim` = 4"]);
        check_refused(&task, &plan, &Edit::Merge { table_id: 0, col_offset: 0 }, &["table `a`", "is whole"]);
        check_refused(&task, &split2, &Edit::Merge { table_id: 0, col_offset: 0 }, &["`col_offset` = 0", "16..32"]);
        check_refused(&task, &plan, &Edit::SetDeviceCount { count: 0, mem_cap_bytes: None }, &["`count` = 0"]);
        check_refused(
            &task,
            &plan,
            &Edit::SetDeviceCount { count: 4, mem_cap_bytes: Some(0) },
            &["`mem_cap_bytes` = 0"],
        );
        check_refused(&task, &plan, &Edit::SetMemCap { device: 3, mem_cap_bytes: 5 }, &["`device` = 3"]);
        check_refused(&task, &plan, &Edit::SetMemCap { device: 0, mem_cap_bytes: 0 }, &["`mem_cap_bytes` = 0"]);
    }

    #[test]
    fn shrinking_reassigns_largest_first_to_the_freest_device() {
        let (task, plan) = fixture();
        // Device 0 holds `a` (128,000 bytes); after moving `c` to device 1 and shrinking to 1 device
        // everything lands on device 0.
        let (t1, p1) = set_device_count(&task, &plan, 1, None).unwrap();
        assert_eq!(t1.devices.count(), 1);
        assert!(p1.pieces().iter().all(|p| p.device == 0));
        // Shrink 3 -> 2 with a small device 0: the orphan `c` goes to device 1 (more free memory).
        let small = set_mem_cap(&task, 0, 130_000).unwrap();
        let (_, p2) = set_device_count(&small, &plan, 2, None).unwrap();
        assert_eq!(devices_of(&p2), vec![(0, 0, 32, 0), (1, 0, 8, 1), (2, 0, 4, 1)]);
        // Growing adds empty devices with the given cap, or the last cap.
        let (t3, p3) = set_device_count(&task, &plan, 5, Some(7)).unwrap();
        assert_eq!(t3.devices.mem_cap_bytes(), &[1 << 20, 1 << 20, 1 << 20, 7, 7]);
        assert_eq!(devices_of(&p3), devices_of(&plan));
        let (t4, _) = set_device_count(&task, &plan, 4, None).unwrap();
        assert_eq!(t4.devices.mem_cap_bytes()[3], 1 << 20);
    }

    #[test]
    fn lowering_a_cap_shows_up_as_infeasible() {
        let (task, plan) = fixture();
        let t = set_mem_cap(&task, 0, 1000).unwrap();
        let r = evaluate(&t, &plan, &AnalyticalModel::default(), CostDefinition::NeuroShard).unwrap();
        assert!(!r.feasible);
        assert!(r.violations[0].contains("device 0"), "{:?}", r.violations);
    }

    #[test]
    fn edits_parse_from_json() {
        let e: Edit =
            serde_json::from_str(r#"{"op": "move", "table_id": 3, "col_offset": 0, "to_device": 1}"#).unwrap();
        assert_eq!(e, Edit::Move { table_id: 3, col_offset: 0, to_device: 1 });
        assert_eq!(e.op(), "move");
        let e: Edit = serde_json::from_str(r#"{"op": "set_device_count", "count": 2}"#).unwrap();
        assert_eq!(e, Edit::SetDeviceCount { count: 2, mem_cap_bytes: None });
        let bad = serde_json::from_str::<Edit>(r#"{"op": "teleport", "table_id": 1}"#).unwrap_err().to_string();
        assert!(bad.contains("teleport"), "{bad}");
        let bad = serde_json::from_str::<Edit>(r#"{"op": "split", "table_id": 1, "col_offset": 0, "x": 1}"#);
        assert!(bad.unwrap_err().to_string().contains('x'));
    }
}
