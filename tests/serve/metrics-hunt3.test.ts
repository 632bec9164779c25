/**
 * GET /metrics as a Prometheus scraper and a vLLM Grafana dashboard see it: a strict parser of the
 * text format 0.0.4 checks the exposition, and real traffic (non-streamed, streamed, cancelled,
 * refused, a prefix-cache hit) checks that the counters and histograms say what happened.
 */
import assert from "node:assert/strict";
import { loadModel } from "../../src/model/load.ts";
import { startServer } from "../../src/serve/server.ts";
import { projectRoot, test } from "../harness.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const STORY = "Once upon a time there was a little girl named Lily. She loved to play outside in the park.";

interface Sample { name: string; labels: Record<string, string>; value: number }
interface Family { type: string; samples: Sample[] }

/** Reads a label set `{a="x",b="y"}` at `s[i]` (after the `{`); only \\, \" and \n escapes exist. */
function readLabels(s: string, i: number, line: string): [Record<string, string>, number] {
  const labels: Record<string, string> = {};
  while (s[i] !== "}") {
    const m = /^([a-zA-Z_][a-zA-Z0-9_]*)="/.exec(s.slice(i));
    assert.ok(m, `bad label name in ${JSON.stringify(line)}`);
    i += m[0].length;
    let v = "";
    for (; s[i] !== '"'; i++) {
      assert.ok(i < s.length && s[i] !== "\n", `unterminated label value in ${JSON.stringify(line)}`);
      if (s[i] !== "\\") v += s[i];
      else {
        const e = s[++i];
        assert.ok(e === "\\" || e === '"' || e === "n", `bad escape \\${e} in ${JSON.stringify(line)}`);
        v += e === "n" ? "\n" : e;
      }
    }
    assert.ok(!(m[1] in labels), `label ${m[1]} twice in ${JSON.stringify(line)}`);
    labels[m[1]] = v;
    i++;
    if (s[i] === ",") i++;
    else assert.equal(s[i], "}", `expected , or } in ${JSON.stringify(line)}`);
  }
  return [labels, i + 1];
}

/** A strict parser of Prometheus text format 0.0.4: throws on anything a scraper would reject or misread. */
function parseExposition(text: string): Map<string, Family> {
  assert.ok(text.endsWith("\n"), "the exposition ends with a newline");
  const families = new Map<string, Family>();
  const helped = new Set<string>();
  const seen = new Set<string>();
  let current: string | undefined;
  for (const line of text.slice(0, -1).split("\n")) {
    const meta = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/.exec(line);
    if (meta) {
      const [, kind, name, rest] = meta;
      if (kind === "HELP") {
        assert.ok(!helped.has(name), `HELP for ${name} twice`);
        helped.add(name);
      } else {
        assert.ok(!families.has(name), `TYPE for ${name} twice`);
        assert.ok(["counter", "gauge", "histogram", "summary", "untyped"].includes(rest), `bad type ${rest}`);
        if (rest === "counter") assert.match(name, /_total$/, `counter ${name} ends in _total`);
        families.set(name, { type: rest, samples: [] });
      }
      current = name;
      continue;
    }
    assert.ok(!line.startsWith("#") && line.trim() !== "", `unexpected line ${JSON.stringify(line)}`);
    const nm = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(line);
    assert.ok(nm, `bad sample line ${JSON.stringify(line)}`);
    const name = nm[0];
    let i = name.length;
    let labels: Record<string, string> = {};
    if (line[i] === "{") [labels, i] = readLabels(line, i + 1, line);
    const value = / ([^ ]+)$/.exec(line.slice(i));
    assert.ok(value && value.index === 0, `bad value in ${JSON.stringify(line)}`);
    const v = value[1] === "+Inf" ? Infinity : value[1] === "-Inf" ? -Infinity : Number(value[1]);
    assert.ok(value[1] === "NaN" || !Number.isNaN(v), `bad number ${value[1]}`);
    // The sample belongs to the family whose TYPE came last (families are contiguous).
    assert.ok(current !== undefined, `sample ${name} before any TYPE`);
    const fam = families.get(current)!;
    const suffixes = fam.type === "histogram" ? ["_bucket", "_sum", "_count"] : [""];
    assert.ok(suffixes.some((x) => name === current + x), `sample ${name} is not of the family ${current} (${fam.type})`);
    if (name.endsWith("_bucket")) assert.ok("le" in labels, `${name} has le`);
    else assert.ok(!("le" in labels), `${name} has no le`);
    const key = name + JSON.stringify(Object.entries(labels).sort());
    assert.ok(!seen.has(key), `duplicate series ${key}`);
    seen.add(key);
    fam.samples.push({ name, labels, value: v });
  }
  for (const [name, fam] of families) {
    assert.ok(helped.has(name), `${name} has HELP`);
    if (fam.type !== "histogram") continue;
    const series = new Map<string, Sample[]>();
    for (const s of fam.samples) {
      const { le: _le, ...rest } = s.labels;
      const k = JSON.stringify(Object.entries(rest).sort());
      series.set(k, [...(series.get(k) ?? []), s]);
    }
    for (const [k, ss] of series) {
      const buckets = ss.filter((s) => s.name.endsWith("_bucket"));
      const les = buckets.map((b) => (b.labels.le === "+Inf" ? Infinity : Number(b.labels.le)));
      assert.ok(les.length > 0 && les.at(-1) === Infinity, `${name}${k} ends in le="+Inf"`);
      les.forEach((le, j) => j > 0 && assert.ok(le > les[j - 1], `${name}${k} buckets ascend`));
      buckets.forEach((b, j) => j > 0 && assert.ok(b.value >= buckets[j - 1].value, `${name}${k} buckets are cumulative`));
      const count = ss.find((s) => s.name.endsWith("_count"));
      assert.ok(count && ss.some((s) => s.name.endsWith("_sum")), `${name}${k} has _sum and _count`);
      assert.equal(count.value, buckets.at(-1)!.value, `${name}${k}: _count equals the +Inf bucket`);
    }
  }
  return families;
}

/** The value of one series (labels matched as given, others ignored); summed over the matches. */
function val(fams: Map<string, Family>, sample: string, labels: Record<string, string> = {}): number {
  const fam = [...fams.values()].find((f) => f.samples.some((s) => s.name === sample));
  const hits = fam?.samples.filter((s) => s.name === sample && Object.entries(labels).every(([k, v]) => s.labels[k] === v)) ?? [];
  assert.ok(hits.length > 0, `no series ${sample}${JSON.stringify(labels)}`);
  return hits.reduce((a, s) => a + s.value, 0);
}

async function scrape(url: string): Promise<Map<string, Family>> {
  const res = await fetch(`${url}/metrics`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4(; charset=utf-8)?$/);
  return parseExposition(await res.text());
}

type Usage = { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };

/** Real traffic: two non-streamed (the second a prefix hit), one streamed, one cancelled, one refused. */
async function traffic(url: string, name: string) {
  const post = (path: string, body: unknown, signal?: AbortSignal) =>
    fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: name, ...body as object }), signal });
  const usages: Usage[] = [];
  const reasons: string[] = [];
  for (const max_tokens of [4, 12]) {
    const r = await (await post("/v1/completions", { prompt: STORY, max_tokens, temperature: 0 })).json() as { usage: Usage; choices: { finish_reason: string }[] };
    usages.push(r.usage);
    reasons.push(r.choices[0].finish_reason);
  }
  const streamed = await (await post("/v1/chat/completions", { messages: [{ role: "user", content: "Tell a story." }], max_tokens: 6, temperature: 0, stream: true, stream_options: { include_usage: true } })).text();
  for (const line of streamed.split("\n")) {
    if (!line.startsWith("data: {")) continue;
    const c = JSON.parse(line.slice(6)) as { usage?: Usage; choices: { finish_reason: string | null }[] };
    if (c.usage) usages.push(c.usage);
    if (c.choices[0]?.finish_reason) reasons.push(c.choices[0].finish_reason);
  }
  const cancelPrompt = "Tom had a big dog.";
  const ac = new AbortController();
  const res = await post("/v1/completions", { prompt: cancelPrompt, max_tokens: 200, ignore_eos: true, stream: true }, ac.signal);
  const reader = res.body!.getReader();
  await reader.read();
  ac.abort();
  await reader.cancel().catch(() => {});
  const bad = await post("/v1/completions", { prompt: "x".repeat(5000), max_tokens: 5 });
  assert.equal(bad.status, 400, "a prompt over the context is refused");
  const cancelPromptTokens = ((await (await post("/tokenize", { prompt: cancelPrompt })).json()) as { count: number }).count;
  return { usages, reasons, cancelPromptTokens };
}

/** Polls /metrics until the cancelled request has ended (nothing running or waiting). */
async function settled(url: string): Promise<Map<string, Family>> {
  // The deadline only turns a hang into a failure: generous, as a loaded CI machine is slow.
  const deadline = Date.now() + 60_000;
  for (;;) {
    const f = await scrape(url);
    if (val(f, "vllm:num_requests_running") + val(f, "vllm:num_requests_waiting") === 0 && val(f, "vllm:e2e_request_latency_seconds_count") === 4) return f;
    assert.ok(Date.now() < deadline, "the cancelled request ends");
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** What every check of a server's figures after `traffic` shares (one engine or a cluster). */
function checkFigures(f: Map<string, Family>, t: Awaited<ReturnType<typeof traffic>>): void {
  const sum = (g: (u: Usage) => number) => t.usages.reduce((a, u) => a + g(u), 0);
  assert.equal(t.usages.length, 3);
  // vLLM declares every finish reason's series from the start: increase() sees the first one.
  for (const r of ["stop", "length", "abort"]) assert.equal(val(f, "vllm:request_success_total", { finished_reason: r }), r === "abort" ? 1 : t.reasons.filter((x) => x === r).length, r);
  const prompt = sum((u) => u.prompt_tokens) + t.cancelPromptTokens;
  assert.equal(val(f, "vllm:prompt_tokens_total"), prompt, "the refused request counts no tokens");
  const gen = val(f, "vllm:generation_tokens_total");
  assert.ok(gen > sum((u) => u.completion_tokens), "the cancelled request generated tokens before it ended");
  assert.equal(val(f, "vllm:prefix_cache_hits_total"), sum((u) => u.prompt_tokens_details?.cached_tokens ?? 0));
  assert.ok(val(f, "vllm:prefix_cache_hits_total") > 0, "the second turn hit the prefix cache");
  assert.equal(val(f, "vllm:prefix_cache_queries_total"), prompt);
  // Four requests produced tokens and ended (the refused one never started).
  assert.equal(val(f, "vllm:time_to_first_token_seconds_count"), 4);
  assert.equal(val(f, "vllm:e2e_request_latency_seconds_count"), 4);
  assert.equal(val(f, "vllm:inter_token_latency_seconds_count"), gen - 4, "one inter-token gap per token after each request's first");
  // The per-request histograms a vLLM dashboard's heatmaps read, consistent with the counters.
  assert.equal(val(f, "vllm:request_prompt_tokens_count"), 4);
  assert.equal(val(f, "vllm:request_prompt_tokens_sum"), prompt);
  assert.equal(val(f, "vllm:request_generation_tokens_count"), 4);
  assert.equal(val(f, "vllm:request_generation_tokens_sum"), gen);
  const short = [...t.usages.map((u) => u.prompt_tokens), t.cancelPromptTokens].filter((n) => n <= 20).length;
  assert.ok(short > 0 && short < 4);
  assert.equal(val(f, "vllm:request_prompt_tokens_bucket", { le: "20" }), short, "the prompts of 20 tokens or fewer");
  assert.equal(val(f, "vllm:request_decode_time_seconds_count"), 4);
  assert.ok(val(f, "vllm:request_decode_time_seconds_sum") <= val(f, "vllm:e2e_request_latency_seconds_sum"));
  assert.ok(val(f, "vllm:request_decode_time_seconds_sum") > 0);
}

test("GET /metrics is strict Prometheus text 0.0.4, with a served name holding a quote, a backslash and a newline escaped", async () => {
  const name = 'we"ird\\name\nx';
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, servedModelName: name });
  try {
    const f = await scrape(s.url);
    assert.equal(f.get("vllm:num_requests_running")!.samples[0].labels.model_name, name);
    // vLLM's buckets (vllm/v1/metrics/loggers.py), to the last: dashboards' quantiles read the same ranges.
    const les = (n: string) => f.get(n)!.samples.filter((x) => x.name === `${n}_bucket`).map((x) => x.labels.le);
    assert.deepEqual(les("vllm:time_to_first_token_seconds").slice(-4), ["80", "160", "640", "2560", "+Inf"].slice(-4));
    assert.deepEqual(les("vllm:e2e_request_latency_seconds").slice(-3), ["1920", "7680", "+Inf"]);
    assert.deepEqual(les("vllm:request_prompt_tokens").slice(0, 4), ["1", "2", "5", "10"]);
    assert.equal(Number(les("vllm:request_prompt_tokens").at(-2)), 1000, "1-2-5 buckets up to the context (64 blocks of 16 tokens: 1024)");
  } finally {
    await s.shutdown();
  }
});

test("after real traffic, one engine's /metrics counts what happened (streamed, non-streamed, cancelled, refused, prefix hit)", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64 });
  try {
    const t = await traffic(s.url, "stories260K");
    checkFigures(await settled(s.url), t);
  } finally {
    await s.shutdown();
  }
});

test("a two-worker server's /metrics: cluster-wide vLLM figures from real traffic, per-worker series that add up to them", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", kvBlocks: 64, workers: 2 });
  try {
    // Both workers warmed up before the server listened (startServer's default), counting nothing in the figures below.
    assert.equal(typeof s.warmUpMs, "number");
    const t = await traffic(s.url, "stories260K");
    const f = await settled(s.url);
    checkFigures(f, t);
    const workers = f.get("evolving:worker_up")!.samples.map((x) => x.labels.worker);
    assert.deepEqual(workers, ["worker-0", "worker-1"]);
    // Mid-flight: the per-worker gauges add up to the cluster's.
    const post = () => fetch(`${s.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "stories260K", prompt: STORY, max_tokens: 60, ignore_eos: true }) });
    const inflight = [post(), post(), post()];
    await new Promise((r) => setTimeout(r, 30));
    const mid = await scrape(s.url);
    assert.equal(val(mid, "evolving:worker_requests_running") + val(mid, "evolving:worker_requests_waiting"), val(mid, "vllm:num_requests_running") + val(mid, "vllm:num_requests_waiting"));
    assert.equal(val(mid, "evolving:worker_requests_running"), val(mid, "vllm:num_requests_running"));
    await Promise.all(inflight.map(async (p) => (await p).text()));
    const end = await scrape(s.url);
    assert.equal(val(end, "vllm:request_success_total", { finished_reason: "length" }), t.reasons.filter((x) => x === "length").length + 3);
    assert.equal(val(end, "vllm:request_generation_tokens_sum"), val(end, "vllm:generation_tokens_total"));
  } finally {
    await s.shutdown();
  }
});
