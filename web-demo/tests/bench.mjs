// Planning speed in the browser vs natively, and the bundle size. Run from web-demo/ after build.sh:
//   node tests/bench.mjs [count]          (default 100 tasks)
// For each planner and each of `count` NeuroShard-protocol tasks (4 devices, max dim 128, seed 0 — the
// tasks of `shardplan eval --devices 4 --max-dim 128 --seed 0`): one warm-up run, then the mean of
// enough repeated runs to last 20 ms (browsers round performance.now() to 0.1 ms). The same method runs
// in headless Chromium (in a Web Worker, as the page does), in Node, and natively
// (`cargo run --profile wasm-release -p planner-wasm --example bench_native`: the bundle's optimisation
// settings, fat LTO and one codegen unit, compiled for the host). Prints a Markdown table.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { chromium } from 'playwright-core';
import { serve } from '../serve.mjs';
import * as planner from './planner.mjs';

const count = Number(process.argv[2] ?? 100);
const demo = fileURLToPath(new URL('..', import.meta.url));
const wasmBytes = readFileSync(join(demo, 'pkg', 'planner_wasm_bg.wasm'));
const glue = readFileSync(join(demo, 'pkg', 'planner_wasm.js'));

// The measurement, as source so that the browser worker and Node run the very same function.
function measure(pw, count) {
  const out = {};
  const names = pw.listPlanners().map((p) => p.name);
  for (let index = 0; index < count; index++) {
    const task = pw.sampleTask({ devices: 4, max_dim: 128, seed: 0, index });
    for (const planner of names) {
      const times = (out[planner] ??= []);
      const request = { task, planner, seed: 0 };
      let once;
      try { once = pw.plan(request).planning_ms; } catch { continue; }
      if (once >= 50) { times.push(once); continue; }
      let repeat = 10;
      for (;;) {
        const ms = pw.plan({ ...request, repeat }).planning_ms;
        if (ms * repeat >= 20 || repeat >= 10_000) { times.push(ms); break; }
        repeat = Math.min(10_000, repeat * 10);
      }
    }
  }
  return out;
}

async function inChromium() {
  const server = await serve(0);
  const base = `http://127.0.0.1:${server.address().port}/`;
  const profile = mkdtempSync(join(tmpdir(), 'shardplan-bench-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  try {
    const page = context.pages()[0] ?? await context.newPage();
    await page.goto(`${base}index.html`);
    const version = await page.evaluate(() => navigator.userAgent);
    const result = await page.evaluate(async ({ src, count }) => {
      const code = `import init, * as pw from '${location.origin}/pkg/planner_wasm.js';
        const measure = ${src};
        self.onmessage = async ({ data }) => { await init(); self.postMessage(measure(pw, data)); };`;
      const w = new Worker(URL.createObjectURL(new Blob([code], { type: 'text/javascript' })), { type: 'module' });
      return await new Promise((resolve, reject) => {
        w.onmessage = ({ data }) => resolve(data);
        w.onerror = (e) => reject(new Error(e.message));
        w.postMessage(count);
      });
    }, { src: measure.toString(), count });
    return { result, version };
  } finally {
    await context.close();
    server.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

const p50 = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor((s.length - 1) / 2)]; };
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
const fmt = (x) => (x >= 1 ? x.toFixed(2) : x.toPrecision(3));

console.error(`bench: native (cargo run --profile wasm-release -p planner-wasm --example bench_native -- ${count}) ...`);
const native = JSON.parse(execFileSync('cargo', ['run', '--profile', 'wasm-release', '-q', '-p', 'planner-wasm', '--example', 'bench_native', '--', String(count)],
  { cwd: join(demo, '..'), encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }));
console.error('bench: Node ...');
planner.initSync(wasmBytes);
const node = measure(await import('../pkg/planner_wasm.js'), count);
console.error('bench: headless Chromium ...');
const { result: browser, version } = await inChromium();

console.log(`Planning time per task, ms (${count} NeuroShard-protocol tasks, 4 devices, max dim 128, seed 0; p50 and mean over tasks)\n`);
console.log('| planner | native p50 | Chromium p50 | Chromium / native (p50) | Node p50 | native mean | Chromium mean | Chromium / native (mean) |');
console.log('|---|---|---|---|---|---|---|---|');
for (const name of Object.keys(native)) {
  const n = native[name]; const b = browser[name]; const d = node[name];
  console.log(`| ${name} | ${fmt(p50(n))} | ${fmt(p50(b))} | ${(p50(b) / p50(n)).toFixed(2)}× | ${fmt(p50(d))} | ${fmt(mean(n))} | ${fmt(mean(b))} | ${(mean(b) / mean(n)).toFixed(2)}× |`);
}
console.log(`\nBundle: planner_wasm_bg.wasm ${wasmBytes.length} bytes raw, ${gzipSync(wasmBytes, { level: 9 }).length} gzipped; `
  + `JS glue ${glue.length} bytes raw, ${gzipSync(glue, { level: 9 }).length} gzipped.`);
console.log(`Browser: ${version}`);
