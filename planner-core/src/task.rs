//! Devices, tasks (tables + devices) and the seeded task samplers of the seed papers' protocols.

use rand::{RngExt, SeedableRng, rngs::ChaCha8Rng};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::memory::{DeviceMemory, MemoryRule, PieceMemory};
use crate::plan::{Piece, SplitRule};
use crate::pool::{PoolTable, dlrm_pool};
use crate::table::{ElementType, TableInput, TableSpec};
use crate::topology::Topology;
use crate::units::GIB;

/// Most devices a task may have.
pub const MAX_DEVICES: usize = 4096;
/// Most tables a task may have (production models have hundreds to a few thousand).
pub const MAX_TABLES: usize = 100_000;
/// Most tasks a suite file may have (suites drawn in memory, as a trainer's, are endless).
pub const MAX_SUITE_TASKS: usize = 1_000_000;

/// The devices of a task: one memory cap per device (caps may differ).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Devices {
    mem_cap_bytes: Vec<u64>,
}

impl Devices {
    /// Devices with the given caps; at least one, each cap ≥ 1 byte.
    pub fn new(mem_cap_bytes: Vec<u64>) -> Result<Self> {
        if mem_cap_bytes.is_empty() || mem_cap_bytes.len() > MAX_DEVICES {
            return Err(Error::field("devices", "count", mem_cap_bytes.len(), format!("1..={MAX_DEVICES}")));
        }
        if let Some((d, _)) = mem_cap_bytes.iter().enumerate().find(|(_, c)| **c == 0) {
            return Err(Error::field("devices", format!("mem_cap_bytes[{d}]"), 0, "at least 1 byte"));
        }
        Ok(Self { mem_cap_bytes })
    }

    /// `count` devices with the same cap (the count is checked before anything is allocated).
    pub fn uniform(count: usize, mem_cap_bytes: u64) -> Result<Self> {
        if count == 0 || count > MAX_DEVICES {
            return Err(Error::field("devices", "count", count, format!("1..={MAX_DEVICES}")));
        }
        Self::new(vec![mem_cap_bytes; count])
    }

    /// Number of devices.
    #[must_use]
    pub fn count(&self) -> usize {
        self.mem_cap_bytes.len()
    }

    /// Memory cap of every device.
    #[must_use]
    pub fn mem_cap_bytes(&self) -> &[u64] {
        &self.mem_cap_bytes
    }

    /// Total memory (saturating at `u64::MAX`).
    #[must_use]
    pub fn total_bytes(&self) -> u64 {
        self.mem_cap_bytes.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }
}

impl<'de> Deserialize<'de> for Devices {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            mem_cap_bytes: Vec<u64>,
        }
        Self::new(Raw::deserialize(d)?.mem_cap_bytes).map_err(serde::de::Error::custom)
    }
}

/// A planning task: the tables to place, the devices to place them on, the rule their memory is
/// counted by and the splits its plans may use. Read from JSON through the same checks as [`Task::new`]
/// (at least one table, unique names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "TaskFields")]
pub struct Task {
    /// Tables, in input order (their index is their `table_id` in a plan).
    pub tables: Vec<TableSpec>,
    /// Target devices.
    pub devices: Devices,
    /// How device memory is counted; absent in JSON = [`MemoryRule::Weights`] (the rule every task
    /// written before rules existed was planned under).
    #[serde(default)]
    pub memory: MemoryRule,
    /// Which splits its plans may use; absent in JSON = [`SplitRule::Any`].
    #[serde(default)]
    pub splits: SplitRule,
    /// How the devices are grouped into hosts; absent = one host of all devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
}

/// [`Task`] as written, before its checks.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskFields {
    tables: Vec<TableSpec>,
    devices: Devices,
    #[serde(default)]
    memory: MemoryRule,
    #[serde(default)]
    splits: SplitRule,
    #[serde(default)]
    topology: Option<Topology>,
}

impl TryFrom<TaskFields> for Task {
    type Error = Error;

    fn try_from(f: TaskFields) -> Result<Self> {
        Self::new(f.tables, f.devices)?.with_memory(f.memory).with_splits(f.splits).with_topology(f.topology)
    }
}

impl Task {
    /// A task under the seed papers' memory rule ([`MemoryRule::Weights`]); table names must be unique.
    pub fn new(tables: Vec<TableSpec>, devices: Devices) -> Result<Self> {
        if tables.len() > MAX_TABLES {
            return Err(Error::field("tables", "count", tables.len(), format!("1..={MAX_TABLES}")));
        }
        crate::input::check_unique_names(&tables)?;
        Ok(Self { tables, devices, memory: MemoryRule::Weights, splits: SplitRule::Any, topology: None })
    }

    /// The same task on `topology` (`None`: one host), checked against its device count.
    pub fn with_topology(mut self, topology: Option<Topology>) -> Result<Self> {
        if let Some(t) = &topology {
            t.check(self.devices.count())?;
        }
        self.topology = topology;
        Ok(self)
    }

    /// The task's topology, or one host of all its devices.
    #[must_use]
    pub fn topology_or_single(&self) -> Topology {
        self.topology.clone().unwrap_or_else(|| Topology {
            hosts: 1,
            devices_per_host: self.devices.count(),
            network: None,
            host_dram_bytes: None,
            host_link_bw_bytes_per_s: None,
            preset: None,
        })
    }

    /// Whether the devices are on more than one host (the exchange then crosses a network).
    #[must_use]
    pub fn is_multi_host(&self) -> bool {
        self.topology.as_ref().is_some_and(Topology::is_multi_host)
    }

    /// Devices per host (TorchRec's `local_world_size`): the topology's, or every device.
    #[must_use]
    pub fn devices_per_host(&self) -> usize {
        self.topology.as_ref().map_or(self.devices.count(), |t| t.devices_per_host)
    }

    /// The same task with plans limited to `splits`.
    #[must_use]
    pub fn with_splits(mut self, splits: SplitRule) -> Self {
        self.splits = splits;
        self
    }

    /// The same task under `memory`.
    #[must_use]
    pub fn with_memory(mut self, memory: MemoryRule) -> Self {
        self.memory = memory;
        self
    }

    /// Total bytes of all tables (weights plus optimizer state, [`TableSpec::size_bytes`]; saturating at
    /// `u64::MAX`). A size, not a fit: fitting goes through [`Task::block_memory`] and [`Task::usable_bytes`].
    #[must_use]
    pub fn total_bytes(&self) -> u64 {
        self.tables.iter().fold(0u64, |a, t| a.saturating_add(t.size_bytes()))
    }

    /// The memory, term by term, of a piece of `rows` rows and `dim` columns of `table` (one of this
    /// task's tables) under the task's rule.
    pub fn block_memory(&self, table: &TableSpec, rows: u64, dim: u32) -> Result<PieceMemory> {
        self.memory.piece(table, rows, dim, self.devices.count())
    }

    /// The bytes a piece of `rows` rows and `dim` columns of `table` counts against a device's usable
    /// bytes under the task's rule.
    pub fn block_bytes(&self, table: &TableSpec, rows: u64, dim: u32) -> Result<u64> {
        self.block_memory(table, rows, dim)?.total_bytes()
    }

    /// [`Task::block_bytes`] of a plan's piece.
    pub fn piece_bytes(&self, piece: &Piece) -> Result<u64> {
        let table = self.tables.get(piece.table_id).ok_or_else(|| {
            Error::InvalidPlan(format!(
                "piece names table_id {} but the task has {} tables",
                piece.table_id,
                self.tables.len()
            ))
        })?;
        self.block_bytes(table, piece.row_count(table.rows), piece.dim)
    }

    /// Every device after the rule's reservation (a reservation larger than a cap is reported, not refused).
    pub fn device_memory(&self) -> Result<Vec<DeviceMemory>> {
        self.memory.devices(&self.tables, &self.devices)
    }

    /// Bytes pieces may use on every device (the cap less the rule's reservation);
    /// [`Error::ReservationExceedsCap`] when the reservation alone exceeds a cap.
    pub fn usable_bytes(&self) -> Result<Vec<u64>> {
        self.memory.usable_bytes(&self.tables, &self.devices)
    }
}

/// Which seed paper's task protocol a suite follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// NeuroShard Table 1/5: fp32, 4 GiB caps, dims from {4..`max_dim`}, T in [2.5·D, 15·D).
    NeuroShard,
    /// DreamShard: fp16, 4 devices, 5 GiB caps, every table at dim 16, 10..=100 tables from one half of the pool.
    DreamShard,
    /// AutoShard: fp16, devices = tables / 10, 7 GiB caps, dims from {16, 32}.
    AutoShard,
}

/// Parameters of a task suite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteSpec {
    /// The protocol.
    pub protocol: Protocol,
    /// Devices per task (NeuroShard, DreamShard); AutoShard derives it from the table count.
    pub devices: usize,
    /// Largest dimension (NeuroShard: a power of two in 4..=128).
    pub max_dim: u32,
    /// Table count range `[min, max)`; `None` takes the protocol's default.
    pub tables: Option<(usize, usize)>,
    /// Which half of the pool (DreamShard/AutoShard generalisation split): `None` = whole pool.
    pub pool_half: Option<PoolHalf>,
    /// Number of tasks.
    pub count: usize,
    /// Base seed; task `i` uses a seed derived from it and `i`.
    pub seed: u64,
}

/// One half of the pool, split at random with a fixed seed (DreamShard's unseen-table protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolHalf {
    /// Tables seen in training.
    Train,
    /// The other half, never seen in training.
    Test,
}

/// The seed of the fixed pool split (changing it changes every DreamShard/AutoShard suite).
pub const POOL_SPLIT_SEED: u64 = 0x5eed_0856;

/// Pool indices of one half of the pool: a seeded shuffle of 0..856, first half = train.
pub fn pool_half_ids(half: PoolHalf) -> Result<Vec<usize>> {
    let n = dlrm_pool()?.len();
    let mut ids: Vec<usize> = (0..n).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(POOL_SPLIT_SEED);
    for i in (1..n).rev() {
        ids.swap(i, rng.random_range(0..=i));
    }
    let (train, test) = ids.split_at(n / 2);
    let mut out = match half {
        PoolHalf::Train => train.to_vec(),
        PoolHalf::Test => test.to_vec(),
    };
    out.sort_unstable();
    Ok(out)
}

/// A task of a suite together with where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuiteTask {
    /// Schema tag of the task JSON Lines format.
    pub schema: String,
    /// Position in the suite.
    pub index: usize,
    /// The seed this task was drawn with.
    pub seed: u64,
    /// The protocol it follows.
    pub protocol: Protocol,
    /// Pool ids of the tables, in order (empty for user tasks).
    #[serde(default)]
    pub pool_ids: Vec<usize>,
    /// The task itself.
    #[serde(flatten)]
    pub task: Task,
}

/// Schema tag of one task line in a suite file.
pub const TASK_SCHEMA: &str = "shardplan.task/v1";

/// Derives the seed of task `index` from a suite's base seed (`SplitMix64` finaliser).
#[must_use]
pub fn task_seed(base: u64, index: usize) -> u64 {
    let mut z = base ^ (index as u64).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SuiteSpec {
    /// The NeuroShard protocol for `devices` and `max_dim`.
    #[must_use]
    pub fn neuroshard(devices: usize, max_dim: u32, count: usize, seed: u64) -> Self {
        Self { protocol: Protocol::NeuroShard, devices, max_dim, tables: None, pool_half: None, count, seed }
    }

    fn validate(&self) -> Result<()> {
        let ctx = "task suite";
        if self.count == 0 {
            return Err(Error::field(ctx, "count", 0, "at least 1"));
        }
        match self.protocol {
            Protocol::NeuroShard => {
                if !(4..=128).contains(&self.max_dim) || !self.max_dim.is_power_of_two() {
                    return Err(Error::field(ctx, "max_dim", self.max_dim, "a power of two in 4..=128"));
                }
                if self.devices == 0 || self.devices > MAX_DEVICES {
                    return Err(Error::field(ctx, "devices", self.devices, format!("1..={MAX_DEVICES}")));
                }
            }
            Protocol::DreamShard => {
                if self.devices == 0 || self.devices > MAX_DEVICES {
                    return Err(Error::field(ctx, "devices", self.devices, format!("1..={MAX_DEVICES}")));
                }
            }
            Protocol::AutoShard => {}
        }
        if let Some((lo, hi)) = self.tables
            && (lo == 0 || hi <= lo || hi > MAX_TABLES + 1)
        {
            return Err(Error::field(
                ctx,
                "tables",
                format!("[{lo}, {hi})"),
                format!("a range [min, max) with 1 <= min < max <= {}", MAX_TABLES + 1),
            ));
        }
        Ok(())
    }

    /// Draws task `index` of the suite.
    pub fn task(&self, index: usize) -> Result<SuiteTask> {
        self.validate()?;
        let seed = task_seed(self.seed, index);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let pool = dlrm_pool()?;
        let ids: Vec<usize> = match self.pool_half {
            Some(h) => pool_half_ids(h)?,
            None => (0..pool.len()).collect(),
        };
        let (task, pool_ids) = match self.protocol {
            Protocol::NeuroShard => {
                let d = self.devices;
                let (lo, hi) = self.tables.unwrap_or((d * 10 / 4, d * 60 / 4));
                let dims: Vec<u32> = (2..=7).map(|j| 1u32 << j).filter(|&x| x <= self.max_dim).collect();
                let budget = (d as u64 * 4 - 1) * GIB;
                draw(&mut rng, pool, &ids, (lo, hi), &dims, ElementType::Fp32, budget, |_| {
                    Devices::uniform(d, 4 * GIB)
                })?
            }
            Protocol::DreamShard => {
                let d = self.devices;
                let (lo, hi) = self.tables.unwrap_or((10, 101));
                draw(&mut rng, pool, &ids, (lo, hi), &[16], ElementType::Fp16, d as u64 * 5 * GIB, |_| {
                    Devices::uniform(d, 5 * GIB)
                })?
            }
            Protocol::AutoShard => {
                let (lo, hi) = self.tables.unwrap_or((80, 81));
                let budget = |t: usize| (t.div_ceil(10)) as u64 * 7 * GIB;
                draw(&mut rng, pool, &ids, (lo, hi), &[16, 32], ElementType::Fp16, budget(hi), |t| {
                    Devices::uniform(t.div_ceil(10), 7 * GIB)
                })?
            }
        };
        Ok(SuiteTask { schema: TASK_SCHEMA.into(), index, seed, protocol: self.protocol, pool_ids, task })
    }

    /// All tasks of the suite.
    pub fn tasks(&self) -> Result<Vec<SuiteTask>> {
        (0..self.count).map(|i| self.task(i)).collect()
    }
}

/// Draws tables with replacement until their total size fits `budget` (redrawing the whole task),
/// as the NeuroShard protocol does.
#[allow(clippy::too_many_arguments)]
fn draw(
    rng: &mut ChaCha8Rng,
    pool: &[PoolTable],
    ids: &[usize],
    (lo, hi): (usize, usize),
    dims: &[u32],
    dtype: ElementType,
    budget: u64,
    devices: impl Fn(usize) -> Result<Devices>,
) -> Result<(Task, Vec<usize>)> {
    const MAX_TRIES: usize = 10_000;
    for _ in 0..MAX_TRIES {
        let t = rng.random_range(lo..hi);
        let picks: Vec<(usize, u32)> =
            (0..t).map(|_| (ids[rng.random_range(0..ids.len())], dims[rng.random_range(0..dims.len())])).collect();
        let total: u64 = picks.iter().map(|&(id, dim)| pool[id].rows * u64::from(dim) * dtype.bytes()).sum();
        if total > budget {
            continue;
        }
        let tables = picks
            .iter()
            .enumerate()
            .map(|(k, &(id, dim))| pool[id].at_dim(format!("t{k}_p{id}"), dim, dtype))
            .collect::<Result<Vec<_>>>()?;
        let pool_ids = picks.iter().map(|p| p.0).collect();
        return Ok((Task::new(tables, devices(t)?)?, pool_ids));
    }
    Err(Error::Sampling(format!(
        "no draw of {lo}..{hi} tables fit {} in {MAX_TRIES} tries",
        crate::units::format_bytes_exact(budget)
    )))
}

/// A task drawn from the pool on `devices`, as `shardplan plan` and the page draw one: `tables` tables
/// ([`sample_pool_tables`]) when given, else task `index` of the NeuroShard suite of `seed` — its tables
/// drawn to fit the protocol's 4 GiB devices, then placed on `devices` (a report says whether a plan
/// still fits them).
///
/// # Errors
/// [`Error::InvalidField`] for an `index` past a suite's size or a `max_dim` the protocol refuses;
/// [`Error::Sampling`] when no draw fits.
pub fn sample_task(devices: Devices, max_dim: u32, tables: Option<usize>, seed: u64, index: usize) -> Result<Task> {
    if let Some(n) = tables {
        return Task::new(sample_pool_tables(n, max_dim, seed)?, devices);
    }
    if index >= MAX_SUITE_TASKS {
        return Err(Error::field("sampled task", "index", index, format!("0..{MAX_SUITE_TASKS}")));
    }
    let mut task = SuiteSpec::neuroshard(devices.count(), max_dim, index + 1, seed).task(index)?.task;
    task.devices = devices;
    Ok(task)
}

/// Most tables [`sample_pool_tables`] draws.
pub const MAX_SAMPLED_TABLES: usize = 100_000;

/// Draws `n` tables from the pool with replacement, each at a dim drawn uniformly from the powers of
/// two in 4..=`max_dim`, fp32 (named `t<k>_p<pool id>`).
pub fn sample_pool_tables(n: usize, max_dim: u32, seed: u64) -> Result<Vec<TableSpec>> {
    if n == 0 || n > MAX_SAMPLED_TABLES {
        return Err(Error::field("pool sample", "tables", n, format!("1..={MAX_SAMPLED_TABLES}")));
    }
    if !(4..=128).contains(&max_dim) || !max_dim.is_power_of_two() {
        return Err(Error::field("pool sample", "max_dim", max_dim, "a power of two in 4..=128"));
    }
    let pool = dlrm_pool()?;
    let dims: Vec<u32> = (2..=7).map(|j| 1u32 << j).filter(|&x| x <= max_dim).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|k| {
            let id = rng.random_range(0..pool.len());
            let dim = dims[rng.random_range(0..dims.len())];
            pool[id].at_dim(format!("t{k}_p{id}"), dim, ElementType::Fp32)
        })
        .collect()
}

/// A task as written in task files: tables in our JSON record form.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskInput {
    /// Tables.
    pub tables: Vec<TableInput>,
    /// Devices.
    pub devices: Devices,
    /// Memory rule (absent = [`MemoryRule::Weights`]).
    #[serde(default)]
    pub memory: MemoryRule,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neuroshard_tasks_follow_the_protocol() {
        for (d, max_dim) in [(4, 128), (8, 16)] {
            let suite = SuiteSpec::neuroshard(d, max_dim, 20, 7);
            for st in suite.tasks().unwrap() {
                let t = &st.task;
                assert!((d * 10 / 4..d * 60 / 4).contains(&t.tables.len()));
                assert!(t.total_bytes() <= (d as u64 * 4 - 1) * GIB);
                assert!(t.tables.iter().all(|x| x.dim <= max_dim && x.dim.is_power_of_two() && x.dim >= 4));
                assert_eq!(t.devices.mem_cap_bytes(), vec![4 * GIB; d].as_slice());
            }
        }
    }

    #[test]
    fn suites_are_deterministic_per_seed() {
        let a = SuiteSpec::neuroshard(4, 64, 3, 1).tasks().unwrap();
        let b = SuiteSpec::neuroshard(4, 64, 3, 1).tasks().unwrap();
        let c = SuiteSpec::neuroshard(4, 64, 3, 2).tasks().unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn pool_halves_partition_the_pool() {
        let mut all = pool_half_ids(PoolHalf::Train).unwrap();
        let test = pool_half_ids(PoolHalf::Test).unwrap();
        assert_eq!(all.len(), 428);
        assert!(test.iter().all(|t| all.binary_search(t).is_err()));
        all.extend(test);
        all.sort_unstable();
        assert_eq!(all, (0..856).collect::<Vec<_>>());
    }

    #[test]
    fn variants_follow_their_protocols() {
        let ds = SuiteSpec {
            protocol: Protocol::DreamShard,
            devices: 4,
            max_dim: 16,
            tables: None,
            pool_half: Some(PoolHalf::Test),
            count: 5,
            seed: 3,
        };
        let test_ids = pool_half_ids(PoolHalf::Test).unwrap();
        for st in ds.tasks().unwrap() {
            assert!(st.task.tables.iter().all(|t| t.dim == 16 && t.dtype == ElementType::Fp16));
            assert!(st.pool_ids.iter().all(|i| test_ids.binary_search(i).is_ok()));
            assert_eq!(st.task.devices.mem_cap_bytes(), &[5 * GIB; 4]);
        }
        let auto = SuiteSpec { protocol: Protocol::AutoShard, ..ds };
        for st in auto.tasks().unwrap() {
            assert_eq!(st.task.tables.len(), 80);
            assert_eq!(st.task.devices.count(), 8);
        }
    }

    #[test]
    fn bad_suite_parameters_are_named() {
        let e = SuiteSpec::neuroshard(4, 48, 1, 0).task(0).unwrap_err().to_string();
        assert!(e.contains("max_dim") && e.contains("48"), "{e}");
        let e = SuiteSpec::neuroshard(0, 16, 1, 0).task(0).unwrap_err().to_string();
        assert!(e.contains("devices"), "{e}");
    }
}
