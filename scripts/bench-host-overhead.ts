/**
 * Host-side CPU cost per generated token of the serving path: the engine (scheduler, sampling rows,
 * detokenization, stop-string search) and, separately, the HTTP server streaming to the real `openai`
 * client (SSE encoding, JSON building, metrics on top). The model's forward is a stub that answers
 * instantly with a fixed token cycle (the argmax of fixed logits), so only host work is timed.
 *
 *   npx tsx scripts/bench-host-overhead.ts                      # engine + http, 1/8/64 streams
 *   npx tsx scripts/bench-host-overhead.ts --mode engine --concurrency 8 --tokens 256 --runs 5
 *   node --cpu-prof --cpu-prof-dir=/tmp/prof --import tsx scripts/bench-host-overhead.ts --mode http --concurrency 64
 *   npx deno run -A scripts/bench-host-overhead.ts
 *   npx tsx scripts/bench-host-overhead.ts --grammar             # every request under a JSON-schema output grammar
 *   npx tsx scripts/bench-host-overhead.ts --prompt-tokens 4096  # long contexts: the prompt repeated to about 4096 tokens
 *
 * Reports, per mode and concurrency, the median over runs (after one warm-up run) of wall µs and
 * process CPU µs (user + system, `process.cpuUsage`) per generated token.
 */
import process from "node:process";
import OpenAI from "openai";
import { Engine } from "../src/engine/engine.ts";
import type { StepRunner } from "../src/engine/engine-runner.ts";
import { loadModel } from "../src/model/load.ts";
import type { LoadedModel } from "../src/model/config.ts";
import { createApp } from "../src/serve/app.ts";
import { listen } from "../src/serve/listen.ts";
import { cliArgs } from "../src/runtime/env.ts";

const PROMPT_TEXT = "Once upon a time there was a little girl named Lily. She loved to play outside in the park.";
const CYCLE_TEXT = " One day, Lily saw a big red ball in the tall green grass. She ran to it and said, \"Look, Mom!\" Her mom smiled.";
/** A stop string that never appears, so every request runs the stop search to its full length. */
const NEVER = "<<never stop>>";

interface Options {
  modes: ("engine" | "http")[];
  concurrency: number[];
  tokens: number;
  runs: number;
  json: boolean;
  /** Constrain every request to a JSON array of strings (an output grammar: a token mask per token). */
  grammar: boolean;
  /** Repeat the prompt to at least this many tokens (0: the plain prompt, 22 tokens); every request has the same one. */
  promptTokens: number;
}

function parseArgs(argv: readonly string[]): Options {
  const o: Options = { modes: ["engine", "http"], concurrency: [1, 8, 64], tokens: 256, runs: 5, json: false, grammar: false, promptTokens: 0 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = argv[i + 1];
    if (a === "--mode") (o.modes = v.split(",") as Options["modes"]), i++;
    else if (a === "--concurrency") (o.concurrency = v.split(",").map(Number)), i++;
    else if (a === "--tokens") (o.tokens = Number(v)), i++;
    else if (a === "--runs") (o.runs = Number(v)), i++;
    else if (a === "--json") o.json = true;
    else if (a === "--grammar") o.grammar = true;
    else if (a === "--prompt-tokens") (o.promptTokens = Number(v)), i++;
    else throw new RangeError(`Unknown argument "${a}"`);
  }
  return o;
}

/**
 * A runner whose forward costs nothing: each sampling entry gets the next token of a fixed cycle
 * (under a grammar's mask, the next one of the cycle it allows, else the lowest id it allows).
 */
function stubRunner(cycle: readonly number[], numBlocks: number): StepRunner {
  let k = 0;
  return {
    numBlocks,
    blockSize: 16,
    run(entries, _rows, extras) {
      const ids = new Int32Array(entries.length);
      for (let i = 0; i < entries.length; i++) {
        const mask = extras?.masks?.[i];
        let id = cycle[k++ % cycle.length];
        for (let j = 0; mask && !mask.allows(id) && j < cycle.length; j++) id = cycle[k++ % cycle.length];
        if (mask && !mask.allows(id)) for (id = 0; id < mask.vocabSize - 1 && !mask.allows(id); id++);
        ids[i] = id;
      }
      return Promise.resolve({ ids });
    },
    close() {},
  };
}

/** Room for 64 streams of `contextTokens` each (at least 40 blocks of 16 each, as before long prompts). */
function newEngine(model: LoadedModel, cycle: readonly number[], contextTokens: number): Engine {
  const numBlocks = 64 * Math.max(40, Math.ceil(contextTokens / 16) + 1) + 1;
  // The stub runs no model: a context past the model's own (stories260K's 512) costs nothing but host work.
  const config = { ...model.config, contextLength: Math.max(model.config.contextLength, contextTokens) };
  return new Engine({ runner: stubRunner(cycle, numBlocks), config, tokenizer: model.tokenizer, scheduler: { maxRunning: 64, maxBatchTokens: 8192 } });
}

interface Sample {
  wallUs: number;
  cpuUs: number;
  tokens: number;
}

async function timed(fn: () => Promise<number>): Promise<Sample> {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const tokens = await fn();
  const wallUs = (performance.now() - t0) * 1000;
  const c = process.cpuUsage(c0);
  return { wallUs: wallUs / tokens, cpuUs: (c.user + c.system) / tokens, tokens };
}

const ARRAY_OF_STRINGS = { type: "array", items: { type: "string" } };

async function engineRun(e: Engine, prompt: number[], n: number, tokens: number, grammar: boolean): Promise<number> {
  const one = async () => {
    const h = e.submit({
      prompt, maxTokens: tokens, temperature: 0.8, topP: 0.95, ignoreEos: true, stop: [NEVER], ...(grammar ? { grammar: { kind: "json" as const, schema: ARRAY_OF_STRINGS } } : {}),
    });
    let chars = 0;
    for await (const d of h.stream) chars += d.text.length;
    const r = await h.result;
    // A grammar may end its value early: count what was generated.
    if ((!grammar && r.completionTokens !== tokens) || chars === 0) throw new Error(`A request generated ${r.completionTokens} tokens, not ${tokens}`);
    return r.completionTokens;
  };
  const counts = await Promise.all(Array.from({ length: n }, one));
  return counts.reduce((a, b) => a + b, 0);
}

async function httpRun(client: OpenAI, n: number, tokens: number, grammar: boolean, content: string): Promise<number> {
  const one = async () => {
    const body = {
      model: "stories260K", messages: [{ role: "user" as const, content }], max_tokens: tokens, temperature: 0.8, top_p: 0.95,
      stop: [NEVER], stream: true as const, stream_options: { include_usage: true }, ignore_eos: true,
      ...(grammar ? { response_format: { type: "json_schema" as const, json_schema: { name: "strings", schema: ARRAY_OF_STRINGS } } } : {}),
    };
    const stream = await client.chat.completions.create(body);
    let used = 0;
    for await (const c of stream) used = c.usage?.completion_tokens ?? used;
    if (!grammar && used !== tokens) throw new Error(`A request reported ${used} completion tokens, not ${tokens}`);
    return used;
  };
  const counts = await Promise.all(Array.from({ length: n }, one));
  return counts.reduce((a, b) => a + b, 0);
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function main(): Promise<void> {
  const o = parseArgs(cliArgs());
  const model = await loadModel(new URL("../models/stories260K.gguf", import.meta.url).pathname);
  const once = model.tokenizer.encode(PROMPT_TEXT);
  const copies = Math.max(1, Math.ceil(o.promptTokens / once.length));
  const prompt = [1, ...Array.from({ length: copies }, () => once).flat()];
  const content = Array.from({ length: copies }, () => PROMPT_TEXT).join(" ");
  const cycle = model.tokenizer.encode(CYCLE_TEXT);
  const rows: { mode: string; concurrency: number; wallUs: number; cpuUs: number; runs: number[] }[] = [];
  for (const mode of o.modes) {
    for (const n of o.concurrency) {
      const engine = newEngine(model, cycle, prompt.length + o.tokens + 64);
      let close = async () => {};
      let run: () => Promise<number>;
      if (mode === "engine") run = () => engineRun(engine, prompt, n, o.tokens, o.grammar);
      else {
        const app = createApp({ engine, model, modelName: "stories260K" });
        const l = await listen(app.fetch, "127.0.0.1", 0);
        close = () => l.close();
        const client = new OpenAI({ baseURL: `http://127.0.0.1:${l.port}/v1`, apiKey: "none", maxRetries: 0 });
        run = () => httpRun(client, n, o.tokens, o.grammar, content);
      }
      try {
        await run(); // warm-up
        const samples: Sample[] = [];
        for (let r = 0; r < o.runs; r++) samples.push(await timed(run));
        const row = { mode, concurrency: n, wallUs: median(samples.map((s) => s.wallUs)), cpuUs: median(samples.map((s) => s.cpuUs)), runs: samples.map((s) => Math.round(s.cpuUs)) };
        rows.push(row);
        console.error(`${mode} c=${n}: median ${row.wallUs.toFixed(1)} wall µs/token, ${row.cpuUs.toFixed(1)} CPU µs/token (CPU per run: ${row.runs.join(", ")})`);
      } finally {
        await close();
        await engine.stop();
      }
    }
  }
  if (o.json) console.log(JSON.stringify(rows, null, 2));
  else {
    console.log("| mode | streams | wall µs/token | CPU µs/token |\n|---|---:|---:|---:|");
    for (const r of rows) console.log(`| ${r.mode} | ${r.concurrency} | ${r.wallUs.toFixed(1)} | ${r.cpuUs.toFixed(1)} |`);
  }
}

await main();
