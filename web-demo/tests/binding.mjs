// The binding as JavaScript sees it: the browser module that web-demo/build.sh ships (web-demo/pkg),
// loaded in Node. Inputs are plain JS objects, as the page sends them; outputs are read back as the page
// reads them. Native parity goes through tests/fixtures/native-parity.json, which a native test
// (planner-wasm/tests/it/main.rs) keeps equal to what native code computes.
// Run after web-demo/build.sh: `node tests/binding.mjs` from web-demo/ (scripts/test-all.sh does).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { gzipSync } from 'node:zlib';
import * as pw from '../pkg/planner_wasm.js';

const here = new URL('.', import.meta.url);
pw.initSync({ module: readFileSync(new URL('../pkg/planner_wasm_bg.wasm', here)) });
const parity = JSON.parse(readFileSync(new URL('fixtures/native-parity.json', here), 'utf8'));

const sample = () => pw.sampleTask({ devices: 4, max_dim: 64, seed: 7 });
const planRequest = (task, planner, extra = {}) => ({ task, planner, seed: 3, ...extra });
// The message of what a call throws, as `String(error)` shows it.
function thrown(fn) {
  try {
    fn();
  } catch (e) {
    return String(e.message ?? e);
  }
  assert.fail('expected the call to throw');
}

test('lists planners and cost models', () => {
  const names = pw.listPlanners().map((p) => p.name);
  assert.ok(names.includes('size-lookup') && names.includes('random'), names.join());
  const models = pw.listCostModels();
  assert.equal(models[0].name, 'analytical');
  assert.ok(models.some((m) => m.name === 'h100' && m.is_default === true), JSON.stringify(models));
  assert.ok(models[0].hardware.includes('h100'));
});

test('samples the same task as native code', () => {
  assert.deepEqual(pw.sampleTask(parity.sample_request), parity.task);
});

test('plans as native code does, in the CLI schema, with a planning time', () => {
  for (const want of parity.plans) {
    const out = pw.plan({ task: parity.task, planner: want.planner, seed: parity.plan_seed, model: want.model });
    assert.ok(out.planning_ms >= 0 && out.planning_ms < 60_000, `${out.planning_ms}`);
    const doc = out.document;
    assert.equal(doc.schema, 'shardplan.plan/v1');
    assert.equal(doc.planner, want.planner);
    assert.ok(doc.report.feasible && doc.report.cost_ms > 0);
    assert.deepEqual(doc.pieces, want.pieces, `${want.planner}: the native plan`);
    // The learned default model runs in the same plain-Rust evaluators natively and in wasm (f64, no
    // reordering): the same number.
    assert.equal(doc.report.cost_ms, want.cost_ms, `${want.planner}: wasm ${doc.report.cost_ms}, native ${want.cost_ms}`);
  }
  // The default profile predicts forward + backward as one figure, so `compute_split` is null.
  const out = pw.plan(planRequest(sample(), 'size-lookup'));
  assert.equal(out.document.report.devices[0].compute_split, null);
});

test('evaluates and edits plans', () => {
  const doc = pw.plan(planRequest(sample(), 'dim')).document;
  const same = pw.evaluatePlan(doc, undefined);
  assert.deepEqual(same.report, doc.report);
  const h100 = pw.evaluatePlan(doc, { cost_model: 'analytical', hw: 'h100' });
  assert.equal(h100.report.cost_model, 'analytical:h100');
  // The analytical model knows the forward/backward parts; they sum to the compute time.
  const d0 = h100.report.devices[0];
  assert.ok(Math.abs(d0.compute_split.fwd_ms + d0.compute_split.bwd_ms - d0.compute_ms) < 1e-9, JSON.stringify(d0));
  // The default is the embedded H100 profile (learned compute, analytical comm), run by tract in wasm.
  assert.match(same.report.cost_model, /^neural:h100/);

  // Move a piece of the bottleneck device elsewhere: the cost changes.
  const bottleneck = doc.report.bottleneck_device;
  const piece = doc.pieces.find((p) => p.device === bottleneck);
  const moved = pw.whatIf(doc, { op: 'move', table_id: piece.table_id, col_offset: piece.col_offset, to_device: (bottleneck + 1) % 4 }, undefined);
  assert.notEqual(moved.report.cost_ms, doc.report.cost_ms);
  assert.equal(moved.planner, 'dim+what-if');

  // Split, then grow to 6 devices: the task and the per-device breakdown follow.
  const split = pw.whatIf(doc, { op: 'split', table_id: piece.table_id, col_offset: piece.col_offset }, undefined);
  assert.equal(split.pieces.length, doc.pieces.length + 1);
  const grown = pw.whatIf(split, { op: 'set_device_count', count: 6 }, undefined);
  assert.equal(grown.report.devices.length, 6);
  assert.equal(grown.task.devices.mem_cap_bytes.length, 6);
});

test('errors are exceptions with the core message', () => {
  let e = thrown(() => pw.plan(planRequest(sample(), 'magic')));
  assert.match(e, /unknown planner `magic`/);
  e = thrown(() => pw.parseTables('rows,dim,pooling_factor\n10,6,1\n', 'csv', undefined));
  assert.ok(e.includes('line 2') && e.includes('`dim` = 6'), e);
  e = thrown(() => pw.parseTables('', 'csv', undefined));
  assert.match(e, /the file is empty/);
  e = thrown(() => pw.parseTables('{not json', 'json', undefined));
  assert.match(e, /tables JSON/);
  e = thrown(() => pw.sampleTask({ devices: 4, max_dim: 48 }));
  assert.match(e, /`max_dim` = 48/);
  e = thrown(() => pw.sampleTask({ devices: 4, colour: 1 }));
  assert.ok(e.includes('sample request') && e.includes('colour'), e);
  const doc = pw.plan(planRequest(sample(), 'size')).document;
  e = thrown(() => pw.whatIf(doc, { op: 'move', table_id: 0, col_offset: 0, to_device: 9 }, undefined));
  assert.match(e, /`to_device` = 9/);
  e = thrown(() => pw.whatIf(doc, { op: 'teleport' }, undefined));
  assert.ok(e.includes('what-if edit') && e.includes('teleport'), e);
  // Tables larger than all the HBM: with HBM only, refused before any planner runs, with both totals;
  // with tiers chosen (the default), planned with tables in host memory behind HBM caches.
  const huge = Array.from({ length: 4 }, (_, i) => ({ name: `h${i}`, rows: 100_000_000, dim: 128, pooling_factor: 1 }));
  const tables = pw.parseTables(JSON.stringify(huge), 'json', undefined);
  const hugeTask = { tables, devices: { mem_cap_bytes: [4 * 2 ** 30, 4 * 2 ** 30] } };
  e = thrown(() => pw.plan({ ...planRequest(hugeTask, 'random'), tiers: 'hbm' }));
  assert.match(e, /the 4 tables need at least 190\.73 GiB \(204,800,000,000 bytes\)/);
  const tiered = pw.plan(planRequest(hugeTask, 'random')).document;
  assert.ok(tiered.report.feasible, JSON.stringify(tiered.report));
  // Each table in host memory: without a cache (`fused_uvm`) or behind an HBM cache of a share of its rows.
  const inHost = (t) => t.compute_kernel === 'fused_uvm' || (t.cache_load_factor > 0 && t.cache_load_factor <= 1);
  assert.ok(tiered.task.tables.every(inHost), JSON.stringify(tiered.task.tables));
  // Larger than host memory as well: refused under either rule.
  const giant = Array.from({ length: 8 }, (_, i) => ({ name: `g${i}`, rows: 1_000_000_000, dim: 128, pooling_factor: 1 }));
  const giantTask = { tables: pw.parseTables(JSON.stringify(giant), 'json', undefined), devices: hugeTask.devices };
  e = thrown(() => pw.plan(planRequest(giantTask, 'random')));
  assert.match(e, /the 8 tables need at least/);
});

test('groups devices into hosts and prices their network', () => {
  const presets = pw.listTopologies();
  assert.ok(presets.some((t) => t.name === 'h100-sxm' && t.devices_per_host === 8 && t.network_gbps === 48), JSON.stringify(presets));
  const topology = pw.resolveTopology({ preset: 'h100-sxm' }, 16);
  assert.equal(topology.hosts, 2);
  assert.equal(pw.resolveTopology({}, 16), null);
  assert.match(thrown(() => pw.resolveTopology({ preset: 'h100-sxm' }, 12)), /devices_per_host.*12 devices/);
  const task = { ...pw.sampleTask({ devices: 16, max_dim: 64, tables: 40, seed: 3 }), topology };
  const doc = pw.plan({ task, planner: 'size-lookup', seed: 0 }).document;
  assert.equal(doc.task.topology.devices_per_host, 8);
  assert.ok(doc.report.devices.every((d) => d.network_ms > 0));
  assert.ok(['compute', 'in-host exchange', 'network'].includes(doc.report.bottleneck_link.part));
  // The same through the request's topology; growing the plan keeps whole hosts.
  const viaRequest = pw.plan({ task: { ...task, topology: undefined }, planner: 'size-lookup', seed: 0, topology: { preset: 'h100-sxm' } }).document;
  assert.equal(viaRequest.report.cost_ms, doc.report.cost_ms);
  assert.equal(pw.whatIf(doc, { op: 'set_device_count', count: 24 }).task.topology.hosts, 3);
  assert.match(thrown(() => pw.whatIf(doc, { op: 'set_device_count', count: 20 })), /count.*8 devices per host/);
});

test('parses uploaded tables', () => {
  const tables = pw.parseTables('name,rows,dim,pooling_factor\nuser,1000,16,2\nitem,50,8,1\n', 'csv', undefined);
  assert.equal(tables[0].name, 'user');
  assert.equal(tables[1].dim, 8);
  const poolLike = pw.parseTables('table_id,row,pooling_factor\n0,10,1\n', 'CSV', 32);
  assert.equal(poolLike[0].dim, 32);
  const j = pw.parseTables('{"tables": [{"rows": 5, "dim": 4, "pooling_factor": 1}]}', 'json', undefined);
  assert.equal(j[0].name, 't0');
});

// The page downloads this module before it can plan: its gzipped size may not pass the limit stated in
// docs/WEB.md ("Size"), which says where the bytes go.
export const MAX_GZIPPED_BYTES = 1_300_000;

test('the module stays within its stated size', () => {
  const bytes = readFileSync(new URL('../pkg/planner_wasm_bg.wasm', here));
  const gzipped = gzipSync(bytes, { level: 9 }).length;
  console.log(`planner_wasm_bg.wasm: ${bytes.length} bytes, ${gzipped} gzipped (limit ${MAX_GZIPPED_BYTES})`);
  assert.ok(gzipped <= MAX_GZIPPED_BYTES, `${gzipped} bytes gzipped, over the stated ${MAX_GZIPPED_BYTES}`);
});
