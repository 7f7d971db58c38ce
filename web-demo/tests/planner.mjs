// The planner's wasm module (web-demo/pkg, built for the web) loaded in Node, for computing what the
// page should show. Call initSync(bytesOfTheWasmFile) once first.
import * as pw from '../pkg/planner_wasm.js';

export function initSync(bytes) {
  pw.initSync({ module: bytes });
}

export const sampleTask = (request) => pw.sampleTask(request);
export const listPlanners = () => pw.listPlanners();

// Every planner on `task`, as the page's worker does (errors kept as results).
export function planAll(task, seed, model) {
  return pw.listPlanners().map(({ name: planner }) => {
    try {
      const { document } = pw.plan({ task, planner, seed, model });
      return { planner, document, error: null };
    } catch (e) {
      return { planner, document: null, error: String(e.message ?? e) };
    }
  });
}

export const whatIf = (document, edit, model) => pw.whatIf(document, edit, model);
export const plan = (request) => pw.plan(request);
