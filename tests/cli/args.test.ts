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
