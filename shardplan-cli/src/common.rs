//! Shared pieces of the subcommands: loading tables, choosing the cost model, rendering tables. Files
//! are read and written through `shardplan-files`.

use std::path::Path;

use anyhow::{Context, Result, bail};
use clap::Args;
use planner_core::cost::{CostDefinition, CostModel, ModelChoice, NeuralModel, model_names, profiles};
use planner_core::units::parse_bytes;
use planner_core::{Devices, MemoryRule, SplitRule, TableSpec};

/// Cost-model options shared by every subcommand that prices plans.
#[derive(Args, Debug, Clone)]
pub struct CostArgs {
    /// Cost model: an embedded trained profile (`h100`, the default; `shardplan list` names them all),
    /// `cpu` (the embedded CPU profile measured on this machine's CPU model, refused where there is
    /// none), `analytical` (TorchRec's perf estimator), or the directory of a profile written by
    /// `shardplan-train`.
    #[arg(long, default_value = profiles::DEFAULT_PROFILE)]
    pub cost_model: String,
    /// With a trained profile that has comm models, but none for the task's device count, price comm
    /// with the analytical model instead of refusing (the cost model's name then says so). A profile
    /// with no comm model at all (measured on one GPU) always prices comm analytically.
    #[arg(long)]
    pub comm_fallback: bool,
    /// Hardware preset of the analytical model: torchrec, h100, h100-ib, a100, rtx2080ti (default:
    /// torchrec, or for an embedded profile's comm the preset of its hardware).
    #[arg(long)]
    pub hw: Option<String>,
    /// Override the profile's memory bandwidth, GB/s (10^9 bytes/s).
    #[arg(long)]
    pub hbm_gbps: Option<f64>,
    /// Override the profile's all-to-all bandwidth, GB/s (10^9 bytes/s).
    #[arg(long)]
    pub comm_gbps: Option<f64>,
    /// Global batch size the costs are for: the analytical model scales to any [default: 65536]; a
    /// trained profile predicts the batch it was measured at (its card's `batch_size`, which is then
    /// the default) and refuses another.
    #[arg(long)]
    pub batch: Option<u64>,
    /// Cost definition: `neuroshard` (start delays feed forward comm) or `four-phase` (DreamShard).
    #[arg(long, default_value = "neuroshard", value_parser = parse_definition)]
    pub definition: CostDefinition,
    /// With a trained ensemble profile, plan against the members' mean plus this many standard
    /// deviations (0: the mean): the search then avoids sets the ensemble disagrees on.
    #[arg(long, default_value_t = 0.0)]
    pub risk: f64,
    /// With a trained profile, price a plan at the expected time of its slowest device, each device's
    /// compute uncertain by the profile's validation error (devices holding pieces of the same tables
    /// erring together), instead of its largest predicted total: the search then keeps slack where
    /// several devices would otherwise tie at the top.
    #[arg(long)]
    pub expected_max: bool,
    /// With a trained profile, price compute with its memory-terms model (a fitted, non-negative cost per
    /// piece, lookup, element, distinct row and cache line; `docs/COST_MODELS.md`) instead of its
    /// networks; comm stays the profile's.
    #[arg(long)]
    pub compute_terms: bool,
}

fn parse_definition(s: &str) -> Result<CostDefinition, String> {
    CostDefinition::from_name(s).map_err(|e| e.to_string())
}

/// How the devices are grouped into hosts (docs/FORMATS.md, "Topology"); nothing given = one host.
#[derive(Args, Debug, Clone, Default)]
pub struct TopologyArgs {
    /// A topology preset (`h100-sxm`, `a100-sxm`, `pcie`: devices per host, network link per device,
    /// host DRAM; see `shardplan list`), or a JSON file of a topology (`hosts`, `devices_per_host`,
    /// `network`: {`bw_bytes_per_s`, `latency_ms`}, `host_dram_bytes`).
    #[arg(long)]
    pub topology: Option<String>,
    /// Number of hosts the devices are spread over (default: devices / devices per host).
    #[arg(long)]
    pub hosts: Option<usize>,
    /// Devices per host (TorchRec's `local_world_size`; default: the preset's, or devices / hosts).
    #[arg(long)]
    pub devices_per_host: Option<usize>,
    /// Network bandwidth per device between hosts, GB/s (overrides the preset's).
    #[arg(long)]
    pub network_gbps: Option<f64>,
    /// Fixed time of one exchange over the network, µs (overrides the preset's; default 0).
    #[arg(long)]
    pub network_latency_us: Option<f64>,
    /// Host memory per host (`2TiB`, bytes; overrides the preset's; default 128 GiB per device,
    /// TorchRec's `DDR_CAP`).
    #[arg(long)]
    pub host_dram: Option<String>,
    /// Bandwidth between a device and host memory, GB/s, what cached tables' misses cross (overrides
    /// the preset's; default TorchRec's 32 GiB/s).
    #[arg(long)]
    pub host_link_gbps: Option<f64>,
}

impl TopologyArgs {
    /// The topology these flags give for `devices` devices (`None`: one host).
    pub fn topology(&self, devices: usize) -> Result<Option<planner_core::topology::Topology>> {
        use planner_core::topology::{Topology, TopologySpec};
        let mut spec = TopologySpec {
            preset: None,
            hosts: self.hosts,
            devices_per_host: self.devices_per_host,
            network_gbps: self.network_gbps,
            network_latency_us: self.network_latency_us,
            host_dram_bytes: self.host_dram.as_deref().map(|s| parse_bytes("--host-dram", s)).transpose()?,
            host_link_gbps: self.host_link_gbps,
        };
        match self.topology.as_deref() {
            Some(f)
                if Path::new(f).extension().is_some_and(|e| e.eq_ignore_ascii_case("json"))
                    || Path::new(f).is_file() =>
            {
                let text = shardplan_files::read_text_capped(Path::new(f), 1 << 20)
                    .with_context(|| format!("reading the topology file {f}"))?;
                let file: Topology =
                    serde_json::from_str(&text).with_context(|| format!("in the topology file {f}"))?;
                if !spec.is_empty() {
                    bail!(
                        "--topology {f} is a file: give its values there, not with --hosts/--devices-per-host/--network-*/--host-dram"
                    );
                }
                file.check(devices).with_context(|| format!("in the topology file {f}"))?;
                return Ok(Some(file));
            }
            name => spec.preset = name.map(str::to_owned),
        }
        spec.resolve(devices).context("--topology and its options")
    }
}

/// Memory-rule and split-rule options shared by every subcommand that decides or reports whether a plan
/// fits.
#[derive(Args, Debug, Clone)]
pub struct MemoryArgs {
    /// How device memory is counted. `torchrec`: TorchRec 1.9.2's rule — 15% of every cap, the dense
    /// parameters and 20 copies of a batch's input indices are reserved, and a piece costs its weights,
    /// TorchRec's optimizer state and its input/output buffers for the batch (what a training job
    /// needs). `weights`: the seed papers' rule — weights + optimizer state against the whole cap
    /// (reproduces their tables). Applies to every task, replacing a task file's own rule.
    #[arg(long, default_value = "torchrec", value_parser = ["torchrec", "weights"])]
    pub memory_rule: String,
    /// torchrec rule: share of every cap kept back, in [0, 1) [default: 0.15]
    #[arg(long)]
    pub reserved_fraction: Option<f64>,
    /// torchrec rule: samples per device and step (TorchRec's per-rank batch size) [default: 512]
    #[arg(long)]
    pub batch_per_rank: Option<u64>,
    /// torchrec rule: bytes per device reserved for dense parameters (`1GiB`, `512MiB`, bytes; TorchRec
    /// reserves 6 x the dense model's parameter bytes) [default: 0]
    #[arg(long)]
    pub dense_bytes: Option<String>,
    /// Which splits plans may use. `torchrec`: only what a TorchRec sharding plan can express — a
    /// column-split table in equal blocks, a row-split table as one range per rank in rank order.
    /// `any`: also NeuroShard's dyadic halvings (e.g. 64 columns as 32 + 16 + 16), which TorchRec cannot
    /// build. [default: torchrec when a TorchRec plan is written (--torchrec-out), else any]
    #[arg(long, value_parser = ["any", "torchrec"])]
    pub splits: Option<String>,
}

impl MemoryArgs {
    /// The rule these flags describe.
    pub fn rule(&self) -> Result<MemoryRule> {
        let dense = self.dense_bytes.as_deref().map(|s| parse_bytes("--dense-bytes", s)).transpose()?;
        let rule = MemoryRule::from_parts(&self.memory_rule, self.reserved_fraction, dense, self.batch_per_rank, None)
            .context("--memory-rule and its parameters (--reserved-fraction, --batch-per-rank, --dense-bytes)")?;
        Ok(rule)
    }

    /// The split rule `--splits` names, or `default`.
    pub fn splits(&self, default: SplitRule) -> Result<SplitRule> {
        Ok(self.splits.as_deref().map(SplitRule::parse).transpose()?.unwrap_or(default))
    }
}

impl CostArgs {
    /// Builds the chosen cost model through planner-core's one rule ([`ModelChoice`]); a profile
    /// directory is read here and finished under the same rule (its comm priced by the `torchrec`
    /// preset, or `--hw`, where it has none).
    pub fn build(&self) -> Result<Box<dyn CostModel>> {
        let name = if self.cost_model == profiles::CPU_ALIAS {
            profiles::cpu_profile_for(&shardplan_files::cpu_model(), shardplan_files::llc_bytes())
                .context("--cost-model cpu")?
                .name
        } else {
            self.cost_model.as_str()
        };
        let choice = ModelChoice {
            hw: self.hw.clone(),
            hbm_gbps: self.hbm_gbps,
            comm_gbps: self.comm_gbps,
            global_batch: self.batch,
            risk: self.risk,
            comm_fallback: self.comm_fallback,
            expected_max: self.expected_max,
            compute_terms: self.compute_terms,
            ..ModelChoice::new(name)
        };
        let flags = "--cost-model and its options (--batch, --risk, --expected-max, --compute-terms, --hw, --hbm-gbps, --comm-gbps, --comm-fallback)";
        if choice.is_known() {
            return choice.build().context(flags);
        }
        let dir = Path::new(&self.cost_model);
        if dir.join("card.json").is_file() {
            return choice.build_loaded(load_profile_dir(dir)?).context(flags);
        }
        Err(planner_core::Error::UnknownCostModel {
            name: self.cost_model.clone(),
            known: format!(
                "{}, {} (the CPU profile of this machine), or a profile directory containing card.json",
                model_names().join(", "),
                profiles::CPU_ALIAS
            ),
        }
        .into())
    }
}

/// Loads a profile directory (`card.json` and the graphs it names).
pub fn load_profile_dir(dir: &Path) -> Result<NeuralModel> {
    let card_path = dir.join("card.json");
    let card = std::fs::read_to_string(&card_path).with_context(|| format!("reading {}", card_path.display()))?;
    let mut files = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "onnx") {
            let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            files.insert(path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default(), bytes);
        }
    }
    NeuralModel::from_profile(&card, |f| files.get(f).map(Vec::as_slice))
        .with_context(|| format!("loading profile {}", dir.display()))
}

/// Parses `--mem`: one size for every device, or a comma-separated size per device.
pub fn devices(count: usize, mem: &str) -> Result<Devices> {
    let caps: Vec<u64> = mem.split(',').map(|s| parse_bytes("--mem", s)).collect::<Result<_, _>>()?;
    let caps = match caps.len() {
        1 => return Ok(Devices::uniform(count, caps[0])?),
        n if n == count => caps,
        n => bail!("--mem lists {n} caps but --devices is {count}; give one cap, or one per device"),
    };
    Ok(Devices::new(caps)?)
}

/// Default per-device cap of the seeds' protocol.
pub const DEFAULT_MEM: &str = "4GiB";

/// Largest tables file read (a file of [`planner_core::task::MAX_TABLES`] tables is a few tens of MB).
pub const MAX_TABLES_FILE_BYTES: u64 = 256 << 20;

/// Loads tables from a `.json` or `.csv` file.
pub fn load_tables(path: &Path, default_dim: Option<u32>) -> Result<Vec<TableSpec>> {
    let text = shardplan_files::read_text_capped(path, MAX_TABLES_FILE_BYTES).context("reading the tables file")?;
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    let tables = match ext.as_str() {
        "csv" => planner_core::input::parse_tables_csv(&text, default_dim),
        "json" => planner_core::input::parse_tables_json(&text),
        _ => bail!("tables file {}: unknown extension {ext:?}; use .json or .csv", path.display()),
    };
    tables.with_context(|| format!("in tables file {}", path.display()))
}

/// A plain text table with a header row, right-aligning numeric-looking cells.
pub fn render_table(header: &[&str], rows: &[Vec<String>], markdown: bool) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).chain([header[c].len()]).max().unwrap_or(0))
        .collect();
    let numeric = |s: &str| s.chars().next().is_some_and(|c| c.is_ascii_digit() || c == '-' || c == '+');
    let line = |cells: Vec<String>| -> String {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(
                |(c, s)| if numeric(s) { format!("{s:>w$}", w = widths[c]) } else { format!("{s:<w$}", w = widths[c]) },
            )
            .collect();
        if markdown { format!("| {} |", parts.join(" | ")) } else { parts.join("  ").trim_end().to_string() }
    };
    let mut out = vec![line(header.iter().map(|s| (*s).to_string()).collect())];
    if markdown {
        out.push(format!("|{}|", widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("|")));
    }
    out.extend(rows.iter().map(|r| line(r.clone())));
    out.join("\n")
}
