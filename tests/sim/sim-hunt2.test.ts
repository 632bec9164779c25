/**
 * The simulator's user-facing inputs under malformed or out-of-range values: traces, step logs and
 * the CLI's flags each get a one-line error naming the problem, never a hang, NaN or a wrong replay.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { projectRoot, test } from "../harness.ts";
import { hashBlock } from "../../kv/hash.ts";
import { calibrateHardware, parseStepLog, StepLogError } from "../../src/sim/calibration.ts";
import { parseSimArgs, SimUsageError } from "../../src/sim/cli-options.ts";
import { GB300, gpusPerWorker, KIMI_K2_6 } from "../../src/sim/profiles.ts";
import { MAX_REPLAY_S, parseAzure, parseMooncake, TraceFormatError } from "../../src/sim/traces.ts";

const HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens";
const mc = (ts: number, ids: number[] = [0, 1], input = 1024) => JSON.stringify({ timestamp: ts, input_length: input, output_length: 8, hash_ids: ids });
const traceError = (f: () => unknown, message: RegExp) => assert.throws(f, (e: Error) => e instanceof TraceFormatError && message.test(e.message));
const usage = (argv: string[], message: RegExp) => assert.throws(() => parseSimArgs(argv), (e: Error) => e instanceof SimUsageError && message.test(e.message));

test("parseAzure() reads only real dates as TIMESTAMP, not what Date.parse guesses from a number", () => {
  // Date.parse("1.5Z") is 5 January 2001 and "2.5Z" 5 February: a 31-day gap from a one-second one.
  traceError(() => parseAzure(`${HEAD}\n1.5,100,5\n2.5,100,5`), /Azure line 2 has TIMESTAMP "1.5"; expected a UTC date and time/);
  traceError(() => parseAzure(`${HEAD}\n12,100,5`), /line 2 has TIMESTAMP "12"/);
  // Zoned and T-separated dates are real ones.
  const w = parseAzure(`${HEAD}\n2023-11-16T18:17:03Z,100,5\n2023-11-16 19:17:04+01:00,100,5`);
  assert.deepEqual(w.sessions.map((s) => s.start), [0, 1]);
});

test("parseAzure() reads header variants, quoted fields and every line ending, and rejects hex counts", () => {
  for (const text of [
    `TIMESTAMP, ContextTokens, GeneratedTokens\n2023-11-16 18:17:03.0, 100, 5\n`,
    `"TIMESTAMP","ContextTokens","GeneratedTokens"\r\n"2023-11-16 18:17:03.0",100,5`,
    `\uFEFFtimestamp,contexttokens,generatedtokens\r2023-11-16 18:17:03.0,100,5\r`,
  ]) {
    const w = parseAzure(text);
    assert.deepEqual(w.sessions.map((s) => [s.turns[0].fixedPromptTokens, s.turns[0].outputTokens]), [[100, 5]], JSON.stringify(text));
  }
  traceError(() => parseAzure(`${HEAD}\n2023-11-16 18:17:03.0,0x10,5`), /Azure line 2 is malformed/);
  traceError(() => parseAzure(mc(0)), /got "\{"timestamp".*add --format mooncake/);
});

test("parseMooncake() reads lone-CR line endings, numbering lines as an editor does", () => {
  assert.deepEqual(parseMooncake(`${mc(0)}\r${mc(1000)}\r`).sessions.map((s) => s.start), [0, 1]);
  traceError(() => parseMooncake(`${mc(0)}\r{bad`), /Mooncake line 2 is not JSON/);
});

test("parseMooncake() keeps hash ids past 2^32 apart in the block hash", () => {
  // The block hash reads a chunk id's low 32 bits: ids 7 and 7 + 2^32 must still be different blocks.
  const w = parseMooncake([mc(0, [7], 512), mc(1000, [7 + 2 ** 32], 512), mc(2000, [7], 512)].join("\n"));
  const [a, b, c] = w.sessions.map((s) => hashBlock(null, s.turns[0].fixedChunks!));
  assert.notEqual(a, b);
  assert.equal(a, c);
  assert.equal(parseMooncake(mc(0, [2 ** 53 - 1], 512)).sessions[0].turns[0].fixedChunks!.length, 1);
});

test("trace replays longer than the simulator's bound are an error, not an hours-long run", () => {
  traceError(() => parseMooncake([mc(0), mc(1e300)].join("\n")), /Mooncake trace spans 1.00e\+297 s .*\(line 2\).* at most 2592000 s/);
  traceError(() => parseMooncake([mc(0), mc(3_600_000)].join("\n"), 1e-6), /spans 3.60e\+9 s .* at time scale 0.000001/);
  traceError(() => parseAzure(`${HEAD}\n2023-11-16 18:17:03,100,5\n2093-11-16 18:17:03,100,5`), /Azure trace spans .*line 3/);
  assert.equal(parseMooncake([mc(0), mc(MAX_REPLAY_S * 1000)].join("\n")).durationS, MAX_REPLAY_S + 1);
});

const step = (p: number, d: number, s: number) => JSON.stringify({ prefillTokens: p, prefillAttnPairs: p * p, decodeSeqs: d, decodeAttnTokens: d * 1000, seconds: s });

const gpw = gpusPerWorker(KIMI_K2_6, GB300);

test("calibrateHardware() rejects a log whose steps all have one shape (nothing to fit overhead against)", () => {
  assert.throws(() => calibrateHardware(KIMI_K2_6, GB300, gpw, parseStepLog([step(0, 64, 0.02), step(0, 64, 0.021), step(0, 64, 0.019)].join("\n"))),
    (e: Error) => e instanceof StepLogError && /at least 2 different shapes.*got 3 steps all of shape "0,0,64,64000"/.test(e.message));
  const fit = calibrateHardware(KIMI_K2_6, GB300, gpw, parseStepLog([step(0, 64, 0.02), step(0, 64, 0.021), step(0, 128, 0.03)].join("\n")));
  assert.ok(Number.isFinite(fit.hw.bandwidthEfficiency) && Number.isFinite(fit.hw.stepOverheadS));
});

test("calibrateHardware() rejects steps too large to fit instead of returning NaN efficiencies", () => {
  const huge = '{"prefillTokens":1e308,"prefillAttnPairs":1e308,"decodeSeqs":1e308,"decodeAttnTokens":1e308,"seconds":0.02}';
  for (const log of [[huge, step(0, 64, 0.02), step(0, 128, 0.03)], [step(0, 64, 1e300), step(0, 64, 1e300), step(0, 128, 2e300)]]) {
    assert.throws(() => calibrateHardware(KIMI_K2_6, GB300, gpw, parseStepLog(log.join("\n"))),
      (e: Error) => e instanceof StepLogError && /The step log cannot be fitted: step 1 .* is too large/.test(e.message));
  }
  // 1e400 parses to Infinity, which JSON.stringify would print as null.
  assert.throws(() => parseStepLog('{"prefillTokens":1e400}'), /"prefillTokens", got Infinity/);
});

test("parseSimArgs() bounds --duration and the sessions a scenario would start, and rejects repeated sweep loads", () => {
  usage(["--scenario", "coding-256", "--duration", "1e12"], /--duration needs a number in \[1, 2592000\], got "1e12"/);
  usage(["--scenario", "coding-256", "--load", "1e9"], /coding-256 at load 1000000000 on 256 GPUs for 3600 s would start about 1.44e\+13 sessions; the simulator takes at most 10000000/);
  usage(["--scenario", "steady-profiled", "--sweep", "1,1e6"], /at load 1000000 /);
  usage(["--scenario", "coding-256", "--sweep", "1,2,1.0"], /Option --sweep lists load 1 twice, got "1,2,1.0"/);
  usage(["--scenario", "coding-256", "--remote-store-tb", "1e300"], /--remote-store-tb needs a number in \[0, 1000000\], got "1e300"/);
  assert.equal(parseSimArgs(["--scenario", "coding-256", "--remote-store-tb", "1000"]).remoteStoreTb, 1000);
  assert.deepEqual(parseSimArgs(["--scenario", "steady-profiled", "--sweep"]).sweep, [0.5, 1, 2, 3, 4, 6]);
});

function sim(args: string[]) {
  const r = spawnSync("node", ["--import", `${projectRoot}/node_modules/tsx/dist/loader.mjs`, `${projectRoot}/src/cli/sim.ts`, ...args], {
    cwd: projectRoot, encoding: "utf8", env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "" }, timeout: 120_000,
  });
  return { status: r.status, stdout: r.stdout ?? "", stderr: r.stderr ?? "" };
}

test("sim CLI says why an input file cannot be read, and checks a sweep's trace and folders at every load before running", () => {
  const dir = mkdtempSync(`${tmpdir()}/sim-hunt2-`);
  try {
    writeFileSync(`${dir}/t.jsonl`, `${mc(0)}\n${mc(3_600_000)}\n`);
    mkdirSync(`${dir}/r`);
    writeFileSync(`${dir}/r/load-2`, "a file where the sweep's second folder goes");
    for (const [args, message] of [
      [["--trace", dir], /Cannot read trace file ".*" \(it is a directory\)/],
      [["--trace", `${dir}/none.jsonl`], /Cannot read trace file ".*none.jsonl" \(no such file\)/],
      [["--scenario", "coding-256", "--calibrate", `${dir}/none.jsonl`], /Cannot read step log ".*" \(no such file\)/],
      // The small load comes last: it used to fail only after the first load's whole run.
      [["--trace", `${dir}/t.jsonl`, "--sweep", "1,0.0001"], /Cannot replay trace .*spans 3.60e\+7 s .* at time scale 0.0001/],
      [["--scenario", "coding-256", "--gpus", "16", "--duration", "5", "--sweep", "1,2", "--report", `${dir}/r`], /Cannot write report folder ".*r\/load-2" \(EEXIST\)/],
      [["--scenario", "coding-256", "--format", "json"], /Option --format must be mooncake or azure, got "json"/],
    ] as const) {
      const r = sim([...args]);
      assert.equal(r.status, 2, r.stderr);
      assert.equal(r.stdout, "", "no load ran before the error");
      assert.match(r.stderr, message);
      assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
