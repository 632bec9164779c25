import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { createCluster } from "../../src/cluster/create-cluster.ts";
import type { Cluster, RouteDecision } from "../../src/cluster/cluster.ts";
import { startServer } from "../../src/serve/server.ts";
import type { SessionRouterOptions } from "../../planner/routers.ts";
import { greedy, model, run } from "./fixtures.ts";

const SYSTEM = "You are a helpful coding agent. You can read files and run commands in the shell. Always explain what you do. ";

/** Opens `n` agent sessions on `cl` one after another, each left waiting on a tool call. */
async function openOn(cl: Cluster, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const sessionId = `agent-${i}`;
    // Each turn ends before the next session opens: every worker is idle when it is routed.
    await run(cl, { ...greedy(model.tokenizer.encode(SYSTEM + `Task ${i}: fix the failing test in file ${i}.`, { addBos: true }), 4), sessionId });
    cl.markToolWait(sessionId, "shell");
  }
}

/** Opens `n` sessions on a fresh three-worker cluster; returns where each opened and the route log. */
async function openSessions(n: number, routerOptions?: Partial<SessionRouterOptions>): Promise<{ homes: string[]; routes: RouteDecision[] }> {
  const routes: RouteDecision[] = [];
  const cl = createCluster(createReferenceBackend(), model, {
    planner: "none", workers: 3, engine: { numBlocks: 128, kvRetention: "agent" }, onRoute: (d) => routes.push(d),
    ...(routerOptions !== undefined ? { routerOptions } : {}),
  });
  try {
    await openOn(cl, n);
    return { homes: routes.map((r) => r.route.decodeWorker), routes };
  } finally {
    await cl.stop();
  }
}

test("Cluster spreads new sessions over workers by the sessions waiting on tools there (its default sessionSpreadS, waiveOpeningPulls)", async () => {
  const { homes, routes } = await openSessions(6);
  const count = (id: string) => homes.filter((h) => h === id).length;
  for (const id of ["worker-0", "worker-1", "worker-2"]) assert.equal(count(id), 2, `two of six sessions on ${id}: ${homes}`);
  // The route log shows what the router weighed: the live sessions each worker holds.
  const last = routes.at(-1)!;
  assert.equal(last.sessionId, "agent-5");
  assert.equal(last.request.newSession, true);
  assert.deepEqual(last.candidates.map((c) => c.liveSessions).sort(), [1, 2, 2], JSON.stringify(last.candidates));
});

test("Cluster without the spread opens every session on the worker holding the shared system prompt", async () => {
  // The failure the spread fixes: all idle at each arrival, the holder wins every tie.
  const { homes } = await openSessions(4, { sessionSpreadS: 0, waiveOpeningPulls: false });
  assert.deepEqual(homes, Array(4).fill(homes[0]), `every session on one worker: ${homes}`);
});

test("startServer() hands routerOptions (--router-options) to the cluster's router", async () => {
  // Workers that served some prompt: with the spread and the waiver off, one; with the defaults, three.
  const used = async (routerOptions?: Partial<SessionRouterOptions>) => {
    const s = await startServer({
      modelPath: "stories260K", model, host: "127.0.0.1", port: 0, backend: "reference", workers: 3, planner: "none", kvBlocks: 128, kvRetention: "agent",
      ...(routerOptions !== undefined ? { routerOptions } : {}),
    });
    try {
      await openOn(s.cluster!, 6);
      return s.cluster!.workers.filter((w) => w.engine.stats().prefixQueriedTokens > 0).length;
    } finally {
      await s.shutdown();
    }
  };
  assert.equal(await used({ sessionSpreadS: 0, waiveOpeningPulls: false }), 1);
  assert.equal(await used(), 3);
});
