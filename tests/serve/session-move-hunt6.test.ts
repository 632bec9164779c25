/**
 * A session whose next turn a cluster runs on another worker (its holder flipped to prefill) is no
 * longer "waiting-tool" on the worker it left: that worker hears of the move (Engine.sessionMovedAway,
 * the "moved" op for thread and process workers), so /metrics counts no phantom wait and the stale
 * copy of its KV ranks as an idle session's rather than a tool wait's until its time-to-live.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import type { PlannerAction } from "../../planner/types.ts";
import { startServer } from "../../src/serve/server.ts";
import { eventually } from "../eventually.ts";
import { test } from "../harness.ts";
import { model, modelPath, TOOLS } from "./scripted-server.ts";

const filler = (tag: string, n: number) => `${tag} ${"qv".repeat(Math.ceil(n / 2))}`.slice(0, n);

for (const transport of ["in-process", "threads"] as const) {
  test(`Cluster.submit() tells the worker a session left that its tool wait is over (${transport})`, async () => {
    const queue: PlannerAction[][] = [];
    const planner = { name: "scripted", intervalS: 1, tick: () => queue.shift() ?? [] };
    const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, workers: 2, planner, transport });
    try {
      const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "none", maxRetries: 0 });
      const ask = (messages: OpenAI.ChatCompletionMessageParam[]) =>
        client.chat.completions.create({ model: "scripted", messages, tools: TOOLS, temperature: 0, max_tokens: 8, prompt_cache_key: "A" });
      const first: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: `${filler("alpha", 120)} weather in Paris!` }];
      const a1 = await ask(first);
      assert.equal(a1.choices[0].finish_reason, "tool_calls");
      const cluster = s.cluster!;
      // (A thread worker's counts reach the front with its next report: poll, with a deadline of 60 s
      // only against a hang; a loaded CI machine can take seconds.)
      const until = <T>(get: () => T | Promise<T>, ok: (v: T) => boolean): Promise<T> => eventually(get, ok, 60_000, 50);
      const holder = (await until(() => cluster.workers.find((w) => (w.engine.metrics.finished.get("stop") ?? 0) > 0), (w) => w !== undefined))!;
      const waiting = async () => {
        const m = await (await fetch(`${s.url}/metrics`)).text();
        return Number(/evolving:kv_sessions\{[^}]*status="waiting-tool"[^}]*\} (\d+)/.exec(m)?.[1] ?? "NaN");
      };
      assert.equal(await until(waiting, (n) => n === 1), 1, "the session waits on its tool on its worker");
      queue.push([{ kind: "flip", workerId: holder.engine.id, to: "prefill" }]);
      cluster.tick();
      const call = a1.choices[0].message.tool_calls![0];
      const a2 = await ask([...first, a1.choices[0].message as OpenAI.ChatCompletionMessageParam, { role: "tool", tool_call_id: call.id, content: "18 degrees." }]);
      assert.ok(a2.choices[0].finish_reason === "stop" || a2.choices[0].finish_reason === "length");
      assert.equal(await until(() => holder.engine.sessionStatusCounts()?.["waiting-tool"], (n) => n === 0), 0, "the worker it left holds no wait for it");
      assert.equal(await waiting(), 0, "no phantom wait in /metrics");
    } finally {
      await s.shutdown();
    }
  });
}
