//! Hosts and the network between them: how a task's devices are grouped, and what the all-to-all costs
//! when it leaves a host.
//!
//! A task without a topology is one host of all its devices (every comm model prices that case). A
//! [`Topology`] groups the `N = hosts × devices_per_host` devices into hosts: device `d` is on host
//! `d / devices_per_host` (TorchRec's rank layout, `local_world_size = devices_per_host`).
//!
//! The exchange is priced as a hierarchical all-to-all (NCCL's PXN routing, TorchRec's
//! `TWRW`/`GRID` exchanges): device `i` on host `h` first exchanges with its host's peers, then sends
//! over its own network link what the host owes the other hosts, an equal share of the host's traffic
//! per device. With global batch `B`, `b` bytes per exchanged element, `H` hosts, `L` devices per host
//! and `D_h` the sum of the dims on host `h`:
//! ```text
//! in_host_i = the cost model's all-to-all of host h's L dim sums            (its comm model or preset)
//! network_i = latency + B · b · D_h · (H − 1) / (H · L) / network_bw        (each direction)
//! ```
//! Device `i` of host `h` sends `B · d_i · (L − 1)/L` inside the host (the same volume as a one-host
//! all-to-all of `L` devices at batch `B`), and the host sends `B · D_h · (H − 1)/H` out, spread over
//! its `L` links. With one host the network term is 0 and nothing changes; with one device per host
//! the in-host term is 0 and the network term is the flat all-to-all's `(N − 1)/N` remote share.
//! Planners therefore balance two things: each device's dims (in-host phase, compute) and each host's
//! dims (network phase).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::units::GIB;

/// One network link per device: what the network phase of the all-to-all crosses.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// Bandwidth one device reaches to other hosts, bytes per second (a NIC per GPU: the NIC's; one
    /// NIC shared by a host's GPUs: its share).
    pub bw_bytes_per_s: f64,
    /// Fixed time of one exchange over the network, ms.
    #[serde(default)]
    pub latency_ms: f64,
}

/// A named cluster shape: devices per host, the network link per device and host memory.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TopologyPreset {
    /// The name a user writes.
    pub name: &'static str,
    /// What it describes.
    pub description: &'static str,
    /// Devices per host.
    pub devices_per_host: usize,
    /// The network link per device.
    pub network: Link,
    /// Host memory (DRAM) per host, bytes.
    pub host_dram_bytes: u64,
    /// Bandwidth between one device and host memory, bytes per second.
    pub host_link_bw_bytes_per_s: f64,
}

/// The presets (`docs/COST_MODELS.md`, "Topology"): NCCL's published inter-host figures where there
/// are some, otherwise the line rate × 0.96 (the share NCCL reaches over NDR).
pub const TOPOLOGY_PRESETS: [TopologyPreset; 3] = [
    TopologyPreset {
        name: "h100-sxm",
        description: "8 × H100 SXM per host (NVLink 4), one 400 Gb/s NDR InfiniBand NIC per GPU (48 GB/s, 25 µs), 2 TiB DRAM, PCIe 5 to host (51.2 GB/s)",
        devices_per_host: 8,
        network: Link { bw_bytes_per_s: 48e9, latency_ms: 0.025 },
        host_dram_bytes: 2048 * GIB,
        host_link_bw_bytes_per_s: 51.2e9,
    },
    TopologyPreset {
        name: "a100-sxm",
        description: "8 × A100 SXM per host (NVLink 3), one 200 Gb/s HDR InfiniBand NIC per GPU (24 GB/s, 25 µs), 1 TiB DRAM, PCIe 4 to host (25.6 GB/s)",
        devices_per_host: 8,
        network: Link { bw_bytes_per_s: 24e9, latency_ms: 0.025 },
        host_dram_bytes: 1024 * GIB,
        host_link_bw_bytes_per_s: 25.6e9,
    },
    TopologyPreset {
        name: "pcie",
        description: "8 PCIe GPUs per host, one 100 Gb/s Ethernet NIC per host (1.5 GB/s per GPU, 50 µs), 512 GiB DRAM, PCIe 4 to host (25.6 GB/s)",
        devices_per_host: 8,
        network: Link { bw_bytes_per_s: 12e9 / 8.0, latency_ms: 0.050 },
        host_dram_bytes: 512 * GIB,
        host_link_bw_bytes_per_s: 25.6e9,
    },
];

/// How a task's devices are grouped into hosts, and the network between hosts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Topology {
    /// Number of hosts.
    pub hosts: usize,
    /// Devices on every host (`hosts × devices_per_host` = the task's devices).
    pub devices_per_host: usize,
    /// The network link per device (required with more than one host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<Link>,
    /// Host memory per host, bytes, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_dram_bytes: Option<u64>,
    /// Bandwidth between one device and host memory (what a cached table's misses cross), bytes per
    /// second, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_link_bw_bytes_per_s: Option<f64>,
    /// The preset it was made from, if any (for reports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
}

const CTX: &str = "topology";

impl Topology {
    /// A topology of `hosts × devices_per_host` devices; checked (see [`Topology::check`]).
    pub fn new(
        hosts: usize,
        devices_per_host: usize,
        network: Option<Link>,
        host_dram_bytes: Option<u64>,
    ) -> Result<Self> {
        let t =
            Self { hosts, devices_per_host, network, host_dram_bytes, host_link_bw_bytes_per_s: None, preset: None };
        t.check_shape()?;
        Ok(t)
    }

    /// The preset `name` for `devices` devices: its devices per host (or `devices_per_host` when given),
    /// `devices / devices_per_host` hosts.
    pub fn preset(name: &str, devices: usize, devices_per_host: Option<usize>) -> Result<Self> {
        let p = TOPOLOGY_PRESETS.iter().find(|p| p.name == name).ok_or_else(|| {
            Error::field(
                CTX,
                "preset",
                format!("{name:?}"),
                format!("one of {}", TOPOLOGY_PRESETS.map(|p| p.name).join(", ")),
            )
        })?;
        let per_host = devices_per_host.unwrap_or(p.devices_per_host).min(devices.max(1));
        let hosts = Self::hosts_for(devices, per_host)?;
        let mut t = Self::new(hosts, per_host, Some(p.network), Some(p.host_dram_bytes))?;
        t.host_link_bw_bytes_per_s = Some(p.host_link_bw_bytes_per_s);
        t.preset = Some(p.name.to_owned());
        Ok(t)
    }

    /// The number of hosts `devices` devices make at `devices_per_host` each; an error naming both when
    /// it does not divide.
    pub fn hosts_for(devices: usize, devices_per_host: usize) -> Result<usize> {
        if devices_per_host == 0 || !devices.is_multiple_of(devices_per_host) {
            return Err(Error::field(
                CTX,
                "devices_per_host",
                devices_per_host,
                format!("a divisor of the task's {devices} devices"),
            ));
        }
        Ok(devices / devices_per_host)
    }

    fn check_shape(&self) -> Result<()> {
        if self.hosts == 0 {
            return Err(Error::field(CTX, "hosts", 0, "at least 1"));
        }
        if self.devices_per_host == 0 {
            return Err(Error::field(CTX, "devices_per_host", 0, "at least 1"));
        }
        if self.hosts.checked_mul(self.devices_per_host).is_none_or(|n| n > crate::task::MAX_DEVICES) {
            return Err(Error::field(
                CTX,
                "hosts × devices_per_host",
                format!("{} × {}", self.hosts, self.devices_per_host),
                format!("at most {} devices", crate::task::MAX_DEVICES),
            ));
        }
        match self.network {
            None if self.hosts > 1 => Err(Error::field(
                CTX,
                "network",
                "absent",
                format!("a link (bw_bytes_per_s, latency_ms) for {} hosts", self.hosts),
            )),
            Some(l) if !(l.bw_bytes_per_s.is_finite() && l.bw_bytes_per_s > 0.0) => {
                Err(Error::field(CTX, "network.bw_bytes_per_s", l.bw_bytes_per_s, "a finite number > 0"))
            }
            Some(l) if !(l.latency_ms.is_finite() && l.latency_ms >= 0.0) => {
                Err(Error::field(CTX, "network.latency_ms", l.latency_ms, "a finite number ≥ 0"))
            }
            _ => match self.host_link_bw_bytes_per_s {
                Some(b) if !(b.is_finite() && b > 0.0) => {
                    Err(Error::field(CTX, "host_link_bw_bytes_per_s", b, "a finite number > 0"))
                }
                _ => Ok(()),
            },
        }
    }

    /// Checks the topology against a task's device count.
    pub fn check(&self, devices: usize) -> Result<()> {
        self.check_shape()?;
        let n = self.hosts * self.devices_per_host;
        if n != devices {
            return Err(Error::field(
                CTX,
                "hosts × devices_per_host",
                format!("{} × {} = {n}", self.hosts, self.devices_per_host),
                format!("the task's {devices} devices"),
            ));
        }
        Ok(())
    }

    /// The host of device `d`.
    #[must_use]
    pub fn host_of(&self, d: usize) -> usize {
        d / self.devices_per_host
    }

    /// Whether devices talk over a network at all.
    #[must_use]
    pub fn is_multi_host(&self) -> bool {
        self.hosts > 1
    }

    /// The dims each device puts on the network: its dim sum, except that a row-split table's pooled
    /// outputs cross it once per host that holds row pieces of it — the host's pieces reduce their
    /// partial sums inside the host first (a hierarchical reduce-scatter; TorchRec's table-row-wise
    /// exchange) — so the table's dim counts once per such host, shared by its pieces there.
    /// `row_pieces` are `(device, table, dim)` of every row piece.
    #[must_use]
    pub fn network_dims(&self, dim_sums: &[f64], row_pieces: &[(usize, usize, u32)]) -> Vec<f64> {
        let mut out = dim_sums.to_vec();
        if row_pieces.is_empty() {
            return out;
        }
        let mut per_host_table: std::collections::BTreeMap<(usize, usize), u32> = std::collections::BTreeMap::new();
        for &(d, t, _) in row_pieces {
            *per_host_table.entry((self.host_of(d), t)).or_default() += 1;
        }
        for &(d, t, dim) in row_pieces {
            let k = per_host_table.get(&(self.host_of(d), t)).copied().unwrap_or(1).max(1);
            if let Some(x) = out.get_mut(d) {
                *x += f64::from(dim) / f64::from(k) - f64::from(dim);
            }
        }
        out
    }

    /// Each device's network time of one exchange direction (0 everywhere with one host), ms, given the
    /// per-device network dims ([`Topology::network_dims`]) and the bytes one unit of dim moves per step
    /// ([`crate::cost::CostModel::exchange_bytes_per_dim`]).
    #[must_use]
    pub fn network_ms(&self, dims: &[f64], bytes_per_dim: f64) -> Vec<f64> {
        let Some(link) = self.network.filter(|_| self.is_multi_host()) else {
            return vec![0.0; dims.len()];
        };
        let (h, l) = (self.hosts as f64, self.devices_per_host as f64);
        let per_dim = bytes_per_dim * (h - 1.0) / (h * l) / link.bw_bytes_per_s * 1e3;
        let host_sums: Vec<f64> = dims.chunks(self.devices_per_host).map(|c| c.iter().sum()).collect();
        (0..dims.len())
            .map(|d| link.latency_ms + host_sums.get(self.host_of(d)).copied().unwrap_or(0.0) * per_dim)
            .collect()
    }

    /// A one-line description (`8 hosts × 8 devices, network 48 GB/s + 25 µs per device`).
    #[must_use]
    pub fn describe(&self) -> String {
        use std::fmt::Write as _;
        let mut s = format!("{} hosts × {} devices", self.hosts, self.devices_per_host);
        if let Some(l) = self.network.filter(|_| self.is_multi_host()) {
            let _ = write!(s, ", network {:.3} GB/s + {:.0} µs per device", l.bw_bytes_per_s / 1e9, l.latency_ms * 1e3);
        }
        if let Some(p) = &self.preset {
            let _ = write!(s, " ({p})");
        }
        s
    }
}

/// A topology as a user gives it: a preset and overrides, or hosts and a network link. The CLI's flags,
/// the bindings' requests and the page fill it in; [`TopologySpec::resolve`] is the one rule that turns
/// it into a [`Topology`] for a task's device count.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    /// A preset name ([`TOPOLOGY_PRESETS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Number of hosts (default: the device count / devices per host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<usize>,
    /// Devices per host (default: the preset's, or the device count / hosts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices_per_host: Option<usize>,
    /// Network bandwidth per device, GB/s (10⁹ bytes per second); overrides the preset's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_gbps: Option<f64>,
    /// Network latency of one exchange, µs; overrides the preset's (default 0 without a preset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_latency_us: Option<f64>,
    /// Host memory per host, bytes; overrides the preset's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_dram_bytes: Option<u64>,
    /// Bandwidth between a device and host memory, GB/s; overrides the preset's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_link_gbps: Option<f64>,
}

impl TopologySpec {
    /// Whether the user gave nothing (the task stays one host).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The topology for `devices` devices, or `None` when nothing was given.
    pub fn resolve(&self, devices: usize) -> Result<Option<Topology>> {
        if self.is_empty() {
            return Ok(None);
        }
        let per_host = match (self.hosts, self.devices_per_host) {
            (_, Some(l)) => Some(l),
            (Some(0), None) => return Err(Error::field(CTX, "hosts", 0, "at least 1")),
            (Some(h), None) if !devices.is_multiple_of(h) => {
                return Err(Error::field(CTX, "hosts", h, format!("a divisor of the task's {devices} devices")));
            }
            (Some(h), None) => Some(devices / h),
            (None, None) => None,
        };
        let mut t = if let Some(name) = &self.preset {
            Topology::preset(name, devices, per_host)?
        } else {
            let l = per_host.unwrap_or(devices);
            let h = Topology::hosts_for(devices, l)?;
            Topology {
                hosts: h,
                devices_per_host: l,
                network: None,
                host_dram_bytes: None,
                host_link_bw_bytes_per_s: None,
                preset: None,
            }
        };
        if let Some(h) = self.hosts.filter(|&h| h != t.hosts) {
            return Err(Error::field(
                CTX,
                "hosts",
                h,
                format!("{} ({devices} devices at {} per host)", t.hosts, t.devices_per_host),
            ));
        }
        if self.network_gbps.is_some() || self.network_latency_us.is_some() {
            let base = t.network.unwrap_or(Link { bw_bytes_per_s: f64::NAN, latency_ms: 0.0 });
            let bw = self.network_gbps.map_or(base.bw_bytes_per_s, |g| g * 1e9);
            if self.network_gbps.is_some_and(|g| !(g.is_finite() && g > 0.0)) {
                return Err(Error::field(
                    CTX,
                    "network_gbps",
                    self.network_gbps.unwrap_or_default(),
                    "a finite number > 0",
                ));
            }
            t.network = Some(Link {
                bw_bytes_per_s: bw,
                latency_ms: self.network_latency_us.map_or(base.latency_ms, |us| us / 1e3),
            });
            if bw.is_nan() {
                return Err(Error::field(
                    CTX,
                    "network_gbps",
                    "absent",
                    "a bandwidth in GB/s (or a preset) with network_latency_us",
                ));
            }
        }
        if let Some(b) = self.host_dram_bytes {
            if b == 0 {
                return Err(Error::field(CTX, "host_dram_bytes", 0, "at least 1 byte"));
            }
            t.host_dram_bytes = Some(b);
        }
        if let Some(g) = self.host_link_gbps {
            if !(g.is_finite() && g > 0.0) {
                return Err(Error::field(CTX, "host_link_gbps", g, "a finite number > 0"));
            }
            t.host_link_bw_bytes_per_s = Some(g * 1e9);
        }
        t.check(devices)?;
        Ok(Some(t))
    }
}

impl<'de> Deserialize<'de> for Topology {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            hosts: usize,
            devices_per_host: usize,
            #[serde(default)]
            network: Option<Link>,
            #[serde(default)]
            host_dram_bytes: Option<u64>,
            #[serde(default)]
            host_link_bw_bytes_per_s: Option<f64>,
            #[serde(default)]
            preset: Option<String>,
        }
        let r = Raw::deserialize(d)?;
        let t = Self {
            host_link_bw_bytes_per_s: r.host_link_bw_bytes_per_s,
            preset: r.preset,
            ..Self::new(r.hosts, r.devices_per_host, r.network, r.host_dram_bytes).map_err(serde::de::Error::custom)?
        };
        t.check_shape().map_err(serde::de::Error::custom)?;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_divide_or_name_the_field() {
        let t = Topology::preset("h100-sxm", 64, None).unwrap();
        assert_eq!((t.hosts, t.devices_per_host), (8, 8));
        t.check(64).unwrap();
        let e = Topology::preset("h100-sxm", 12, None).unwrap_err().to_string();
        assert!(e.contains("devices_per_host") && e.contains("12"), "{e}");
        let e = Topology::preset("dgx", 8, None).unwrap_err().to_string();
        assert!(e.contains("h100-sxm") && e.contains("\"dgx\""), "{e}");
        // Fewer devices than a preset's host: one host of them.
        assert_eq!(Topology::preset("h100-sxm", 4, None).unwrap().hosts, 1);
    }

    #[test]
    fn bad_shapes_and_links_are_refused_by_name() {
        let link = Some(Link { bw_bytes_per_s: 1e9, latency_ms: 0.0 });
        assert!(Topology::new(2, 4, None, None).unwrap_err().to_string().contains("network"));
        assert!(Topology::new(0, 4, link, None).unwrap_err().to_string().contains("hosts"));
        let bad = Some(Link { bw_bytes_per_s: -1.0, latency_ms: 0.0 });
        assert!(Topology::new(2, 4, bad, None).unwrap_err().to_string().contains("network.bw_bytes_per_s"));
        let nan = Some(Link { bw_bytes_per_s: 1e9, latency_ms: f64::NAN });
        assert!(Topology::new(2, 4, nan, None).unwrap_err().to_string().contains("latency_ms"));
        let e = Topology::new(2, 4, link, None).unwrap().check(6).unwrap_err().to_string();
        assert!(e.contains("2 × 4 = 8") && e.contains("6 devices"), "{e}");
        assert!(Topology::new(usize::MAX, 2, link, None).is_err());
        let e = serde_json::from_str::<Topology>(r#"{"hosts":2,"devices_per_host":2,"network":{"bw_bytes_per_s":0}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("network.bw_bytes_per_s"), "{e}");
    }

    #[test]
    fn specs_resolve_through_one_rule() {
        assert_eq!(TopologySpec::default().resolve(8).unwrap(), None);
        let spec = |s: &str| serde_json::from_str::<TopologySpec>(s).unwrap();
        let t = spec(r#"{"preset":"h100-sxm","network_gbps":24}"#).resolve(32).unwrap().unwrap();
        assert_eq!((t.hosts, t.devices_per_host), (4, 8));
        assert_eq!(t.network.unwrap().bw_bytes_per_s, 24e9);
        assert_eq!(t.network.unwrap().latency_ms, 0.025);
        let t = spec(r#"{"hosts":4,"network_gbps":10,"network_latency_us":5}"#).resolve(16).unwrap().unwrap();
        assert_eq!((t.hosts, t.devices_per_host), (4, 4));
        assert_eq!(t.network, Some(Link { bw_bytes_per_s: 1e10, latency_ms: 0.005 }));
        // Hosts without a network, hosts that do not divide, hosts that contradict devices per host.
        assert!(spec(r#"{"hosts":2}"#).resolve(8).unwrap_err().to_string().contains("network"));
        assert!(spec(r#"{"hosts":3,"network_gbps":1}"#).resolve(8).unwrap_err().to_string().contains("divisor"));
        let e = spec(r#"{"hosts":2,"devices_per_host":2,"network_gbps":1}"#).resolve(8).unwrap_err().to_string();
        assert!(e.contains("hosts") && e.contains("4 (8 devices at 2 per host)"), "{e}");
        assert!(
            spec(r#"{"preset":"pcie","network_gbps":-1}"#)
                .resolve(16)
                .unwrap_err()
                .to_string()
                .contains("network_gbps")
        );
        assert!(
            spec(r#"{"devices_per_host":4,"network_latency_us":5}"#)
                .resolve(8)
                .unwrap_err()
                .to_string()
                .contains("network_gbps")
        );
        // One host needs no network.
        assert_eq!(spec(r#"{"hosts":1}"#).resolve(8).unwrap().unwrap().hosts, 1);
        assert!(serde_json::from_str::<TopologySpec>(r#"{"host":2}"#).is_err());
    }

    #[test]
    fn network_time_follows_the_host_sums() {
        let t = Topology::new(2, 2, Some(Link { bw_bytes_per_s: 1e9, latency_ms: 0.5 }), None).unwrap();
        // Host 0 holds 100 dims, host 1 holds 300; 1e6 bytes per dim; (H−1)/(H·L) = 1/4.
        let n = t.network_ms(&[100.0, 0.0, 100.0, 200.0], 1e6);
        let host0 = 0.5 + 100.0 * 1e6 / 4.0 / 1e9 * 1e3;
        let host1 = 0.5 + 300.0 * 1e6 / 4.0 / 1e9 * 1e3;
        assert_eq!(n, vec![host0, host0, host1, host1]);
        // One host: no network.
        let one = Topology::new(1, 4, None, None).unwrap();
        assert_eq!(one.network_ms(&[1.0, 2.0, 3.0, 4.0], 1e6), vec![0.0; 4]);
    }

    #[test]
    fn a_row_split_table_crosses_the_network_once_per_host() {
        let t = Topology::new(2, 2, Some(Link { bw_bytes_per_s: 1e9, latency_ms: 0.0 }), None).unwrap();
        // Table 7 (dim 64) row-split over host 0's two devices (table-row-wise): its partial sums are
        // reduced inside the host, so host 0 sends 64 dims, not 128. Device 2 also holds a 32-column piece.
        let dims = [64.0, 64.0, 32.0, 0.0];
        let net = t.network_dims(&dims, &[(0, 7, 64), (1, 7, 64)]);
        assert_eq!(net, vec![32.0, 32.0, 32.0, 0.0]);
        // Row-split over all four devices (row-wise over both hosts): once per host.
        let net = t.network_dims(&[64.0, 64.0, 96.0, 64.0], &[(0, 7, 64), (1, 7, 64), (2, 7, 64), (3, 7, 64)]);
        assert_eq!(net, vec![32.0, 32.0, 64.0, 32.0]);
        // Without row pieces the network reads the dim sums.
        assert_eq!(t.network_dims(&dims, &[]), dims.to_vec());
    }
}
