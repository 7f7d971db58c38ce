// The planner's thread: loads the wasm module once and answers requests from the page, so planning
// never blocks the page. Messages: {id, op, args} in, {id, ok: true, result} or {id, ok: false, error} out.
import init, * as pw from './pkg/planner_wasm.js';

const ready = init();

const ops = {
  async hello() {
    return { version: pw.version(), planners: pw.listPlanners(), costModels: pw.listCostModels(), topologies: pw.listTopologies() };
  },
  sample: (request) => pw.sampleTask(request),
  resolveTopology: ({ spec, devices }) => pw.resolveTopology(spec, devices),
  parseTables: ({ text, format, defaultDim }) => pw.parseTables(text, format, defaultDim ?? undefined),
  // One planner on the task, timed as the page shows it; a planner that finds no valid plan is a result,
  // not a failure. The page calls this once per planner, so it can show each result as it comes.
  planOne(request) {
    try {
      const { document, planning_ms: once } = pw.plan(request);
      return { planner: request.planner, document, ...timePlanner(request, once), error: null };
    } catch (e) {
      return { planner: request.planner, document: null, planning_ms: null, error: String(e.message ?? e) };
    }
  },
  plan: (request) => pw.plan(request),
  evaluate: ({ document, model }) => pw.evaluatePlan(document, model),
  whatIf: ({ document, edit, model }) => pw.whatIf(document, edit, model),
};

// Planning time as shown on the page. Browsers round performance.now() to ~0.1 ms and the first run of
// a planner includes compiling its code, so a planner whose first run took under 50 ms is timed again
// as the mean of enough repeated runs to last 20 ms.
function timePlanner(request, once) {
  if (once >= 50) return { planning_ms: once, runs: 1 };
  let repeat = 10;
  for (;;) {
    const { planning_ms } = pw.plan({ ...request, repeat });
    if (planning_ms * repeat >= 20 || repeat >= 10_000) return { planning_ms, runs: repeat };
    repeat = Math.min(10_000, repeat * 10);
  }
}

self.onmessage = async ({ data: { id, op, args } }) => {
  try {
    await ready;
    const fn = ops[op];
    if (!fn) throw new Error(`unknown operation ${op}`);
    self.postMessage({ id, ok: true, result: await fn(args) });
  } catch (e) {
    self.postMessage({ id, ok: false, error: String(e?.message ?? e) });
  }
};
