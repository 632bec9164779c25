/** The generate CLI as a user runs it: spawned under Node (tsx) and Deno, JSON parsed, errors checked. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { projectRoot, sharedRoot, test } from "../harness.ts";

const golden = JSON.parse(readFileSync(`${sharedRoot}/reference/stories260K-greedy.json`, "utf8")) as {
  prompt: string;
  prompt_ids_with_bos: number[];
  greedy20: number[];
  text: string;
};

const RUNTIMES = {
  // tsx by absolute path: `--import tsx` would resolve from the working directory.
  node: ["node", ["--import", `${projectRoot}/node_modules/tsx/dist/loader.mjs`, "src/cli/generate.ts"]],
  deno: [`${projectRoot}/node_modules/.bin/deno`, ["run", "-A", "src/cli/generate.ts"]],
  "deno task": [`${projectRoot}/node_modules/.bin/deno`, ["task", "-q", "generate"]],
} as const;

function runCli(runtime: keyof typeof RUNTIMES, args: string[], cwd = projectRoot) {
  const [cmd, pre] = RUNTIMES[runtime];
  const script = pre.map((a) => (a.startsWith("src/") ? `${projectRoot}/${a}` : a));
  const r = spawnSync(cmd, [...script, ...args], {
    cwd,
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "" },
    timeout: 120_000,
  });
  return { status: r.status, stdout: r.stdout ?? "", stderr: r.stderr ?? "" };
}

for (const runtime of ["node", "deno"] as const) {
  test(`generate CLI under ${runtime} prints the golden greedy JSON for the bundled model`, () => {
    // Run from another directory: the default model must resolve relative to the project.
    const r = runCli(runtime, ["--prompt", golden.prompt, "--max-tokens", "20", "--temperature", "0",
      "--backend", "reference", "--json"], sharedRoot);
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout.trim()) as Record<string, unknown>;
    assert.deepEqual(Object.keys(out).sort(), ["backend", "ids", "prompt_ids", "text"]);
    assert.equal(out.backend, "reference");
    assert.deepEqual(out.prompt_ids, golden.prompt_ids_with_bos);
    assert.deepEqual(out.ids, golden.greedy20);
    assert.equal(out.text, golden.text);
  });
}

test("deno task generate prints the golden JSON (the documented command)", () => {
  const r = runCli("deno task", ["--max-tokens", "20", "--temperature", "0", "--backend", "reference", "--json"]);
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(r.stdout.trim()) as { ids: number[]; prompt_ids: number[] };
  assert.deepEqual(out.prompt_ids, golden.prompt_ids_with_bos);
  assert.deepEqual(out.ids, golden.greedy20);
});

test("generate CLI without --json prints the text and names the backend on stderr", () => {
  const r = runCli("node", ["--max-tokens", "20", "--backend", "reference"]);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), `${golden.prompt}${golden.text}`);
  assert.match(r.stderr, /backend: reference/);
});

test("generate CLI exits 2 with one line for a missing model file", () => {
  const r = runCli("node", ["--model", "/no/such/model.gguf", "--backend", "reference"]);
  assert.equal(r.status, 2);
  assert.equal(r.stdout, "");
  assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  assert.match(r.stderr, /not found.*\/no\/such\/model\.gguf/);
});

test("generate CLI exits 2 with one line for bad flags and values", () => {
  for (const args of [["--bogus"], ["--max-tokens", "ten"], ["--backend", "tpu"], ["--top-p", "0"]]) {
    const r = runCli("deno", args);
    assert.equal(r.status, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
    assert.ok(r.stderr.includes(args[args.length - 1].replace(/^--/, "")), r.stderr);
  }
});

test("generate CLI --kv-cache-dtype fp8 generates through an f8_e4m3 cache, and refuses a dtype it does not know or the model cannot hold", () => {
  const json = (args: string[]) => {
    const r = runCli("node", [...args, "--max-tokens", "48", "--backend", "reference", "--json", "--prompt", "Once upon a time there was a little girl named Lily. She loved to play"]);
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout) as { ids: number[]; text: string };
  };
  const [fp8, f16] = [json(["--kv-cache-dtype", "fp8"]), json(["--kv-cache-dtype", "f16"])];
  // E4M3's rounding parts stories260K's greedy path from f16's after "… but it was too high." (docs/bench-engine.md).
  assert.notDeepEqual(fp8.ids, f16.ids);
  assert.equal(fp8.ids.slice(0, 20).join(), f16.ids.slice(0, 20).join());
  const bad = runCli("node", ["--kv-cache-dtype", "fp4", "--backend", "reference"]);
  assert.equal(bad.status, 2, bad.stderr);
  assert.match(bad.stderr, /^error: Unknown KV cache dtype "fp4"; choose auto, f16, f32 or fp8 \(f8_e4m3\)\n$/);
});

test("generate CLI exits 2 for a prompt longer than the context", () => {
  const r = runCli("deno", ["--prompt", "Once upon a time ".repeat(700), "--backend", "reference"]);
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /more than the context length 2048/);
});

test("generate CLI --lora runs with an adapter (the engine's tokens for it), and names a bad adapter path in a one-line error", async () => {
  const { mkdtempSync, rmSync, writeFileSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { loadModel } = await import("../../src/model/load.ts");
  const { loraGgufBytes } = await import("../model/lora-files.ts");
  const { createEngine } = await import("../../src/engine/engine-factory.ts");
  const { createReferenceBackend } = await import("../../src/backend/reference/index.ts");
  const { loadLoraAdapter } = await import("../../src/model/lora-load.ts");
  const model = await loadModel(`${projectRoot}/models/stories260K.gguf`);
  const dir = mkdtempSync(`${tmpdir()}/generate-lora-`);
  try {
    const path = `${dir}/a.gguf`;
    const targets = Array.from({ length: model.config.numLayers }, (_, layer) => ({ layer, target: "wv" as const }));
    writeFileSync(path, loraGgufBytes(model.config, { seed: 4, rank: 4, alpha: 8, targets, magnitude: 0.6 }));
    const r = runCli("node", ["--lora", path, "--max-tokens", "12", "--backend", "reference", "--json"]);
    assert.equal(r.status, 0, r.stderr);
    const ids = (JSON.parse(r.stdout) as { ids: number[] }).ids;
    const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
    try {
      e.loadAdapter("a", await loadLoraAdapter(path, model.config));
      const want = await e.submit({ prompt: model.tokenizer.encode("Once upon a time", { addBos: true }), maxTokens: 12, temperature: 0, adapter: "a" }).result;
      assert.deepEqual(ids, want.tokenIds.slice(0, ids.length));
      assert.notDeepEqual(ids, golden.greedy20.slice(0, ids.length), "the adapter changes the greedy tokens");
    } finally {
      await e.stop();
    }
    const bad = runCli("node", ["--lora", `${dir}/missing.gguf`, "--backend", "reference"]);
    assert.equal(bad.status, 2);
    assert.match(bad.stderr.trim().split("\n").pop()!, /^error: LoRA adapter not found: ".*missing\.gguf"$/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("generate CLI --mmproj --image puts the image at the prompt's marker (the engine's tokens for it), and refuses what it cannot read in one line", async () => {
  const { mkdtempSync, rmSync, writeFileSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { loadModel } = await import("../../src/model/load.ts");
  const { writeMmproj } = await import("../model/vision-files.ts");
  const { encodePng } = await import("../../src/model/vision/png.ts");
  const { encodeWithImages } = await import("../../src/serve/prompt-images.ts");
  const { createEngine } = await import("../../src/engine/engine-factory.ts");
  const { createReferenceBackend } = await import("../../src/backend/reference/index.ts");
  const dir = mkdtempSync(`${tmpdir()}/generate-image-`);
  try {
    const mmproj = `${dir}/mmproj.gguf`;
    writeMmproj(mmproj, { lmHidden: 64, seed: 51, imageSize: 28, patchSize: 14 });
    const picture = { width: 9, height: 6, rgb: Uint8Array.from({ length: 9 * 6 * 3 }, (_, i) => (i * 37) % 256) };
    writeFileSync(`${dir}/a.png`, encodePng(picture));
    const prompt = "Once upon a time<__media__>";
    const r = runCli("node", ["--mmproj", mmproj, "--image", `${dir}/a.png`, "--prompt", prompt, "--max-tokens", "8", "--backend", "reference", "--json"]);
    assert.equal(r.status, 0, r.stderr);
    const out = JSON.parse(r.stdout) as { ids: number[]; prompt_ids: number[] };
    const model = await loadModel(`${projectRoot}/models/stories260K.gguf`, { mmproj });
    const placed = encodeWithImages(model, prompt, [picture], true, "--image");
    assert.deepEqual(out.prompt_ids, placed.prompt);
    const e = createEngine(createReferenceBackend(), model, { numBlocks: 64 });
    try {
      const want = await e.submit({ prompt: placed.prompt, images: placed.images, maxTokens: 8, temperature: 0 }).result;
      assert.deepEqual(out.ids, want.tokenIds.slice(0, out.ids.length));
    } finally {
      await e.stop();
    }
    const lastLine = (args: string[]) => {
      const bad = runCli("node", [...args, "--backend", "reference"]);
      assert.equal(bad.status, 2, bad.stderr);
      return bad.stderr.trim().split("\n").pop()!;
    };
    assert.match(lastLine(["--image", `${dir}/a.png`]), /^error: Flag --image needs --mmproj/);
    assert.match(lastLine(["--mmproj", mmproj, "--image", `${dir}/none.png`]), /^error: Image file not found: ".*none\.png"$/);
    writeFileSync(`${dir}/bad.png`, Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0]));
    assert.match(lastLine(["--mmproj", mmproj, "--image", `${dir}/bad.png`]), /^error: The image is not a readable PNG: The PNG data ends/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
