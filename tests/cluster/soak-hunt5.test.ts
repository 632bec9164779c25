/** Soak: what a cluster keeps per request must stay bounded when nothing drains it (`--planner none`). */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import type { GenerateResult } from "../../src/engine/engine-types.ts";
import { MAX_WINDOW_COMPLETIONS, RequestWindow } from "../../src/cluster/request-window.ts";

test("a cluster's request window keeps a bounded number of completions when no planner tick takes them", () => {
  const w = new RequestWindow(() => 0);
  const r: GenerateResult = { text: "a", tokenIds: [1], finishReason: "length", promptTokens: 4, completionTokens: 1, cachedTokens: 0, firstTokenS: 0.01, lastTokenS: 0.01 };
  const n = 3 * MAX_WINDOW_COMPLETIONS;
  let held = 0;
  for (let i = 0; i < n; i++) {
    w.finished(r, 0, 0, 8);
    held = Math.max(held, (w as unknown as { completions: unknown[] }).completions.length);
  }
  assert.ok(held < 2 * MAX_WINDOW_COMPLETIONS, `the window held ${held} completions with no tick`);
  const snap = w.take();
  assert.equal(snap.completions.length, MAX_WINDOW_COMPLETIONS, "a late tick gets the latest completions");
  assert.equal(w.metrics.e2e.count, n, "the metrics still count every request");
  w.finished(r, 0, 0, 8);
  assert.equal(w.take().completions.length, 1, "a tick starts an empty window");
});
