//! Hosts: the hierarchical exchange in the one cost formula, planners that see it, and every path that
//! carries a topology (task documents, TorchRec's port and export, what-if edits).

use planner_core::cost::{AnalyticalModel, CostDefinition, CostModel, HardwareProfile, evaluate};
use planner_core::planners::torchrec::{TorchRecConfig, price_plan};
use planner_core::planners::{PlanContext, planner};
use planner_core::task::{Devices, Task, sample_task};
use planner_core::topology::{Link, Topology};
use planner_core::torchrec_plan::to_torchrec_plan;
use planner_core::whatif::{Edit, apply};
use planner_core::{Piece, Plan};

use super::table;

fn h100() -> AnalyticalModel {
    AnalyticalModel::new(HardwareProfile::builtin("h100").unwrap(), 65_536).unwrap()
}

fn link() -> Link {
    Link { bw_bytes_per_s: 48e9, latency_ms: 0.025 }
}

#[test]
fn a_multi_host_exchange_is_the_in_host_exchange_plus_the_hosts_network_share() {
    // 2 hosts × 2 devices; one table per device.
    let tables = vec![
        table("a", 1000, 64, 2.0),
        table("b", 1000, 32, 2.0),
        table("c", 1000, 128, 2.0),
        table("d", 1000, 16, 2.0),
    ];
    let task = Task::new(tables, Devices::uniform(4, 1 << 30).unwrap()).unwrap();
    let pieces: Vec<Piece> = (0..4).map(|t| Piece::cols(t, 0, task.tables[t].dim, t)).collect();
    let plan = Plan::new(&task, pieces).unwrap();
    let model = h100();
    let one_host = evaluate(&task, &plan, &model, CostDefinition::FourPhase).unwrap();
    let hosts = task.clone().with_topology(Some(Topology::new(2, 2, Some(link()), None).unwrap())).unwrap();
    let two = evaluate(&hosts, &plan, &model, CostDefinition::FourPhase).unwrap();
    // In-host phase: the model's all-to-all among each host's 2 devices.
    let host0 = model.bw_comm_ms(&[64.0, 32.0]).unwrap();
    let host1 = model.bw_comm_ms(&[128.0, 16.0]).unwrap();
    let in_host = [host0[0], host0[1], host1[0], host1[1]];
    // Network phase: B · 4 bytes · D_h · (H − 1)/(H · L) / bw + latency, each direction.
    let per_dim = 65_536.0 * 4.0 * 1.0 / 4.0 / 48e9 * 1e3;
    let net = [0.025 + 96.0 * per_dim, 0.025 + 96.0 * per_dim, 0.025 + 144.0 * per_dim, 0.025 + 144.0 * per_dim];
    for d in 0..4 {
        let got = &two.devices[d];
        assert!((got.bw_comm_ms - (in_host[d] + net[d])).abs() < 1e-12, "device {d}: {}", got.bw_comm_ms);
        assert!((got.fw_comm_ms - (in_host[d] + net[d])).abs() < 1e-12);
        assert!((got.network_ms - 2.0 * net[d]).abs() < 1e-12);
        assert_eq!(got.compute_ms, one_host.devices[d].compute_ms);
    }
    let link = two.bottleneck_link.clone().unwrap();
    assert_eq!(two.bottleneck_device, 2);
    assert_eq!(link.network_ms, two.devices[2].network_ms);
    // One host (given or not) prices exactly as before, and its report names no link.
    let single = task.clone().with_topology(Some(Topology::new(1, 4, None, None).unwrap())).unwrap();
    assert_eq!(evaluate(&single, &plan, &model, CostDefinition::FourPhase).unwrap(), one_host);
    assert!(one_host.bottleneck_link.is_none());
}

#[test]
fn planners_that_see_the_hosts_beat_the_same_planner_blind_to_them() {
    // 16 devices as 2 × 8 over a slow network: where the hosts' dims land matters.
    let blind = sample_task(Devices::uniform(16, 4 << 30).unwrap(), 128, Some(80), 3, 0).unwrap();
    let slow = Topology::new(2, 8, Some(Link { bw_bytes_per_s: 2e9, latency_ms: 0.05 }), None).unwrap();
    let aware = blind.clone().with_topology(Some(slow)).unwrap();
    let model = h100();
    let ctx = PlanContext::new(&model, 0);
    for name in ["neuroshard-fast+refine", "auto"] {
        let p = planner(name).unwrap().build();
        let blind_plan = p.plan(&blind, &ctx).unwrap();
        let aware_plan = p.plan(&aware, &ctx).unwrap();
        let priced_blind = evaluate(&aware, &blind_plan, &model, CostDefinition::NeuroShard).unwrap().cost_ms;
        let priced_aware = evaluate(&aware, &aware_plan, &model, CostDefinition::NeuroShard).unwrap().cost_ms;
        assert!(priced_aware < priced_blind, "{name}: aware {priced_aware} vs blind {priced_blind}");
    }
}

#[test]
fn task_documents_carry_their_topology_and_refuse_one_that_does_not_divide() {
    let task = Task::new(vec![table("a", 100, 8, 1.0)], Devices::uniform(4, 1 << 20).unwrap()).unwrap();
    let with = task.clone().with_topology(Some(Topology::new(2, 2, Some(link()), None).unwrap())).unwrap();
    let json = serde_json::to_string(&with).unwrap();
    assert!(json.contains("\"devices_per_host\":2"));
    assert_eq!(serde_json::from_str::<Task>(&json).unwrap(), with);
    // Without a topology the document is as before.
    assert!(!serde_json::to_string(&task).unwrap().contains("topology"));
    let bad = json.replace("\"hosts\":2", "\"hosts\":3");
    let e = serde_json::from_str::<Task>(&bad).unwrap_err().to_string();
    assert!(e.contains("hosts × devices_per_host") && e.contains("3 × 2 = 6") && e.contains("4 devices"), "{e}");
}

#[test]
fn torchrec_sees_the_hosts_and_the_export_places_ranks_by_them() {
    let tables: Vec<_> = (0..8).map(|i| table(&format!("t{i}"), 100_000, 64, 4.0)).collect();
    let task = Task::new(tables, Devices::uniform(8, 1 << 30).unwrap()).unwrap();
    let hosts = task
        .clone()
        .with_topology(Some(Topology::new(2, 4, Some(Link { bw_bytes_per_s: 1e9, latency_ms: 0.0 }), None).unwrap()))
        .unwrap();
    let pieces: Vec<Piece> = (0..8).map(|t| Piece::cols(t, 0, 64, t)).collect();
    let plan = Plan::new(&task, pieces).unwrap();
    // TorchRec prices cross-host comm at the network's bandwidth once there is more than one host.
    let one = price_plan(&task, &plan, &TorchRecConfig::default()).unwrap().objective_ms;
    let two = price_plan(&hosts, &plan, &TorchRecConfig::default()).unwrap().objective_ms;
    assert!(two > one, "{two} vs {one}");
    let mut cfg = TorchRecConfig::default();
    cfg.apply_topology(&hosts);
    assert_eq!(cfg.local_world_size, Some(4));
    assert_eq!(cfg.inter_host_bw, 1e6);
    // The export's local_world_size is the topology's; another is refused naming both.
    let doc = to_torchrec_plan(&hosts, &plan, None).unwrap();
    assert_eq!(doc.local_world_size, 4);
    assert_eq!(doc.plan["t5"].sharding_spec[0].placement, "rank:5/cuda:1");
    let e = to_torchrec_plan(&hosts, &plan, Some(8)).unwrap_err().to_string();
    assert!(e.contains("local_world_size") && e.contains("2 hosts × 4 devices"), "{e}");
}

#[test]
fn what_if_device_counts_keep_whole_hosts() {
    let task = Task::new(vec![table("a", 100, 8, 1.0)], Devices::uniform(4, 1 << 20).unwrap())
        .unwrap()
        .with_topology(Some(Topology::new(2, 2, Some(link()), None).unwrap()))
        .unwrap();
    let plan = Plan::new(&task, vec![Piece::cols(0, 0, 8, 3)]).unwrap();
    let (grown, moved) = apply(&task, &plan, &Edit::SetDeviceCount { count: 6, mem_cap_bytes: None }).unwrap();
    assert_eq!(grown.topology.as_ref().unwrap().hosts, 3);
    assert_eq!(moved.pieces()[0].device, 3);
    let e = apply(&task, &plan, &Edit::SetDeviceCount { count: 5, mem_cap_bytes: None }).unwrap_err().to_string();
    assert!(e.contains("count") && e.contains("2 devices per host"), "{e}");
}
