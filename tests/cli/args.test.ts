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

test("parseArgs() records an alias's value as its flag's, and refuses a refused flag with its explanation", () => {
  const specs = {
    "max-batch-tokens": { kind: "int", min: 1, help: "budget" },
    "max-num-batched-tokens": { kind: "int", min: 1, aliasOf: "max-batch-tokens", help: "alias" },
    "gpu-memory-utilization": { kind: "number", refused: "size the cache with --kv-blocks", help: "refused" },
  } satisfies FlagSpecs;
  assert.deepEqual(parseArgs(["--max-num-batched-tokens", "256"], specs), { "max-batch-tokens": 256 });
  assert.deepEqual(parseArgs(["--max-num-batched-tokens=256", "--max-batch-tokens", "256"], specs), { "max-batch-tokens": 256 });
  assert.throws(() => parseArgs(["--max-num-batched-tokens", "256", "--max-batch-tokens", "512"], specs), /Flag --max-batch-tokens is given twice, as "256" and "512"/);
  assert.throws(() => parseArgs(["--max-num-batched-tokens", "0"], specs), /Flag --max-num-batched-tokens must be at least 1, got "0"/);
  assert.throws(() => parseArgs(["--gpu-memory-utilization", "0.9"], specs), (e: unknown) => e instanceof ArgsError && e.message === "Flag --gpu-memory-utilization is not supported: size the cache with --kv-blocks");
  // A refused flag is no suggestion for a typo.
  assert.throws(() => parseArgs(["--gpu-memory-utilisation", "0.9"], specs), (e: unknown) => e instanceof ArgsError && !/gpu-memory-utilization/.test(e.message));
});

test("serve's flags take a vLLM command line (its names for the same things, what is always so here) and refuse the rest saying what to use", async () => {
  const { SERVE_FLAGS } = await import("../../src/cli/serve-flags.ts");
  const { checkVllmFlags } = await import("../../src/cli/preflight.ts");
  const vllm = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--trust-remote-code", "--max-num-batched-tokens", "256", "--tensor-parallel-size", "1", "--dtype", "auto", "--enable-prefix-caching", "--enable-chunked-prefill", "--disable-log-requests"];
  const f = parseArgs(vllm, SERVE_FLAGS);
  assert.equal(f["max-batch-tokens"], 256);
  checkVllmFlags(f);
  for (const [args, message] of [
    [["--gpu-memory-utilization", "0.9"], /Flag --gpu-memory-utilization is not supported: the KV cache is sized by --kv-blocks/],
    [["--pipeline-parallel-size", "2"], /Flag --pipeline-parallel-size is not supported: .*--workers N/],
    [["--no-enable-prefix-caching"], /Flag --no-enable-prefix-caching is not supported: prefix caching is always on/],
    [["--tensor-parallel-size", "2"], /Flag --tensor-parallel-size 2 is not supported: each engine runs on one device here/],
    [["--dtype", "bfloat16"], /Flag --dtype bfloat16 is not supported: weights are computed as stored/],
    [["--enable-prefix-caching=false"], /Flag --enable-prefix-caching=false is not supported/],
    [["--enable-chunked-prefill=false"], /Flag --enable-chunked-prefill=false is not supported/],
  ] as const) {
    assert.throws(() => checkVllmFlags(parseArgs(args, SERVE_FLAGS)), (e: unknown) => e instanceof ArgsError && message.test(e.message), args.join(" "));
  }
});

test("modelFirst() reads serve's first argument as the model, as vllm serve MODEL does, and nothing else", async () => {
  const { modelFirst } = await import("../../src/cli/preflight.ts");
  assert.deepEqual(modelFirst(["m.gguf", "--port", "0"]), ["--model", "m.gguf", "--port", "0"]);
  assert.deepEqual(modelFirst(["--port", "0"]), ["--port", "0"]);
  assert.deepEqual(modelFirst([]), []);
  assert.throws(() => modelFirst(["m.gguf", "--model", "n.gguf"]), /The model is given twice: "m\.gguf" first, and --model/);
  assert.throws(() => modelFirst(["m.gguf", "--model=n.gguf"]), /given twice/);
  // A second bare argument is still refused by the parser, naming it.
  assert.throws(() => parseArgs(modelFirst(["m.gguf", "--port", "0", "extra"]), SPECS_WITH_PORT), /Unexpected argument "extra"/);
});

const SPECS_WITH_PORT = { model: { kind: "string", help: "path" }, port: { kind: "int", help: "port" } } satisfies FlagSpecs;
