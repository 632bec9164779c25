import { test } from "../harness.ts";
import assert from "node:assert/strict";
import { MAX_GPUS, parseSimArgs, SimHelp, SimUsageError } from "../../src/sim/cli-options.ts";

const scenario = ["--scenario", "coding-256"];
const rejects = (argv: string[], message: RegExp) => assert.throws(() => parseSimArgs(argv), (e: Error) => e instanceof SimUsageError && message.test(e.message));

test("parseSimArgs() rejects profile names that only the object prototype has", () => {
  rejects([...scenario, "--model", "toString"], /Unknown model profile "toString"/);
  rejects([...scenario, "--model", "__proto__"], /Unknown model profile "__proto__"/);
  rejects([...scenario, "--hw", "constructor"], /Unknown hardware profile "constructor"/);
});

test("parseSimArgs() takes --gpus only as whole workers, two at least", () => {
  assert.equal(parseSimArgs([...scenario, "--gpus", "16"]).gpus, 16);
  rejects([...scenario, "--gpus", "20"], /--gpus needs a multiple of 8 \(GPUs per worker of kimi-k2.6 on gb300\) of at least 16, got "20"/);
  rejects([...scenario, "--gpus", "8"], /got "8"/);
  rejects([...scenario, "--gpus", "1e12"], new RegExp(`--gpus needs an integer in \\[1, ${MAX_GPUS}\\], got "1e12"`));
  rejects([...scenario, "--gpus", "0x10"], /--gpus needs an integer .* got "0x10"/);
});

test("parseSimArgs() reads --flag=value as --flag value", () => {
  const o = parseSimArgs(["--scenario=coding-256", "--load=0.5", "--gpus=16", "--json"]);
  assert.deepEqual([o.scenario, o.load, o.gpus, o.json], ["coding-256", 0.5, 16, true]);
  assert.deepEqual(parseSimArgs([...scenario, "--sweep=0.5,1"]).sweep, [0.5, 1]);
  rejects([...scenario, "--load="], /--load/);
});

test("parseSimArgs() rejects seeds the 32-bit generator would alias", () => {
  assert.equal(parseSimArgs([...scenario, "--seed", String(2 ** 32 - 1)]).seed, 2 ** 32 - 1);
  rejects([...scenario, "--seed", String(2 ** 32 + 1)], /--seed needs an integer in \[0, 4294967295\], got "4294967297"/);
});

test("parseSimArgs() does not take the next flag as a value", () => {
  rejects([...scenario, "--report", "--json"], /Option --report needs a value, got "--json"/);
  rejects(["--trace", "--json"], /Option --trace needs a value, got "--json"/);
  rejects([...scenario, "--baselines", ","], /--baselines needs at least one of dynamo-disagg-sla/);
  rejects([...scenario, "--baselines", "dynamo"], /Unknown baseline "dynamo"; known:/);
});

test("parseSimArgs() rejects options that do not apply to the run", () => {
  rejects([...scenario, "--format", "azure"], /Option --format does not apply to a scenario/);
  rejects([...scenario, "--max-requests", "5"], /Option --max-requests does not apply to a scenario/);
  rejects(["--trace", "t.jsonl", "--duration", "60"], /Option --duration does not apply to a trace/);
  rejects([...scenario, "--load", "2", "--sweep", "1,2"], /Option --load does not apply with --sweep/);
  assert.deepEqual(parseSimArgs([...scenario, "--sweep", "1,2"]).sweep, [1, 2]);
});

test("parseSimArgs() answers --help with the usage, not an error", () => {
  assert.throws(() => parseSimArgs(["--help"]), (e: Error) => e instanceof SimHelp && /^usage: sim --scenario/.test(e.message));
});

test("parseSimArgs() refuses a value given to a switch (--json=yes), naming the switch", () => {
  for (const flag of ["--json", "--ablation", "--kv-replicated"]) {
    assert.throws(() => parseSimArgs(["--scenario", "coding-256", `${flag}=yes`]), (e: Error) => e instanceof SimUsageError && e.message === `Option ${flag} takes no value, got "yes"`);
  }
  assert.equal(parseSimArgs(["--scenario", "coding-256", "--json", "--gpus=32"]).gpus, 32, "a valued option still takes =");
});
