/** The simulator's inputs: impossible calendar dates in an Azure trace, and a one-load sweep's output shape. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { projectRoot, test } from "../harness.ts";
import { parseAzure, TraceFormatError } from "../../src/sim/traces.ts";

const HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens";
const traceError = (f: () => unknown, message: RegExp) => assert.throws(f, (e: Error) => e instanceof TraceFormatError && message.test(e.message));

test("parseAzure() refuses calendar dates and times that do not exist instead of rolling them over", () => {
  // Date.parse reads "2023-02-30" as 2 March: a day-long gap in a replay from a typo.
  traceError(() => parseAzure(`${HEAD}\n2023-02-28 23:59:59,100,5\n2023-02-30 00:00:00,100,5`), /Azure line 3 has TIMESTAMP "2023-02-30 00:00:00"/);
  traceError(() => parseAzure(`${HEAD}\n2023-13-01 00:00:00,100,5`), /TIMESTAMP "2023-13-01 00:00:00"/);
  traceError(() => parseAzure(`${HEAD}\n2023-11-16 24:30:00,100,5`), /TIMESTAMP "2023-11-16 24:30:00"/);
  traceError(() => parseAzure(`${HEAD}\n2023-11-16 18:60:00,100,5`), /TIMESTAMP "2023-11-16 18:60:00"/);
  // Real dates still read, leap days and minute-only times included.
  const w = parseAzure(`${HEAD}\n2024-02-29 23:59:59.5,100,5\n2024-03-01 00:00,100,5\n2024-03-01T00:00:01.5+00:00,100,5`);
  assert.deepEqual(w.sessions.map((s) => s.start), [0, 0.5, 2]);
});

test("sim CLI --sweep with one load prints a list and writes a load folder, as any sweep does", () => {
  const dir = mkdtempSync(`${tmpdir()}/sim-hunt3-`);
  try {
    const base = ["--scenario", "coding-256", "--gpus", "16", "--duration", "5", "--json"];
    const r = spawnSync("node", ["--import", `${projectRoot}/node_modules/tsx/dist/loader.mjs`, `${projectRoot}/src/cli/sim.ts`, ...base, "--sweep", "1", "--report", `${dir}/r`], {
      cwd: projectRoot, encoding: "utf8", env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "" }, timeout: 120_000,
    });
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout) as { load: number }[];
    assert.ok(Array.isArray(out), "a sweep's --json is an array");
    assert.deepEqual(out.map((v) => v.load), [1]);
    assert.ok(existsSync(`${dir}/r/load-1/result.json`), "the sweep's load folder");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
