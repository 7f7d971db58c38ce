// The what-if page. All planning and costing happens in the planner worker (worker.js → planner-wasm);
// this module only keeps the page's state, renders it and turns user actions into worker requests.

const $ = (sel) => document.querySelector(sel);
const GIB = 2 ** 30;

// ---- the worker --------------------------------------------------------------------------------
const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
const pending = new Map();
let nextId = 0;
worker.onmessage = ({ data }) => {
  const p = pending.get(data.id);
  pending.delete(data.id);
  if (data.ok) p.resolve(data.result); else p.reject(new Error(data.error));
};
worker.onerror = (e) => {
  setStatus(`The planner could not start: ${e.message || 'see the browser console'}. Was web-demo/build.sh run?`, 'error');
  for (const p of pending.values()) p.reject(new Error('planner worker failed'));
  pending.clear();
};
function call(op, args) {
  return new Promise((resolve, reject) => {
    const id = nextId++;
    pending.set(id, { resolve, reject });
    worker.postMessage({ id, op, args });
  });
}

// ---- state -------------------------------------------------------------------------------------
const state = {
  planners: [],
  task: null,        // {tables, devices}
  tables: null,      // the loaded tables (sampled or uploaded); devices come from the Devices form
  taskLabel: '',
  results: [],       // [{planner, document, planning_ms, error}]
  chosen: null,      // planner name whose plan is shown
  pinned: false,     // whether the user picked `chosen` (kept across re-plans while it stays valid)
  doc: null,         // the plan shown (possibly edited): shardplan.plan/v1
  undo: [],          // earlier docs
  selected: null,    // "table_id:col_offset"
  busy: false,
  generation: 0,     // bumped by every re-plan; results of an older one are dropped
};

function model() {
  const hw = $('#hw').value;
  return { cost_model: $('#cost-model').value, ...(hw ? { hw } : {}), definition: $('#definition').value };
}

// ---- formatting --------------------------------------------------------------------------------
const ms = (x) => (x == null ? '—' : x.toFixed(3));
const planMs = (x) => (x == null ? '—' : x >= 100 ? x.toFixed(0) : x.toPrecision(3));
function bytes(b) {
  if (b >= GIB) return `${(b / GIB).toFixed(2)} GiB`;
  if (b >= 2 ** 20) return `${(b / 2 ** 20).toFixed(1)} MiB`;
  if (b >= 1024) return `${(b / 1024).toFixed(1)} KiB`;
  return `${b} B`;
}
const DTYPE_BYTES = { fp32: 4, fp16: 2, int8: 1 };
// Display only (the per-device totals shown come from the report): weights plus optimizer state.
function pieceBytes(t, dim) {
  const state = t.optimizer === 'rowwise_adagrad' ? t.rows * 4 : t.optimizer === 'adam' ? 2 * t.rows * dim * 4 : 0;
  return t.rows * dim * DTYPE_BYTES[t.dtype] + state;
}
const key = (p) => `${p.table_id}:${p.col_offset}`;
function pieceLabel(doc, p) {
  const t = doc.task.tables[p.table_id];
  return p.dim === t.dim ? t.name : `${t.name}[${p.col_offset}..${p.col_offset + p.dim}]`;
}
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v == null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'style') e.style.cssText = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) if (c != null) e.append(c);
  return e;
}

function setStatus(text, kind = '') {
  const s = $('#status');
  s.textContent = text;
  s.className = kind;
}
function setBusy(busy, text) {
  state.busy = busy;
  $('#sample-btn').disabled = busy;
  document.body.setAttribute('aria-busy', String(busy));
  if (text) setStatus(text, busy ? 'busy' : '');
}
function showError(sel, msg) {
  const e = $(sel);
  e.textContent = msg ?? '';
  e.hidden = !msg;
}

// ---- task input --------------------------------------------------------------------------------
// Milliseconds each planner may search (a search returns its best plan when they are spent).
function budgetFromForm() {
  const text = $('#budget').value.trim();
  const ms = Number(text);
  if (!text || !Number.isFinite(ms) || ms <= 0) throw new Error(`Time per planner must be a positive number of milliseconds (got ${text || 'nothing'}).`);
  return ms;
}

function devicesFromForm() {
  const count = Number($('#devices').value);
  const mem = Math.round(Number($('#mem').value) * GIB);
  if (!Number.isInteger(count) || count < 1 || count > 64) throw new Error(`Devices must be a whole number in 1..64 (got ${$('#devices').value}).`);
  if (!(mem >= 1)) throw new Error(`Memory per device must be a positive number of GiB (got ${$('#mem').value}).`);
  return { count, mem };
}

// The Hosts form: one host (null), or a preset with its devices per host, resolved by the planner.
async function topologyFromForm(count) {
  const preset = $('#topology').value;
  $('#per-host').disabled = !preset;
  if (!preset) return null;
  const perHost = Number($('#per-host').value);
  return call('resolveTopology', { spec: { preset, devices_per_host: perHost }, devices: count });
}

async function sampleAndPlan() {
  showError('#upload-error', null);
  try {
    const { count, mem } = devicesFromForm();
    const tablesText = $('#n-tables').value.trim();
    const request = {
      devices: count,
      mem_cap_bytes: mem,
      max_dim: Number($('#max-dim').value),
      seed: Number($('#seed').value || 0),
    };
    if (tablesText) request.tables = Number(tablesText);
    setBusy(true, 'Sampling a task…');
    const task = await call('sample', request);
    const how = tablesText ? `${tablesText} pool tables` : 'NeuroShard protocol';
    await setTables(task.tables, `sampled (${how}, seed ${request.seed})`);
  } catch (e) {
    setBusy(false);
    setStatus(`Could not sample a task: ${e.message}`, 'error');
  }
}

async function uploadTables(file) {
  showError('#upload-error', null);
  if (!file) return;
  const ext = file.name.toLowerCase().split('.').pop();
  if (ext !== 'csv' && ext !== 'json') {
    showError('#upload-error', `Could not read ${file.name}: upload a .csv or .json tables file.`);
    return;
  }
  try {
    const text = await file.text();
    const dimText = $('#csv-dim').value.trim();
    setBusy(true, `Reading ${file.name}…`);
    const tables = await call('parseTables', { text, format: ext, defaultDim: dimText ? Number(dimText) : null });
    await setTables(tables, `uploaded from ${file.name}`);
  } catch (e) {
    setBusy(false, 'Ready.');
    showError('#upload-error', `Could not read ${file.name}: ${e.message}`);
  }
}

// The loaded tables on the devices of the Devices form. A change of devices or memory re-plans the same
// tables; sampling or uploading replaces the tables and keeps the devices.
async function setTables(tables, label) {
  state.tables = tables;
  state.taskLabel = label;
  state.pinned = false;
  await applyDevices();
}

async function applyDevices() {
  if (!state.tables) return;
  let count; let mem; let topology;
  try {
    ({ count, mem } = devicesFromForm());
    topology = await topologyFromForm(count);
  } catch (e) {
    setStatus(`Devices: ${e.message}`, 'error');
    return;
  }
  const task = { tables: state.tables, devices: { mem_cap_bytes: Array(count).fill(mem) }, ...(topology ? { topology } : {}) };
  state.task = task;
  const total = task.tables.reduce((s, t) => s + pieceBytes(t, t.dim), 0);
  const hosts = topology ? ` in ${topology.hosts} hosts of ${topology.devices_per_host} (${topology.preset})` : '';
  $('#task-summary').textContent =
    `${task.tables.length} tables (${bytes(total)} of weights and optimizer state) on ${count} devices of ${bytes(mem)}${hosts} — ${state.taskLabel}.`;
  await runPlanners();
}

// ---- planners ----------------------------------------------------------------------------------
async function runPlanners() {
  if (!state.task) return;
  // The plan on screen belongs to the previous task or model: clear it before planning.
  state.results = [];
  state.doc = null;
  state.undo = [];
  renderPlanners();
  renderPlan('Planning…');
  const names = state.planners.map((p) => p.name);
  setBusy(true, `Planning: 0 of ${names.length} planners done…`);
  const generation = ++state.generation;
  try {
    const seed = Number($('#seed').value || 0);
    const budget = budgetFromForm();
    // One planner at a time, each shown as it finishes (a large task takes seconds per planner).
    const results = [];
    for (const [i, planner] of names.entries()) {
      setBusy(true, `Planning: ${i} of ${names.length} planners done; now ${planner}…`);
      const r = await call('planOne', { task: state.task, planner, seed, model: model(), budget_ms: budget });
      if (generation !== state.generation) return; // a newer task or model is being planned
      results.push(r);
      state.results = results.slice();
      renderPlanners();
    }
    state.results = results;
    const valid = state.results.filter((r) => r.document?.report.feasible);
    const cheapest = (rs) => rs.reduce((b, r) => (!b || r.document.report.cost_ms < b.document.report.cost_ms ? r : b), null);
    // The user's own pick stays while it is still a valid plan; otherwise the best valid plan, and only
    // when there is none, the cheapest plan that does not fit (its reasons shown).
    const kept = state.pinned ? valid.find((r) => r.planner === state.chosen) : null;
    const shown = kept ?? cheapest(valid) ?? cheapest(state.results.filter((r) => r.document));
    state.pinned = Boolean(kept);
    choose(shown?.planner ?? null);
    const errors = new Set(state.results.map((r) => r.error));
    if (!shown && errors.size === 1 && state.results.length) {
      // Every planner refused the task for the same reason (a task larger than all the memory): say it once.
      setBusy(false);
      setStatus(`No plan can fit: ${state.results[0].error}`, 'error');
      renderPlan(`No plan can fit this task: ${state.results[0].error}`);
    } else {
      setBusy(false, `Planned ${state.task.tables.length} tables with ${state.results.length} planners; ${valid.length} valid plans.`);
    }
  } catch (e) {
    if (generation !== state.generation) return;
    setBusy(false);
    setStatus(`Planning failed: ${e.message}`, 'error');
  }
  renderPlanners();
}

function renderPlanners() {
  const body = $('#planners tbody');
  body.replaceChildren();
  const valid = state.results.filter((r) => r.document?.report.feasible);
  const bestCost = Math.min(...valid.map((r) => r.document.report.cost_ms));
  const common = state.results.length > 1 && new Set(state.results.map((r) => r.error)).size === 1 ? state.results[0].error : null;
  for (const r of state.results) {
    const rep = r.document?.report;
    const id = `show-${r.planner}`;
    const radio = el('input', {
      type: 'radio', name: 'show', id, value: r.planner, checked: r.planner === state.chosen, disabled: !r.document,
      onchange: () => { state.pinned = true; choose(r.planner); renderPlanners(); },
    });
    const reason = rep ? rep.violations.join('; ') : r.error;
    const whyId = `why-${r.planner}`;
    body.append(el('tr', { class: r.planner === state.chosen ? 'chosen' : null, 'data-planner': r.planner },
      el('td', {}, radio),
      el('td', {}, el('label', { for: id }, ...r.planner.split(/(?<=\+)/).flatMap((part, i) => (i ? [el('wbr'), part] : [part])))),
      el('td', { class: 'num' }, rep ? ms(rep.cost_ms) : '—',
        rep?.feasible && rep.cost_ms === bestCost ? el('span', { class: 'badge' }, 'best') : null),
      el('td', {}, rep?.feasible ? 'yes' : el('span', { class: 'no', 'aria-describedby': reason && !common ? whyId : null }, 'no')),
      el('td', { class: 'num', title: r.runs > 1 ? `mean of ${r.runs} runs` : 'one run' }, planMs(r.planning_ms))));
    // Why a plan is not valid, on a row of its own under the planner, across the whole table (the
    // same refusal from every planner is said once, in the status and the plan area).
    if (!rep?.feasible && reason && !common) {
      body.append(el('tr', { class: 'why-row', 'data-why': r.planner },
        el('td', { colspan: 5, id: whyId, class: 'why' }, reason)));
    }
  }
}

function choose(planner) {
  state.chosen = planner;
  const r = state.results.find((x) => x.planner === planner);
  state.doc = r?.document ?? null;
  state.undo = [];
  state.selected = null;
  showError('#edit-error', null);
  renderPlan();
}

// ---- what-if edits -----------------------------------------------------------------------------
async function edit(e) {
  if (!state.doc || state.busy) return;
  showError('#edit-error', null);
  setBusy(true, `Applying ${e.op}…`);
  try {
    const doc = await call('whatIf', { document: state.doc, edit: e, model: model() });
    state.undo.push(state.doc);
    state.doc = doc;
    if (e.op === 'split') state.selected = `${e.table_id}:${e.col_offset}`;
    if (e.op === 'merge') {
      const p = doc.pieces.find((q) => q.table_id === e.table_id && q.col_offset <= e.col_offset && e.col_offset < q.col_offset + q.dim);
      state.selected = p ? key(p) : null;
    }
    const before = state.undo.at(-1).report.cost_ms;
    setBusy(false, `${describe(e)}: predicted cost ${ms(before)} → ${ms(doc.report.cost_ms)} ms.`);
  } catch (err) {
    setBusy(false, 'Edit refused.');
    showError('#edit-error', err.message);
  }
  renderPlan();
}

function describe(e) {
  const t = state.doc?.task.tables[e.table_id]?.name ?? `table ${e.table_id}`;
  if (e.op === 'move') return `Moved ${t} (from column ${e.col_offset}) to GPU ${e.to_device}`;
  if (e.op === 'split') return `Split ${t} at column ${e.col_offset}`;
  if (e.op === 'merge') return `Merged the halves of ${t}`;
  return e.op;
}

function undo() {
  if (!state.undo.length) return;
  state.doc = state.undo.pop();
  showError('#edit-error', null);
  setStatus(`Undone: predicted cost ${ms(state.doc.report.cost_ms)} ms.`);
  renderPlan();
}

function resetPlan() {
  const r = state.results.find((x) => x.planner === state.chosen);
  if (!r?.document) return;
  state.undo.push(state.doc);
  state.doc = r.document;
  renderPlan();
}

function download() {
  if (!state.doc) return;
  const blob = new Blob([`${JSON.stringify(state.doc, null, 2)}\n`], { type: 'application/json' });
  const a = el('a', { href: URL.createObjectURL(blob), download: `plan-${state.doc.planner}.json` });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
}

// ---- plan rendering ----------------------------------------------------------------------------
const SEGMENTS = [
  ['fwd-compute', 'forward compute'], ['fwd-comm', 'forward all-to-all'],
  ['bwd-comm', 'backward all-to-all'], ['bwd-compute', 'backward compute'],
];

function renderPlan(message) {
  const doc = state.doc;
  $('#undo').disabled = !state.undo.length;
  $('#reset').disabled = !doc || doc === state.results.find((x) => x.planner === state.chosen)?.document;
  $('#download').disabled = !doc;
  for (const id of ['#plan-summary', '#timeline', '#board', '#pieces tbody', '#legend']) $(id).replaceChildren();
  $('#selection').hidden = true;
  $('#split-note').hidden = true;
  if (!doc) {
    const fallback = state.results.length ? 'No planner produced a plan for this task.' : 'No plan yet.';
    $('#plan-summary').append(el('p', { class: message?.startsWith('No plan can') ? 'error' : 'hint' }, message ?? fallback));
    return;
  }
  const rep = doc.report;
  const original = state.results.find((x) => x.planner === state.chosen)?.document?.report.cost_ms;
  const delta = original != null ? rep.cost_ms - original : 0;
  $('#plan-summary').append(
    kpi('Predicted cost', `${ms(rep.cost_ms)} ms`, rep.expected_cost_ms == null ? 'per iteration, embedding part'
      : `per iteration, embedding part; expected as measured ${ms(rep.expected_cost_ms)} ms`, 'cost'),
    kpi('Versus planner', delta === 0 ? '±0' : `${delta > 0 ? '+' : ''}${ms(delta)} ms`,
      original ? `${(100 * delta / original).toFixed(1)}% vs ${doc.planner.replace(/\+what-if$/, '')}` : '', 'delta',
      delta > 1e-9 ? 'up' : delta < -1e-9 ? 'down' : ''),
    kpi('Bottleneck', `GPU ${rep.bottleneck_device}`, rep.bottleneck_link
      ? `of ${rep.devices.length}; held up by ${rep.bottleneck_link.part} (network ${ms(rep.bottleneck_link.network_ms)} ms)`
      : `of ${rep.devices.length}`, 'bottleneck'),
    kpi('Fits memory', rep.feasible ? 'yes' : 'no', rep.feasible ? '' : rep.violations.join('; '), 'feasible'),
    kpi('Plan', doc.planner, `${doc.pieces.length} pieces · ${rep.cost_model} · ${rep.definition}${cachedNote(doc)}`, 'planner'),
  );
  renderTimeline(doc);
  renderBoard(doc);
  renderPieces(doc);
  renderSelection(doc);
}

// Tables the plan keeps in host memory, behind HBM caches or not (chosen when the tables overflow HBM).
function cachedNote(doc) {
  const n = doc.task.tables.filter((t) => t.cache_load_factor != null || t.compute_kernel === 'fused_uvm').length;
  return n ? ` · ${n} of ${doc.task.tables.length} tables in host memory` : '';
}

function kpi(label, value, note, id, cls = '') {
  return el('div', { class: 'kpi', 'data-kpi': id },
    el('div', { class: 'l' }, label), el('div', { class: `v ${id === 'delta' ? `delta ${cls}` : ''}` }, value),
    note ? el('div', { class: 'l' }, note) : null);
}

function renderTimeline(doc) {
  const rep = doc.report;
  const split = rep.devices.every((d) => d.compute_split);
  const segs = split ? SEGMENTS : [['compute', 'compute (forward + backward)'], ['fwd-comm', 'forward all-to-all'], ['bwd-comm', 'backward all-to-all']];
  $('#legend').append(...segs.map(([c, l]) => el('span', { style: `--c: var(--${c})` }, l)));
  $('#split-note').hidden = split;
  $('#split-note').textContent = split ? '' : `The cost model ${rep.cost_model} does not separate forward and backward compute; compute is shown as one segment.`;
  const max = Math.max(...rep.devices.map((d) => d.total_ms), 1e-12);
  for (const d of rep.devices) {
    const parts = split
      ? [d.compute_split.fwd_ms, d.fw_comm_ms, d.bw_comm_ms, d.compute_split.bwd_ms]
      : [d.compute_ms, d.fw_comm_ms, d.bw_comm_ms];
    const net = d.network_ms ? ` (of which network ${ms(d.network_ms)} ms)` : '';
    const text = segs.map(([, l], i) => `${l} ${ms(parts[i])} ms`).join(', ') + net;
    const isB = d.device === rep.bottleneck_device;
    $('#timeline').append(el('div', {
      class: `lane${isB ? ' bottleneck' : ''}`, role: 'listitem', 'data-device': d.device,
      'aria-label': `GPU ${d.device}${isB ? ' (bottleneck)' : ''}: total ${ms(d.total_ms)} ms; ${text}`,
    },
    el('span', { class: 'name' }, `GPU ${d.device}`, isB ? el('span', { class: 'flag' }, 'bottleneck') : null),
    el('div', { class: 'bar', 'aria-hidden': 'true' }, ...segs.map(([c, l], i) => el('div', {
      class: 'seg', style: `--c: var(--${c}); width: ${(100 * parts[i] / max).toFixed(3)}%`, title: `${l}: ${ms(parts[i])} ms`,
    }))),
    el('span', { class: 'total' }, `${ms(d.total_ms)} ms`)));
  }
}

function renderBoard(doc) {
  const rep = doc.report;
  const byDevice = rep.devices.map(() => []);
  for (const p of doc.pieces) byDevice[p.device].push(p);
  for (const d of rep.devices) {
    // Bytes count by the plan's memory rule; what may be used is the cap less the rule's reservation
    // (reports written before memory rules carry no breakdown: the whole cap).
    const m = d.memory;
    const usable = m && (m.usable_bytes > 0 || m.reserved_bytes > 0) ? m.usable_bytes : d.mem_cap_bytes;
    const over = d.bytes > usable;
    const pct = (100 * d.bytes) / d.mem_cap_bytes;
    const usableNote = usable < d.mem_cap_bytes ? `, ${bytes(usable)} usable` : '';
    const box = el('section', {
      class: `device${d.device === rep.bottleneck_device ? ' bottleneck' : ''}`, 'data-device': d.device,
      'aria-label': `GPU ${d.device}: ${bytes(d.bytes)} of ${bytes(d.mem_cap_bytes)}, ${byDevice[d.device].length} pieces`,
      ondragover: (e) => { e.preventDefault(); box.classList.add('drop'); },
      ondragleave: () => box.classList.remove('drop'),
      ondrop: (e) => {
        e.preventDefault();
        box.classList.remove('drop');
        const [t, c] = (e.dataTransfer.getData('text/plain') || '').split(':').map(Number);
        const p = doc.pieces.find((q) => q.table_id === t && q.col_offset === c);
        if (p && p.device !== d.device) edit({ op: 'move', table_id: t, col_offset: c, to_device: d.device });
      },
    },
    el('h4', {}, el('span', {}, `GPU ${d.device}`), el('span', { class: 'hint' }, `${ms(d.total_ms)} ms`)),
    el('div', { class: `mem${over ? ' over' : ''}`, role: 'meter', 'aria-label': `GPU ${d.device} memory`,
      'aria-valuemin': 0, 'aria-valuemax': d.mem_cap_bytes, 'aria-valuenow': d.bytes,
      'aria-valuetext': `${bytes(d.bytes)} of ${bytes(d.mem_cap_bytes)} (${pct.toFixed(1)}%)` },
    el('div', { style: `width: ${Math.min(100, pct).toFixed(2)}%` })),
    el('div', { class: `memtext${over ? ' over' : ''}` }, `${bytes(d.bytes)} / ${bytes(d.mem_cap_bytes)} (${pct.toFixed(1)}%${usableNote})${over ? ' — over the usable memory' : ''}${m?.host_bytes ? ` · host DRAM ${bytes(m.host_bytes)} (cached tables)` : ''}`),
    el('div', { class: 'chips' }, ...byDevice[d.device].map((p) => el('button', {
      type: 'button', class: `chip${state.selected === key(p) ? ' selected' : ''}`, draggable: 'true', 'data-piece': key(p),
      'aria-pressed': state.selected === key(p) ? 'true' : 'false',
      title: `${pieceLabel(doc, p)}: dim ${p.dim}, ${bytes(pieceBytes(doc.task.tables[p.table_id], p.dim))}`,
      ondragstart: (e) => { e.dataTransfer.setData('text/plain', key(p)); e.dataTransfer.effectAllowed = 'move'; },
      onclick: () => { state.selected = state.selected === key(p) ? null : key(p); renderPlan(); },
    }, pieceLabel(doc, p)))));
    $('#board').append(box);
  }
}

function deviceSelect(doc, p, attrs) {
  return el('select', attrs, ...doc.report.devices.map((d) => el('option', { value: d.device, selected: d.device === p.device }, `GPU ${d.device}`)));
}

function canSplit(p) { return p.dim % 8 === 0; }
function canMerge(doc, p) {
  const t = doc.task.tables[p.table_id];
  if (p.dim === t.dim) return false;
  const other = (p.col_offset / p.dim) % 2 === 0 ? p.col_offset + p.dim : p.col_offset - p.dim;
  return doc.pieces.some((q) => q.table_id === p.table_id && q.col_offset === other && q.dim === p.dim);
}

function renderPieces(doc) {
  const body = $('#pieces tbody');
  for (const p of doc.pieces) {
    const t = doc.task.tables[p.table_id];
    const name = pieceLabel(doc, p);
    body.append(el('tr', { class: state.selected === key(p) ? 'selected' : null, 'data-piece': key(p) },
      el('th', { scope: 'row' }, t.name),
      el('td', { class: 'num' }, `${p.col_offset}..${p.col_offset + p.dim}`),
      el('td', { class: 'num' }, String(p.dim)),
      el('td', { class: 'num' }, bytes(pieceBytes(t, p.dim))),
      el('td', { class: 'num' }, t.pooling_factor.toFixed(2)),
      el('td', {}, deviceSelect(doc, p, {
        'aria-label': `Device of ${name}`,
        onchange: (e) => edit({ op: 'move', table_id: p.table_id, col_offset: p.col_offset, to_device: Number(e.target.value) }),
      })),
      el('td', {},
        el('button', { type: 'button', disabled: !canSplit(p), 'aria-label': `Split ${name} in half`,
          onclick: () => edit({ op: 'split', table_id: p.table_id, col_offset: p.col_offset }) }, 'Split'), ' ',
        el('button', { type: 'button', disabled: !canMerge(doc, p), 'aria-label': `Merge ${name} with its other half`,
          onclick: () => edit({ op: 'merge', table_id: p.table_id, col_offset: p.col_offset }) }, 'Merge'))));
  }
}

function renderSelection(doc) {
  const p = doc.pieces.find((q) => key(q) === state.selected);
  if (!p) return;
  $('#selection').hidden = false;
  $('#selection-label').textContent = `Selected: ${pieceLabel(doc, p)} (dim ${p.dim}) on GPU ${p.device}.`;
  const sel = $('#sel-move');
  sel.replaceChildren(...doc.report.devices.map((d) => el('option', { value: d.device, selected: d.device === p.device }, `GPU ${d.device}`)));
  $('#sel-split').disabled = !canSplit(p);
  $('#sel-merge').disabled = !canMerge(doc, p);
}

function selectedPiece() {
  return state.doc?.pieces.find((q) => key(q) === state.selected);
}

// ---- wiring ------------------------------------------------------------------------------------
$('#sample-form').addEventListener('submit', (e) => { e.preventDefault(); sampleAndPlan(); });
$('#devices-form').addEventListener('submit', (e) => { e.preventDefault(); applyDevices(); });
for (const id of ['#devices', '#mem', '#topology', '#per-host']) $(id).addEventListener('change', applyDevices);
$('#upload').addEventListener('change', (e) => uploadTables(e.target.files[0]));
$('#hw').addEventListener('change', runPlanners);
$('#cost-model').addEventListener('change', runPlanners);
$('#definition').addEventListener('change', runPlanners);
$('#budget').addEventListener('change', runPlanners);
$('#budget-form').addEventListener('submit', (e) => { e.preventDefault(); runPlanners(); });
$('#undo').addEventListener('click', undo);
$('#reset').addEventListener('click', resetPlan);
$('#download').addEventListener('click', download);
$('#sel-move').addEventListener('change', (e) => {
  const p = selectedPiece();
  if (p) edit({ op: 'move', table_id: p.table_id, col_offset: p.col_offset, to_device: Number(e.target.value) });
});
$('#sel-split').addEventListener('click', () => { const p = selectedPiece(); if (p) edit({ op: 'split', table_id: p.table_id, col_offset: p.col_offset }); });
$('#sel-merge').addEventListener('click', () => { const p = selectedPiece(); if (p) edit({ op: 'merge', table_id: p.table_id, col_offset: p.col_offset }); });
document.addEventListener('keydown', (e) => {
  const typing = e.target.closest?.('input, select, textarea');
  if ((e.ctrlKey || e.metaKey) && e.key === 'z' && !typing) { e.preventDefault(); undo(); }
});

(async () => {
  try {
    const hello = await call('hello');
    state.planners = hello.planners;
    $('#topology').append(...hello.topologies.map((t) => el('option', { value: t.name, title: t.description }, `${t.name}: ${t.description}`)));
    const analytical = hello.costModels.find((m) => m.name === 'analytical');
    // The model's own preset by default (torchrec for the analytical model, the profile's hardware for
    // a trained profile's comm); a choice here overrides it.
    $('#hw').replaceChildren(el('option', { value: '' }, 'the model\'s own'), ...analytical.hardware.map((h) => el('option', { value: h }, h)));
    $('#cost-model').replaceChildren(...hello.costModels.map((m) => el('option', { value: m.name, selected: m.is_default, title: m.summary }, m.is_default ? `${m.name} (default)` : m.name)));
    setStatus(`Planner ${hello.version} loaded (${hello.planners.length} planners).`);
    await sampleAndPlan();
  } catch (e) {
    setStatus(`The planner could not start: ${e.message}`, 'error');
  }
})();
