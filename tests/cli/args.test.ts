/** parseArgs(): flag forms, typing, and one-line errors that quote the bad input. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { ArgsError, type FlagSpecs, parseArgs, usage } from "../../src/cli/args.ts";

const SPECS = {
  model: { kind: "string", help: "path" },
  "max-tokens": { kind: "int", min: 0, help: "count" },
  "top-p": { kind: "number", min: 0, max: 1, help: "mass" },
  json: { kind: "boolean", help: "json" },
} satisfies FlagSpecs;

test("parseArgs() reads --flag value, --flag=value and boolean flags", () => {
  const out = parseArgs(["--model", "a b.gguf", "--max-tokens=12", "--top-p", "0.5", "--json"], SPECS);
  assert.deepEqual(out, { model: "a b.gguf", "max-tokens": 12, "top-p": 0.5, json: true });
  assert.deepEqual(parseArgs(["--json=false"], SPECS), { json: false });
  assert.deepEqual(parseArgs([], SPECS), {});
  assert.deepEqual(parseArgs(["--model=--json"], SPECS), { model: "--json" });
});

test("parseArgs() rejects unknown flags and positional arguments", () => {
  assert.throws(() => parseArgs(["--modle", "x"], SPECS), (e) => e instanceof ArgsError && /Unknown flag "--modle"/.test(e.message));
  assert.throws(() => parseArgs(["model.gguf"], SPECS), /Unexpected argument "model.gguf"/);
});

test("parseArgs() rejects missing and mistyped values, quoting them", () => {
  assert.throws(() => parseArgs(["--model"], SPECS), /Flag --model needs a value/);
  assert.throws(() => parseArgs(["--model", "--json"], SPECS), /Flag --model needs a value/);
  assert.throws(() => parseArgs(["--max-tokens", "1.5"], SPECS), /--max-tokens expects an integer, got "1.5"/);
  assert.throws(() => parseArgs(["--max-tokens", ""], SPECS), /expects an integer, got ""/);
  assert.throws(() => parseArgs(["--max-tokens=-1"], SPECS), /at least 0, got "-1"/);
  assert.throws(() => parseArgs(["--top-p", "abc"], SPECS), /expects a number, got "abc"/);
  assert.throws(() => parseArgs(["--top-p", "2"], SPECS), /at most 1, got "2"/);
  assert.throws(() => parseArgs(["--json=yes"], SPECS), /expects true or false, got "yes"/);
});

test("usage() lists every flag", () => {
  const text = usage("generate", SPECS);
  for (const name of Object.keys(SPECS)) assert.match(text, new RegExp(`--${name}`));
});

test("parseArgs() reads int and number flags as decimal text only", () => {
  // Number() alone would take these: "0x10" as 16, "1e3" as 1000, " 8" as 8, "1.0" as 1.
  for (const raw of ["0x10", "1e3", " 8", "1.0", "0b11", "+"]) {
    assert.throws(() => parseArgs(["--max-tokens", raw], SPECS), new RegExp(`Flag --max-tokens expects an integer, got "${raw.replace("+", "\\+")}"`));
  }
  for (const raw of ["0x1", "0o1", "Infinity", "1e999", "."]) {
    assert.throws(() => parseArgs(["--top-p", raw], SPECS), new RegExp(`Flag --top-p expects a number, got "${raw.replace(".", "\\.")}"`));
  }
  assert.deepEqual(parseArgs(["--max-tokens=+7", "--top-p", ".5"], SPECS), { "max-tokens": 7, "top-p": 0.5 });
  assert.deepEqual(parseArgs(["--top-p", "5e-1"], SPECS), { "top-p": 0.5 });
});

test("parseArgs() refuses an int flag beyond Number.MAX_SAFE_INTEGER instead of rounding it", () => {
  const specs = { seed: { kind: "int", help: "seed" } } satisfies FlagSpecs;
  assert.throws(() => parseArgs(["--seed", "99999999999999999999"], specs), /Flag --seed must be at most 9007199254740991, got "99999999999999999999"/);
  assert.throws(() => parseArgs(["--seed=-99999999999999999999"], specs), /Flag --seed must be at least -9007199254740991, got "-99999999999999999999"/);
  assert.deepEqual(parseArgs(["--seed", "9007199254740991"], specs), { seed: 9007199254740991 });
});

test("parseArgs() refuses an empty value for a nonEmpty string flag, and keeps it for others", () => {
  const specs = { "api-key": { kind: "string", nonEmpty: true, help: "key" }, prompt: { kind: "string", help: "text" } } satisfies FlagSpecs;
  assert.throws(() => parseArgs(["--api-key="], specs), (e) => e instanceof ArgsError && e.message === `Flag --api-key needs a non-empty value, got ""`);
  assert.throws(() => parseArgs(["--api-key", ""], specs), /Flag --api-key needs a non-empty value/);
  assert.deepEqual(parseArgs(["--prompt="], specs), { prompt: "" });
});

test("usage() keeps a space between a flag longer than its column and the help", () => {
  const text = usage("serve", { "served-model-name": { kind: "string", help: "name clients use" } });
  assert.match(text, /--served-model-name <text> name clients use/);
});
