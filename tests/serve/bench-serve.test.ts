import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "../harness.ts";
import { parseBenchArgs } from "../../scripts/bench-serve/args.ts";
import { runSessions } from "../../scripts/bench-serve/driver.ts";
import { distribution, percentile, summarize } from "../../scripts/bench-serve/report.ts";
import { azureSessions, mooncakeSessions, syntheticSessions } from "../../scripts/bench-serve/workload.ts";

test("mooncakeSessions() turns shared hash ids into shared word prefixes", () => {
  const o = parseBenchArgs(["--length-scale", "0.01"]);
  const trace = [
    { timestamp: 10, input_length: 1500, output_length: 7, hash_ids: [1, 2, 3] },
    { timestamp: 30, input_length: 1200, output_length: 3, hash_ids: [1, 2, 9] },
  ].map((r) => JSON.stringify(r)).join("\n");
  const [a, b] = mooncakeSessions(trace, o);
  assert.equal(a.startMs, 0);
  assert.equal(b.startMs, 20);
  const wa = a.turns[0].text.split(" ");
  const wb = b.turns[0].text.split(" ");
  assert.equal(wa.length, 15);
  assert.equal(wb.length, 12);
  // Blocks 1 and 2 (5 words each at this scale) are shared; block 3 vs 9 differ.
  assert.deepEqual(wa.slice(0, 10), wb.slice(0, 10));
  assert.notDeepEqual(wa.slice(10, 12), wb.slice(10, 12));
  assert.equal(a.turns[0].maxTokens, 7);
});

test("azureSessions() parses timestamps and scales lengths", () => {
  const o = parseBenchArgs(["--length-scale", "0.1", "--time-scale", "0.5"]);
  const csv = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,100,10\n2023-11-16 18:17:05.9799600,50,4\n";
  const s = azureSessions(csv, o);
  assert.equal(s.length, 2);
  assert.equal(s[1].startMs, 1000);
  assert.equal(s[0].turns[0].text.split(" ").length, 10);
  assert.throws(() => azureSessions("h\nnot,a,row\n", o), /Azure trace line 2/);
});

test("syntheticSessions() is deterministic for a seed and respects --max-requests", () => {
  const o = parseBenchArgs(["--sessions", "5", "--turns", "3", "--max-requests", "10", "--length-scale", "0.02"]);
  const a = syntheticSessions(o);
  assert.deepEqual(a, syntheticSessions(o));
  assert.equal(a.reduce((n, s) => n + s.turns.length, 0), 10);
  assert.ok(a.every((s) => s.system === a[0].system));
});

test("parseBenchArgs() rejects bad flags with the value quoted", () => {
  assert.throws(() => parseBenchArgs(["--time-scale", "fast"]), /"fast"/);
  assert.throws(() => parseBenchArgs(["--trace", "mooncake"]), /needs a file path/);
  assert.throws(() => parseBenchArgs(["--frobnicate"]), /"--frobnicate"/);
});

test("percentile() and distribution() match hand-computed values", () => {
  assert.equal(percentile([1, 2, 3, 4], 0.5), 2.5);
  const d = distribution([5, 1, 3, NaN]);
  assert.deepEqual([d.count, d.mean, d.p50], [3, 3, 3]);
});

/** A fake OpenAI streaming server: emits `n` one-word chunks 5 ms apart, then usage and [DONE]. */
function fakeServer(): Promise<{ url: string; close: () => void; bodies: unknown[] }> {
  const bodies: unknown[] = [];
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    let raw = "";
    for await (const c of req) raw += c;
    const body = JSON.parse(raw) as { max_tokens: number };
    bodies.push(body);
    res.writeHead(200, { "content-type": "text/event-stream" });
    for (let i = 0; i < body.max_tokens; i++) {
      res.write(`data: ${JSON.stringify({ choices: [{ delta: { content: ` w${i}` } }] })}\n\n`);
      await new Promise((r) => setTimeout(r, 5));
    }
    res.write(`data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 10, completion_tokens: body.max_tokens, prompt_tokens_details: { cached_tokens: 4 } } })}\n\n`);
    res.end("data: [DONE]\n\n");
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as AddressInfo).port;
      resolve({ url: `http://127.0.0.1:${port}`, close: () => server.close(), bodies });
    })
  );
}

test("runSessions() carries multi-turn context and measures TTFT/ITL against a local server", async () => {
  const srv = await fakeServer();
  try {
    const o = parseBenchArgs(["--url", srv.url, "--sessions", "2", "--turns", "2", "--length-scale", "0.01", "--max-output-tokens", "4", "--tool-gap-ms", "1", "--quiet"]);
    const { results, durationMs } = await runSessions(syntheticSessions(o), o, "m");
    assert.equal(results.length, 4);
    assert.ok(results.every((r) => r.ok && r.completionTokens === 4 && r.itlMs.length === 3));
    const second = srv.bodies.find((b) => (b as { messages: unknown[] }).messages.length === 4) as { messages: { role: string; content: string }[] };
    assert.ok(second, "a second turn carries system, user, assistant, user");
    assert.equal(second.messages[2].role, "assistant");
    assert.equal(second.messages[2].content, " w0 w1 w2 w3");
    const rep = summarize(results, durationMs, { ttftMs: 1e6, itlMs: 1e6, e2eMs: 1e6 });
    assert.equal(rep.goodRequests, 4);
    assert.ok(rep.itlMs.p50 >= 3, `ITL ${rep.itlMs.p50} reflects the 5 ms gaps`);
    assert.equal(rep.prefixHitRate, 0.4);
  } finally {
    srv.close();
  }
});
