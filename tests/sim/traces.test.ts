import assert from "node:assert/strict";
import { test, sharedRoot } from "../harness.ts";
import { readTextFile } from "../../src/runtime/fs.ts";
import { parseAzure, parseMooncake, TraceFormatError } from "../../src/sim/traces.ts";

test("parseMooncake() maps shared hash_ids to shared prefixes and times to seconds", async () => {
  const text = await readTextFile(`${sharedRoot}/traces/mooncake_synthetic_trace.jsonl`);
  const w = parseMooncake(text, 1, 200);
  assert.equal(w.sessions.length, 200);
  assert.equal(w.blockTokens, 512);
  const t = w.sessions[2].turns[0];
  assert.equal(w.sessions[2].start, 0.04);
  assert.equal(t.fixedPromptTokens, 23769);
  assert.equal(t.fixedChunks!.length, Math.floor(23769 / 512));
  const firsts = new Map<number, number>();
  for (const s of w.sessions) { const c = s.turns[0].fixedChunks![0]; if (c !== undefined) firsts.set(c, (firsts.get(c) ?? 0) + 1); }
  assert.ok([...firsts.values()].some((n) => n > 1), "some requests share a first block");
  assert.throws(() => parseMooncake('{"timestamp": 1}'), TraceFormatError);
});

test("parseAzure() reads the code trace with unique blocks per request", async () => {
  const text = await readTextFile(`${sharedRoot}/traces/azure2023_code.csv`);
  const w = parseAzure(text, 1, 100);
  assert.equal(w.sessions.length, 100);
  assert.equal(w.sessions[0].turns[0].fixedPromptTokens, 4808);
  assert.equal(w.sessions[0].turns[0].outputTokens, 10);
  assert.ok(Math.abs(w.sessions[1].start - 0.052) < 1e-6);
  const a = new Set(w.sessions[0].turns[0].fixedChunks);
  assert.ok(w.sessions[1].turns[0].fixedChunks!.every((c) => !a.has(c)));
  assert.throws(() => parseAzure("time,x\n1,2"), /TIMESTAMP/);
});

const mc = (ts: number, input = 1024, output = 8, ids: unknown[] = [0, 1]) =>
  JSON.stringify({ timestamp: ts, input_length: input, output_length: output, hash_ids: ids });

test("parseMooncake() replays rows in arrival order, timed from the earliest", () => {
  // Out of order and starting at 600 s: arrivals at 0, 1 and 2 s, the workload lasting 3 s.
  const w = parseMooncake([mc(602_000, 1024, 8, [7]), mc(600_000, 2048, 8, [5]), mc(601_000, 512, 8, [6])].join("\n"));
  assert.deepEqual(w.sessions.map((s) => s.start), [0, 1, 2]);
  assert.deepEqual(w.sessions.map((s) => s.turns[0].fixedPromptTokens), [2048, 512, 1024]);
  assert.deepEqual(w.sessions.map((s) => s.idx), [0, 1, 2]);
  assert.equal(w.durationS, 3);
  // --max-requests takes the earliest, not the first lines.
  assert.deepEqual(parseMooncake([mc(5000), mc(1000), mc(3000)].join("\n"), 1, 2).sessions.map((s) => s.start), [0, 2]);
});

test("parseMooncake() rejects rows with impossible values, naming the line and value", () => {
  assert.throws(() => parseMooncake(mc(0) + "\nnull"), /Mooncake line 2 lacks timestamp/);
  assert.throws(() => parseMooncake(mc(0, -2048)), /line 1 has input_length -2048/);
  assert.throws(() => parseMooncake(mc(0, 1024, -5)), /line 1 has output_length -5/);
  assert.throws(() => parseMooncake(mc(0, 100.5)), /input_length 100.5/);
  assert.throws(() => parseMooncake(mc(-3)), /timestamp -3/);
  assert.throws(() => parseMooncake(mc(0, 1024, 8, ["a", "b"])), /hash id "a"/);
  assert.throws(() => parseMooncake("\n\n"), /The Mooncake trace has no requests/);
  assert.throws(() => parseMooncake("TIMESTAMP,ContextTokens,GeneratedTokens\n"), /--format azure/);
});

test("parseAzure() replays rows in arrival order and rejects malformed rows", () => {
  const head = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
  const w = parseAzure(head + "2023-11-16 18:17:13.0,600,5\n2023-11-16 18:17:03.0,4808,10\n");
  assert.deepEqual(w.sessions.map((s) => s.start), [0, 10]);
  assert.deepEqual(w.sessions.map((s) => s.turns[0].fixedPromptTokens), [4808, 600]);
  assert.equal(w.durationS, 11);
  assert.throws(() => parseAzure(head + "2023-11-16 18:17:03.0,100"), /Azure line 2 has 2 fields, the header 3/);
  assert.throws(() => parseAzure(head + "2023-11-16 18:17:03.0,,10"), /Azure line 2 is malformed/);
  assert.throws(() => parseAzure(head + "2023-11-16 18:17:03.0,-4808,10"), /ContextTokens -4808/);
  assert.throws(() => parseAzure(head + "2023-11-16 18:17:03.0,100.5,10"), /ContextTokens 100.5/);
  assert.throws(() => parseAzure(head), /The Azure trace has no requests/);
});
