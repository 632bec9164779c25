/** The serve CLI's flag checks as a user meets them: spawned under Node (tsx), one-line errors, exit 2. */
import assert from "node:assert/strict";
import { eventually } from "../eventually.ts";
import { spawnSync } from "node:child_process";
import OpenAI from "openai";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { projectRoot, test } from "../harness.ts";
import { spawnServe } from "../serve-process.ts";
import { ggufBytes, type ModelFileSpec, randomHfWeights } from "../model/model-files.ts";
import { writePair } from "../model/fp8-files.ts";

function serve(args: string[]) {
  const r = spawnSync("node", ["--import", `${projectRoot}/node_modules/tsx/dist/loader.mjs`, `${projectRoot}/src/cli/serve.ts`, ...args], {
    cwd: projectRoot, encoding: "utf8", env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "" }, timeout: 120_000,
  });
  return { status: r.status, stderr: r.stderr ?? "" };
}

test("serve CLI rejects a bad --prefill-order, --role, --preemption, --kv-retention, --reasoning-parser, --tool-call-parser, --json-whitespace, --jump-forward, --step-mixing, --kv-cache-dtype, --speculative-config, --max-stored-responses, --max-conversations, --max-stored-mib, --num-scheduler-steps, --chat-template or --dtype (and a model file that is not there, given first as vllm serve MODEL) with a one-line error and exit 2", () => {
  for (const [args, message] of [
    [["--prefill-order", "random"], /Unknown prefill order "random"; choose fcfs or short-first/],
    [["--role", "leader"], /Unknown role "leader"; choose mixed, prefill or decode/],
    [["--preemption", "drop"], /Unknown preemption mode "drop"; choose recompute or swap/],
    [["--kv-retention", "fifo"], /Unknown KV retention "fifo"; choose agent or lru/],
    [["--reasoning-parser", "r1"], /Unknown reasoning parser "r1"; choose auto, think, mistral, harmony, seed_oss, gemma4, none, deepseek_r1, qwen3, glm45, openai_gptoss/],
    [["--step-mixing", "chunked"], /Unknown step mixing "chunked"; choose auto, mixed or split/],
    [["--quantize", "q4_k_m"], /Unknown --quantize format "q4_k_m"; choose q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k, iq4_nl, iq4_xs, mxfp4, f8_e4m3/],
    [["--tool-call-parser", "pythonic"], /Unknown tool call parser "pythonic"; choose auto, hermes, llama3_json, kimi_k2, deepseek_v31, deepseek_v3, glm45, qwen3_coder, minimax_m2, mistral, harmony, granite, phi4_mini_json, lfm2, nemotron_json, seed_oss, gemma4, openai/],
    [["--json-whitespace", "none"], /Unknown JSON whitespace "none"; choose any or compact/],
    [["--jump-forward", "yes"], /Unknown jump-forward setting "yes"; choose on or off/],
    [["--kv-cache-dtype", "fp8_e5m2"], /Unknown KV cache dtype "fp8_e5m2"; choose auto, f16, f32 or fp8 \(f8_e4m3\)/],
    [["--speculative-config", '{"method": "mlp_speculator", "num_speculative_tokens": 3}'], /--speculative-config: Speculative method "mlp_speculator" is not supported; "ngram" \(prompt lookup\), "suffix" \(suffix decoding\), "draft_model", "mtp" \(the model.s own multi-token-prediction block\), "eagle3" and "eagle" \(an EAGLE head\) are/],
    [["--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}'], /--speculative-config: The speculative model must be the directory of an EAGLE head for method "eagle3", got null/],
    [["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 64}'], /--speculative-config: The speculative num_speculative_tokens must be an integer from 1 to 32, got 64/],
    [["--max-stored-responses", "-1"], /Flag --max-stored-responses must be at least 0, got "-1"/],
    [["--max-conversations", "1.5"], /Flag --max-conversations/],
    [["--max-stored-mib", "0"], /Flag --max-stored-mib must be at least 0.001, got "0"/],
    [["--num-scheduler-steps", "0"], /Flag --num-scheduler-steps must be at least 1, got "0"/],
    [["nowhere/none.gguf"], /Model file not found: "nowhere\/none\.gguf"/],
    [["--dtype", "bfloat16"], /Flag --dtype bfloat16 is not supported: weights are computed as stored/],
    [["--chat-template", "templates/missing.jinja"], /Flag --chat-template: "templates\/missing\.jinja" is neither a file nor a template \(no "\{\{" or "\{%" in it\)/],
    [["--chat-template", "{% for m in messages %}{{ m.content }"], /Flag --chat-template: the template from the flag does not parse: /],
  ] as const) {
    const r = serve([...args, "--port", "0", "--backend", "reference"]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, message);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  }
});

test("serve CLI rejects bad cluster flags (--workers, --roles, --planner, --router, --peer-transfer, --router-options, --local-prefill-tokens, --transport) with a one-line error and exit 2", () => {
  for (const [args, message] of [
    [["--workers", "2", "--roles", "prefill,leader"], /Unknown role "leader" in --roles; choose mixed, prefill or decode/],
    [["--workers", "3", "--roles", "prefill,decode"], /--roles names 2 roles for 3 workers/],
    [["--workers", "2", "--roles", "prefill,prefill"], /At least one worker must decode; the roles are prefill,prefill/],
    [["--workers", "2", "--planner", "slo"], /Unknown planner "slo"; choose online, none, sla or load/],
    [["--planner", "load"], /--planner load needs at least 2 workers/],
    [["--planner", "sla"], /--planner sla needs at least 2 workers/],
    [["--workers", "2", "--sla-profile", "p.json"], /Flag --sla-profile p.json needs --planner sla or load/],
    [["--workers", "2", "--planner", "sla", "--itl-admission-ms", "5"], /--itl-admission-ms 5 needs the online planner, not --planner sla/],
    [["--workers", "2", "--planner", "sla", "--step-mixing", "auto"], /--planner sla decides none: choose mixed or split/],
    [["--workers", "2", "--router", "random"], /Unknown router "random"; choose session or kv-aware/],
    [["--router", "kv-aware"], /Flag --router kv-aware needs --workers 2 or more/],
    [["--workers", "2", "--peer-transfer", "always"], /Unknown peer transfer "always"; choose off, device, host/],
    [["--workers", "2", "--router", "kv-aware", "--peer-transfer", "host"], /Flag --peer-transfer host is for our router \(--router session\), not --router kv-aware/],
    [["--peer-transfer", "off"], /Flag --peer-transfer off needs --workers 2 or more/],
    [["--workers", "2", "--router-options", "sessionSpreadS=-1"], /Flag --router-options: Router option sessionSpreadS needs a non-negative number, got "-1"/],
    [["--workers", "2", "--router", "kv-aware", "--router-options", "peerMoveS=0"], /Flag --router-options peerMoveS=0 is for our router \(--router session\), not --router kv-aware/],
    [["--router-options", "peerMoveS=0"], /Flag --router-options peerMoveS=0 needs --workers 2 or more/],
    [["--local-prefill-tokens", "64"], /Flag --local-prefill-tokens 64 needs --workers 2 or more/],
    [["--workers", "2", "--local-prefill-tokens", "-1"], /--local-prefill-tokens/],
    [["--workers", "2", "--role", "decode"], /Flag --role decode sets one engine's role; with --workers 2 use --roles/],
    [["--role", "decode"], /Flag --role decode on one engine would admit no request/],
    [["--workers", "0"], /--workers/],
    [["--workers", "2", "--transport", "nats"], /Unknown transport "nats"; choose in-process, threads or tcp/],
    [["--transport", "tcp"], /--transport tcp needs --worker-addrs or --nats, and they need it/],
    [["--transport", "tcp", "--worker-addrs", "127.0.0.1:9"], /Worker worker-0 at 127.0.0.1:9 cannot be reached/],
    [["--transport", "tcp", "--worker-addrs", "nowhere"], /A worker address must be host:port, got "nowhere"/],
    [["--kv-blocks", "100000000"], /A KV cache of 100000000 blocks \(953\.67 GiB in f16\) could not be allocated on the reference backend/],
  ] as const) {
    const r = serve([...args, "--port", "0", "--backend", "reference"]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, message);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  }
});

test("serve CLI rejects bad --nats combinations and an unreachable NATS server with a one-line error and exit 2", () => {
  for (const [args, message] of [
    [["--nats", "127.0.0.1:4222", "--worker-addrs", "127.0.0.1:9001"], /--nats and --worker-addrs do not go together/],
    [["--nats", "127.0.0.1:4222", "--transport", "threads"], /--nats needs worker processes \(--transport tcp\), not --transport threads/],
    [["--nats", "127.0.0.1:4222", "--workers", "2"], /Flag --workers needs a fixed worker set; with --nats, workers join by themselves/],
    [["--nats", "127.0.0.1:4222", "--planner", "sla"], /--planner sla with --nats reads its offline profile from --sla-profile FILE: no worker is there to measure at start-up/],
    [["--cluster-name", "prod"], /Flag --cluster-name prod needs --nats/],
    [["--nats", "127.0.0.1:4222", "--cluster-name", "a.b"], /A cluster name must be 1-64 letters, digits, "_" or "-", got "a\.b"/],
    [["--nats", "127.0.0.1:9"], /Cannot reach the NATS server at "127\.0\.0\.1:9"/],
    [["--worker-token", "x"], /Flag --worker-token is for worker processes \(--transport tcp or --nats\)/],
  ] as const) {
    const r = serve([...args, "--port", "0", "--backend", "reference"]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, message);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  }
});

test("serve CLI rejects a malformed --lora-modules and an adapter file it cannot read, with a one-line error", () => {
  for (const [args, message] of [
    [["--lora-modules", "pirate"], /--lora-modules takes name=path pairs separated by commas, got "pirate"/],
    [["--lora-modules", "a=/x.gguf,a=/y.gguf"], /--lora-modules names "a" twice/],
  ] as const) {
    const r = serve([...args, "--port", "0", "--backend", "reference"]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, message);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  }
  const r = serve(["--lora-modules", `pirate=${projectRoot}/no-such-adapter.gguf`, "--port", "0", "--backend", "reference"]);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /--lora-modules "pirate": .*no-such-adapter\.gguf/);
});

test("serve CLI refuses a draft model it cannot read or whose vocabulary differs, with a one-line error and exit 2", () => {
  const dir = mkdtempSync(`${tmpdir()}/serve-draft-`);
  try {
    const spec: ModelFileSpec = { architecture: "llama", hidden: 64, layers: 1, heads: 2, kvHeads: 1, headDim: 32, ffn: 128, vocab: 300, tied: true, dtype: "f32", seed: 3 };
    writeFileSync(`${dir}/draft.gguf`, ggufBytes(spec, randomHfWeights(spec)));
    for (const [path, message] of [
      [`${dir}/draft.gguf`, /The draft model ".*draft\.gguf" and model ".*stories260K\.gguf" have different vocabularies: 300 and 512 tokens/],
      [`${dir}/none.gguf`, /The speculative draft model cannot be loaded: Model file not found: ".*none\.gguf"/],
    ] as const) {
      const r = serve(["--speculative-config", JSON.stringify({ model: path, num_speculative_tokens: 2 }), "--port", "0", "--backend", "reference"]);
      assert.equal(r.status, 2, r.stderr);
      assert.match(r.stderr, message);
      assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("serve CLI refuses a port in use, an empty --api-key or --served-model-name, a hex or oversized integer and a malformed --allowed-origins with a one-line error and exit 2", async () => {
  const { createServer } = await import("node:net");
  const holder = createServer();
  await new Promise<void>((r) => holder.listen(0, "127.0.0.1", r));
  const taken = (holder.address() as { port: number }).port;
  try {
    for (const [args, message] of [
      [["--port", String(taken), "--kv-blocks", "16"], new RegExp(`serve: Cannot listen on 127\\.0\\.0\\.1:${taken}: .*in use`, "i")],
      [["--port", "0", "--api-key="], /serve: Flag --api-key needs a non-empty value, got ""/],
      [["--port", "0", "--served-model-name", ""], /serve: Flag --served-model-name needs a non-empty value, got ""/],
      [["--port", "0x1F90"], /serve: Flag --port expects an integer, got "0x1F90"/],
      [["--port", "0", "--allowed-origins", "https://ok.example.com,chat.example.com/path"], /serve: Flag --allowed-origins: "chat.example.com\/path" is not an origin \(scheme:\/\/host\[:port\], no path\) or \*/],
      [["--port", "0", "--kv-blocks", "99999999999999999999"], /serve: Flag --kv-blocks must be at most 9007199254740991, got "99999999999999999999"/],
    ] as const) {
      const r = serve([...args, "--backend", "reference"]);
      assert.equal(r.status, 2, r.stderr);
      assert.match(r.stderr, message);
      assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
    }
  } finally {
    holder.close();
  }
});

test("serve CLI takes its API key from VLLM_API_KEY when --api-key is not given, as vLLM", async () => {
  const { child, url, stderr, exited } = await spawnServe("node", ["--port", "0", "--backend", "reference", "--kv-blocks", "16"], { VLLM_API_KEY: "sk-from-env" });
  try {
    assert.match(stderr(), /\(API key required, from VLLM_API_KEY\)/);
    // stories260K's GGUF names no chat template: auto (the default) reads Hermes calls.
    assert.match(stderr(), /; tool calls hermes \(auto, from the chat template\)/);
    assert.equal((await fetch(`${url}/v1/models`)).status, 401);
    assert.equal((await fetch(`${url}/v1/models`, { headers: { authorization: "Bearer sk-from-env" } })).status, 200);
  } finally {
    child.kill("SIGKILL");
    await exited;
  }
});

test("serve CLI prints vLLM's stats line every VLLM_LOG_STATS_INTERVAL seconds while it works, and none with --disable-log-stats; it warms up unless --no-warmup", async () => {
  const ask = (url: string) => fetch(`${url}/v1/completions`, {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "stories260K", prompt: "Once upon a time", max_tokens: 40, temperature: 0, ignore_eos: true }),
  }).then((r) => r.json());
  const line = /serve: Avg prompt throughput: [\d.]+ tokens\/s, Avg generation throughput: ([\d.]+) tokens\/s, Running: \d+ reqs, Waiting: \d+ reqs, KV cache usage: [\d.]+%, Prefix cache hit rate: [\d.]+%/g;
  for (const quiet of [false, true]) {
    const { child, url, stderr, exited } = await spawnServe("node", ["--port", "0", "--backend", "reference", "--kv-blocks", "16", ...(quiet ? ["--disable-log-stats", "--no-warmup"] : [])], { VLLM_LOG_STATS_INTERVAL: "0.2" });
    try {
      assert.equal(/, warmed up in \d+ ms;/.test(stderr()), !quiet, stderr());
      await new Promise((r) => setTimeout(r, 600));
      assert.equal([...stderr().matchAll(line)].length, 0, "an idle server prints none");
      await ask(url);
      await new Promise((r) => setTimeout(r, 600));
      const seen = [...stderr().matchAll(line)];
      if (quiet) assert.equal(seen.length, 0, stderr());
      else assert.ok(seen.some((m) => Number(m[1]) > 0), stderr());
    } finally {
      child.kill("SIGKILL");
      await exited;
    }
  }
  const bad = spawnSync("node", ["--import", `${projectRoot}/node_modules/tsx/dist/loader.mjs`, `${projectRoot}/src/cli/serve.ts`, "--port", "0", "--backend", "reference"], {
    cwd: projectRoot, encoding: "utf8", env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "", VLLM_LOG_STATS_INTERVAL: "soon" }, timeout: 120_000,
  });
  assert.equal(bad.status, 2, bad.stderr);
  assert.match(bad.stderr, /VLLM_LOG_STATS_INTERVAL must be a positive number of seconds, got "soon"/);
});

test("serve CLI with --workers 2 prints a stats line per worker that works, and its workers warm up", async () => {
  const { child, url, stderr, exited } = await spawnServe("node", ["--port", "0", "--backend", "reference", "--kv-blocks", "16", "--workers", "2"], { VLLM_LOG_STATS_INTERVAL: "0.2" });
  try {
    assert.match(stderr(), /, warmed up in \d+ ms;/);
    await fetch(`${url}/v1/completions`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "stories260K", prompt: "Once upon a time", max_tokens: 40, temperature: 0, ignore_eos: true }),
    }).then((r) => r.json());
    const line = /serve: Engine 00(\d) \(worker-\1, mixed\): Avg prompt throughput: [\d.]+ tokens\/s, Avg generation throughput: ([\d.]+) tokens\/s/g;
    await eventually(() => [...stderr().matchAll(line)], (seen) => seen.some((m) => Number(m[2]) > 0));
  } finally {
    child.kill("SIGKILL");
    await exited;
  }
});

test("serve CLI says how an FP8 checkpoint's matrices are held as they load", async () => {
  // o_proj's rows (heads × headDim = 48) are not whole 32-value blocks; the other six matrices' are.
  const spec: ModelFileSpec = { architecture: "llama", hidden: 64, layers: 1, heads: 4, kvHeads: 2, headDim: 12, ffn: 96, vocab: 300, tied: false, dtype: "f32", seed: 7 };
  const dir = mkdtempSync(`${tmpdir()}/serve-fp8-`);
  await writePair(spec, `${dir}/fp8`, `${dir}/ref`, randomHfWeights(spec), { quant_method: "fp8", weight_block_size: [32, 32] }, [32, 32]);
  const { child, stderr, exited } = await spawnServe("node", ["--model", `${dir}/fp8`, "--port", "0", "--backend", "reference", "--kv-blocks", "16"]);
  try {
    assert.match(stderr(), /serve: loading: the checkpoint holds 7 FP8 \(F8_E4M3\) matrices: 6 kept as f8_e4m3 \(their codes with an f32 scale per 32 values, 9 bits a weight\); 1 whose rows are not whole 32-value blocks dequantized to bf16\n/);
  } finally {
    child.kill("SIGKILL");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  }
});

test("serve CLI refuses an SLA profile measured on another model with a one-line error and exit 2", () => {
  const dir = mkdtempSync(`${tmpdir()}/serve-cli-`);
  try {
    const profile = `${dir}/other.json`;
    writeFileSync(profile, JSON.stringify({ modelFingerprint: "0123", profiledIsl: 64, profiledOsl: 16, prefill: [{ isl: 64, tokensPerS: 2000, ttftS: 0.03 }], decode: [{ context: 64, batch: 1, itlS: 0.01, tokensPerS: 100 }] }));
    const r = serve(["--workers", "2", "--planner", "sla", "--sla-profile", profile, "--port", "0", "--backend", "reference", "--kv-blocks", "16"]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /^serve: Profile ".*other\.json" was measured on another model \(modelFingerprint 0123, this model's [0-9a-f]{32}\)/);
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("serve CLI names a Qwen3.5's recurrent state (sequences, checkpoints, states kept before drafts, MiB) in its startup line, and runs two workers of it under the online planner", async () => {
  const dir = mkdtempSync(`${tmpdir()}/serve-qwen35-`);
  try {
    const spec: ModelFileSpec = {
      architecture: "qwen35", hidden: 32, layers: 4, heads: 4, kvHeads: 2, headDim: 16, rotaryDim: 4, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 401,
      deltaNet: { kHeads: 2, vHeads: 4, dim: 8, conv: 4, interval: 4 },
    };
    writeFileSync(`${dir}/q.gguf`, ggufBytes(spec, randomHfWeights(spec)));
    const { child, stderr, exited } = await spawnServe("node", ["--model", `${dir}/q.gguf`, "--port", "0", "--backend", "reference", "--kv-blocks", "16", "--max-num-seqs", "3", "--no-warmup"]);
    try {
      // 3 layers of 4 state matrices of 8 × 8 and 3 × 64 convolution inputs, f32: 5,376 bytes a sequence.
      assert.match(stderr(), /; recurrent state 3 sequences \+ 3 checkpoints \(0\.0 MiB\);/, stderr());
    } finally {
      child.kill("SIGKILL");
      await exited;
    }
    // With speculation, each sequence that may verify a draft keeps its state from before it (disable_by_batch_size 2 of 3).
    const speculation = JSON.stringify({ method: "ngram", num_speculative_tokens: 3, prompt_lookup_max: 3, prompt_lookup_min: 1, disable_by_batch_size: 2 });
    const drafting = await spawnServe("node", ["--model", `${dir}/q.gguf`, "--port", "0", "--backend", "reference", "--kv-blocks", "16", "--max-num-seqs", "3", "--no-warmup", "--speculative-config", speculation]);
    try {
      assert.match(drafting.stderr(), /; recurrent state 3 sequences \+ 3 checkpoints \+ 2 before drafts \(0\.0 MiB\);/, drafting.stderr());
    } finally {
      drafting.child.kill("SIGKILL");
      await drafting.exited;
    }
    // Two workers run the online planner, as any model's: hand-offs and pulls move a sequence's state checkpoint with its blocks.
    const two = await spawnServe("node", ["--model", `${dir}/q.gguf`, "--port", "0", "--backend", "reference", "--kv-blocks", "16", "--workers", "2", "--no-warmup"]);
    try {
      assert.match(two.stderr(), /; 2 workers \(mixed,mixed\), session router, planner online, in-process/, two.stderr());
    } finally {
      two.child.kill("SIGKILL");
      await two.exited;
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("serve CLI keeps only GPT-OSS's sliding windows with --sliding-window-kv window (and --state-checkpoints of them, rings sized by --long-prefill-token-threshold), names them in its startup line, answers the openai client, and refuses an unknown mode", async () => {
  const dir = mkdtempSync(`${tmpdir()}/serve-window-`);
  try {
    const spec: ModelFileSpec = {
      architecture: "gpt-oss", hidden: 32, layers: 3, heads: 4, kvHeads: 2, headDim: 8, ffn: 64, vocab: 300, tied: false, dtype: "f32", seed: 402,
      ropeTheta: 10000, slidingWindow: 5, experts: { count: 4, used: 2 },
    };
    writeFileSync(`${dir}/w.gguf`, ggufBytes(spec, randomHfWeights(spec)));
    const bad = serve(["--model", `${dir}/w.gguf`, "--sliding-window-kv", "ring", "--port", "0", "--backend", "reference"]);
    assert.equal(bad.status, 2, bad.stderr);
    assert.match(bad.stderr, /^serve: Unknown sliding window KV mode "ring"; choose paged or window/);
    const args = ["--model", `${dir}/w.gguf`, "--port", "0", "--backend", "reference", "--kv-blocks", "16", "--max-num-seqs", "2", "--max-batch-tokens", "16", "--no-warmup"];
    const zero = serve([...args, "--long-prefill-token-threshold", "0"]);
    assert.equal(zero.status, 2, zero.stderr);
    assert.match(zero.stderr, /--long-prefill-token-threshold/);
    const { child, url, stderr, exited } = await spawnServe("node", [...args, "--sliding-window-kv", "window", "--state-checkpoints", "5", "--host-state-checkpoints", "7", "--long-prefill-token-threshold", "12"]);
    try {
      // Two layers' rings of ⌈(12 + 5 − 1) / 16⌉ = 1 block of 16, 2 heads of 8, K and V in f16, for 2 sequences, and 5 checkpoints of 1 block.
      assert.match(stderr(), /; sliding windows of 2 sequences \+ 5 checkpoints, 7 more in host memory \(0\.0 MiB\);/, stderr());
      assert.match(stderr(), /, a sequence's step at most 12 tokens/, stderr());
      const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0 });
      const prompt = Array.from({ length: 40 }, (_, i) => (i * 7 + 3) % 290 + 5);
      const ask = () => client.completions.create({ model: "w", prompt, max_tokens: 6, temperature: 0 });
      const first = await ask();
      const again = await ask();
      assert.equal(again.choices[0].text, first.choices[0].text);
      assert.equal(first.usage?.completion_tokens, 6);
      // The second resumed from the checkpoint where the first prompt's whole blocks end.
      assert.equal(again.usage?.prompt_tokens_details?.cached_tokens, 32);
      // /metrics counts the resume and the checkpoints kept.
      const metrics = await (await fetch(`${url}/metrics`)).text();
      assert.match(metrics, /^evolving:state_checkpoint_resumes_total\{[^}]*\} 1$/m, metrics);
      assert.match(metrics, /^evolving:state_checkpoint_capacity\{[^}]*\} 5$/m);
      assert.match(metrics, /^evolving:host_state_capacity\{[^}]*\} 7$/m);
    } finally {
      child.kill("SIGKILL");
      await exited;
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("serve CLI --mmproj names the projector (and where image URLs are read) in its startup line and answers an image by file:// URL, and exits 2 naming a projector file that is not there or an image-URL flag without it", async () => {
  const { mkdtempSync, rmSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { writeMmproj } = await import("../model/vision-files.ts");
  const { encodePng } = await import("../../src/model/vision/png.ts");
  const dir = mkdtempSync(`${tmpdir()}/serve-mmproj-`);
  try {
    const mmproj = `${dir}/mmproj.gguf`;
    writeMmproj(mmproj, { lmHidden: 64, seed: 61, imageSize: 28, patchSize: 14 });
    const { child, url, stderr, exited } = await spawnServe("node", ["--port", "0", "--backend", "reference", "--kv-blocks", "16", "--mmproj", mmproj, "--allowed-local-media-path", dir]);
    try {
      const quoted = (t: string) => t.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
      assert.match(stderr(), new RegExp(`; images with the projector ${quoted(mmproj)} \\(and files under ${quoted(dir)}\\)`));
      const png = encodePng({ width: 4, height: 4, rgb: new Uint8Array(48).fill(200) });
      const { writeFileSync } = await import("node:fs");
      writeFileSync(`${dir}/shot.png`, png);
      const res = await fetch(`${url}/v1/chat/completions`, {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "stories260K", max_tokens: 3, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: `file://${dir}/shot.png` } }] }] }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      assert.ok(((await res.json()) as { usage: { prompt_tokens: number } }).usage.prompt_tokens >= 4);
    } finally {
      child.kill("SIGKILL");
      await exited;
    }
    const r = serve(["--port", "0", "--backend", "reference", "--mmproj", `${dir}/none.gguf`]);
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /serve: Projector file not found: ".*none\.gguf"/);
    const urls = serve(["--port", "0", "--backend", "reference", "--allowed-media-domains", "images.example.com"]);
    assert.equal(urls.status, 2, urls.stderr);
    assert.match(urls.stderr, /serve: Flag --allowed-media-domains says where image URLs are read from; it needs --mmproj/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
