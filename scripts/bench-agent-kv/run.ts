/**
 * One bench-agent-kv run: the serve CLI as a subprocess (reference backend, a small KV pool, one
 * retention policy), and every session of the workload played against it concurrently through the
 * `openai` client, streamed: through chat completions, each turn resending the whole conversation
 * with the tool's result under the session's `prompt_cache_key` (or under none), or through the Responses API, each
 * turn sending only the tool's result (or the user's message) with `previous_response_id` and no key.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";
import type { KvRetention } from "../../src/engine/engine-sessions.ts";
import { AGENT_TOOLS, ENDING, FAST_TOOL, SLOW_TOOL } from "./agent-model.ts";
import { type SessionPlan, SYSTEM_PROMPT, type TurnLabel } from "./workload.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const BLOCK = 16;
/** The served model name. */
const MODEL_NAME = "agent-scripted";

/** What one request measured. */
export interface TurnRecord {
  session: string;
  label: TurnLabel;
  promptTokens: number;
  cachedTokens: number;
  /** Prompt tokens the previous turn of the session had already computed (whole blocks); 0 on a first turn. */
  reusableTokens: number;
  /** From the first try: a turn the server refused (503) is tried again after its Retry-After, and waits count. */
  ttftMs: number;
  e2eMs: number;
  /** How many times the server refused this turn with 503 (its front door, `--itl-admission-ms`) before taking it. */
  refusals: number;
}

/** A run's requests, the server's preemption count and CPU time. */
export interface RunResult {
  turns: TurnRecord[];
  preemptions: number;
  wallS: number;
  /** CPU seconds the server process used while the workload ran (Linux /proc; NaN elsewhere): work done, less noisy than latency. */
  serverCpuS: number;
  /** Each worker's role when the workload ended, "(parked)" after those the SLA planner left out; empty for one engine. */
  rolesAtEnd: string;
  /** A cluster's prefill hand-offs, prefix pulls, KV blocks moved, role flips and step-mixing switches over the run, and whether it ended on split steps. */
  clusterMoves: { handoffs: number; prefixMoves: number; movedBlocks: number; flips: number; mixingChanges: number; split: boolean };
}

/** User + system CPU seconds of process `pid` from /proc/PID/stat (100 ticks per second). */
function cpuSeconds(pid: number | undefined): number {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
}

/** Starts `serve` on a free port; resolves with its URL once it listens. */
function startServe(modelPath: string, kvBlocks: number, kvRetention: KvRetention, serveArgs: readonly string[]): Promise<{ url: string; child: ChildProcess }> {
  const args = ["--import", "tsx", "src/cli/serve.ts", "--model", modelPath, "--backend", "reference", "--port", "0",
    "--served-model-name", MODEL_NAME, "--kv-blocks", String(kvBlocks), "--kv-retention", kvRetention, ...serveArgs];
  const child = spawn(process.execPath, args, { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  return new Promise((resolve, reject) => {
    child.stderr!.on("data", (d: Buffer) => {
      log += d.toString();
      const m = /listening on (\S+)/.exec(log);
      if (m) resolve({ url: m[1], child });
    });
    child.on("exit", (code) => reject(new Error(`serve exited with code ${code} before listening:\n${log}`)));
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** Refusals of one turn after which the run fails (each waits its Retry-After, 1 s: about five minutes). */
const MAX_REFUSALS = 300;

/**
 * Sends a turn until the server takes it: a 503 (the cluster's front door turning a new session away) is
 * counted in `refused.n` and sent again after its Retry-After, as a client honouring it would. A turn
 * refused `MAX_REFUSALS` times (a door shut for minutes: a planner bug, not a measurement) fails the run.
 */
async function untilTaken<T>(send: () => Promise<T>, refused: { n: number }): Promise<T> {
  for (;;) {
    try {
      return await send();
    } catch (e) {
      if (!(e instanceof OpenAI.APIError) || e.status !== 503) throw e;
      if (++refused.n >= MAX_REFUSALS) throw new Error(`A turn was refused ${refused.n} times in a row (503: ${e.message}); the front door seems shut for good`);
      await sleep(1000 * Number(e.headers?.get("retry-after") ?? 1));
    }
  }
}
const expectedTool = (text: string) => ({ [ENDING.fast]: FAST_TOOL, [ENDING.slow]: SLOW_TOOL })[text.slice(-1)];

/** Which API the sessions speak: chat completions under a session key, chat completions naming no session, or Responses. */
export type AgentApi = "chat" | "chat-keyless" | "responses";

const RESPONSES_TOOLS: OpenAI.Responses.FunctionTool[] = [FAST_TOOL, SLOW_TOOL].map((name) => ({ type: "function", name, parameters: { type: "object", properties: {} }, strict: false }));

/** Plays one session over the Responses API, each turn continuing the last by `previous_response_id`. */
async function playResponsesSession(client: OpenAI, model: string, plan: SessionPlan, out: TurnRecord[]): Promise<void> {
  let previous: string | undefined;
  let callId = "";
  let prev = 0;
  for (const step of plan.steps) {
    await sleep(step.delayMs);
    const input: OpenAI.Responses.ResponseInputItem[] = step.role === "tool" ? [{ type: "function_call_output", call_id: callId, output: step.text }] : [{ role: "user", content: step.text }];
    const t0 = performance.now();
    let ttft = NaN;
    const refused = { n: 0 };
    // Instructions do not carry over to a continued turn: sent each time, as Codex does.
    const stream = await untilTaken(() => client.responses.create({
      model, input, instructions: SYSTEM_PROMPT, tools: RESPONSES_TOOLS, temperature: 0, max_output_tokens: 16, stream: true,
      ...(previous ? { previous_response_id: previous } : {}),
    }), refused);
    let done: OpenAI.Responses.Response | undefined;
    for await (const e of stream) {
      if (e.type === "response.output_text.delta" || (e.type === "response.output_item.added" && e.item.type === "function_call")) ttft = Number.isNaN(ttft) ? performance.now() - t0 : ttft;
      if (e.type === "response.completed") done = e.response;
    }
    if (!done) throw new Error(`${plan.id}: the response stream ended without response.completed`);
    const r = done;
    const e2e = performance.now() - t0;
    const calls = r.output.flatMap((o) => (o.type === "function_call" ? [o] : []));
    const want = expectedTool(step.text);
    if (calls[0]?.name !== want || !r.usage) throw new Error(`${plan.id}: expected ${want ? `a call to ${want}` : "a final answer"}, got ${JSON.stringify(r.output)}`);
    const u = r.usage;
    out.push({ session: plan.id, label: step.label, promptTokens: u.input_tokens, cachedTokens: u.input_tokens_details.cached_tokens, reusableTokens: prev, ttftMs: ttft, e2eMs: e2e, refusals: refused.n });
    prev = Math.floor((u.input_tokens + u.output_tokens - 1) / BLOCK) * BLOCK;
    previous = r.id;
    callId = calls[0]?.call_id ?? "";
  }
}

/**
 * Plays one session turn by turn over chat completions, under its `prompt_cache_key` when `keyed` (else
 * naming no session: the server infers it); throws when the model does not answer as scripted.
 */
async function playSession(client: OpenAI, model: string, plan: SessionPlan, out: TurnRecord[], keyed = true): Promise<void> {
  const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "system", content: SYSTEM_PROMPT }];
  let callId = "";
  let prev = 0;
  for (const step of plan.steps) {
    await sleep(step.delayMs);
    messages.push(step.role === "tool" ? { role: "tool", tool_call_id: callId, content: step.text } : { role: "user", content: step.text });
    const t0 = performance.now();
    let ttft = NaN;
    let content = "";
    const calls: OpenAI.ChatCompletionMessageFunctionToolCall[] = [];
    let usage: OpenAI.CompletionUsage | undefined;
    const refused = { n: 0 };
    const stream = await untilTaken(() => client.chat.completions.create({
      model, messages, tools: AGENT_TOOLS, temperature: 0, max_tokens: 16, ...(keyed ? { prompt_cache_key: plan.id } : {}),
      stream: true, stream_options: { include_usage: true },
    }), refused);
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta;
      if (d?.content || d?.tool_calls?.length) ttft = Number.isNaN(ttft) ? performance.now() - t0 : ttft;
      content += d?.content ?? "";
      for (const c of d?.tool_calls ?? []) calls.push({ id: c.id!, type: "function", function: { name: c.function!.name!, arguments: c.function!.arguments! } });
      usage = chunk.usage ?? usage;
    }
    const e2e = performance.now() - t0;
    const want = expectedTool(step.text);
    if (calls[0]?.function.name !== want || usage === undefined) {
      throw new Error(`${plan.id}: expected ${want ? `a call to ${want}` : "a final answer"}, got ${JSON.stringify({ content, calls, usage })}`);
    }
    const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
    out.push({ session: plan.id, label: step.label, promptTokens: usage.prompt_tokens, cachedTokens: cached, reusableTokens: prev, ttftMs: ttft, e2eMs: e2e, refusals: refused.n });
    // The next prompt resends this prompt and the answer (EOS excepted); only whole blocks can be cached.
    prev = Math.floor((usage.prompt_tokens + usage.completion_tokens - 1) / BLOCK) * BLOCK;
    messages.push(calls.length > 0 ? { role: "assistant", content: content || null, tool_calls: calls } : { role: "assistant", content });
    callId = calls[0]?.id ?? "";
  }
}

/** Runs the whole workload once against a fresh server with `kvRetention`. */
export async function runOnce(modelPath: string, kvBlocks: number, kvRetention: KvRetention, plans: SessionPlan[], serveArgs: readonly string[] = [], api: AgentApi = "chat"): Promise<RunResult> {
  const { url, child } = await startServe(modelPath, kvBlocks, kvRetention, serveArgs);
  try {
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0, timeout: 600_000 });
    const turns: TurnRecord[] = [];
    // CPU from here on: the start-up (model load, an SLA planner's profiling sweep) is not the workload's.
    const cpu0 = cpuSeconds(child.pid);
    const t0 = performance.now();
    const play = (p: SessionPlan) => api === "responses" ? playResponsesSession(client, MODEL_NAME, p, turns) : playSession(client, MODEL_NAME, p, turns, api === "chat");
    await Promise.all(plans.map(play));
    const wallS = (performance.now() - t0) / 1000;
    const metrics = await (await fetch(`${url}/metrics`)).text();
    /** A metric's value by its full name (`missing` when the server does not print it). */
    const value = (name: string, missing: number) => Number(new RegExp(`^${name}\\S* (\\S+)$`, "m").exec(metrics)?.[1] ?? missing);
    const preemptions = value("vllm:num_preemptions_total", NaN);
    // Where the workers ended: their roles, and which the SLA planner's replica targets parked.
    const roles = [...metrics.matchAll(/^evolving:worker_role\{[^}]*worker="([^"]+)",role="(\w+)"\} 1$/gm)].map((m) => ({ id: m[1], role: m[2] }));
    const parked = new Set([...metrics.matchAll(/^evolving:worker_parked\{[^}]*worker="([^"]+)"\} 1$/gm)].map((m) => m[1]));
    const rolesAtEnd = roles.map((r) => `${r.role}${parked.has(r.id) ? " (parked)" : ""}`).join(",");
    // What the cluster moved and changed: KV hand-offs and pulls cost work a single engine never does.
    const counter = (name: string) => value(`evolving:${name}`, 0);
    const clusterMoves = { handoffs: counter("prefill_handoffs_total"), prefixMoves: counter("prefix_moves_total"), movedBlocks: counter("moved_kv_blocks_total"), flips: counter("role_flips_total"),
      mixingChanges: counter("step_mixing_changes_total"), split: /^evolving:step_mixing\{[^}]*mode="split"\} 1$/m.test(metrics) };
    return { turns, preemptions, wallS, serverCpuS: cpuSeconds(child.pid) - cpu0, rolesAtEnd, clusterMoves };
  } finally {
    child.removeAllListeners("exit");
    child.kill("SIGTERM");
    await new Promise((r) => (child.exitCode !== null ? r(null) : child.once("exit", r)));
  }
}
