/**
 * Prometheus text exposition of the engine's metrics, with vLLM's metric names (so dashboards
 * built for vLLM read ours) plus a few of our own in the same style.
 */
import type { ServingEngine } from "../engine/engine-types.ts";
import type { Histogram } from "../engine/engine-metrics.ts";
import { isClusterFront } from "../cluster/cluster-front.ts";
import { MAX_LORA_ADAPTERS } from "../engine/engine-adapters.ts";

function esc(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/** Renders all metrics for GET /metrics. */
export function renderMetrics(engine: ServingEngine, modelName: string): string {
  const s = engine.stats();
  const m = engine.metrics;
  const label = `model_name="${esc(modelName)}"`;
  const out: string[] = [];
  const metric = (name: string, type: string, help: string, lines: string[]) => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, ...lines);
  };
  const simple = (name: string, type: string, help: string, v: number) => metric(name, type, help, [`${name}{${label}} ${v}`]);
  // `upTo`: only bounds up to it are shown (token counts: vLLM's stop at the context length). The
  // bounds ascend, so those kept are a prefix and keep their counts' indices.
  const hist = (name: string, help: string, h: Histogram, upTo = Infinity) =>
    metric(name, "histogram", help, [
      ...h.bounds.filter((b) => b <= upTo).map((b, i) => `${name}_bucket{${label},le="${b}"} ${h.counts[i]}`),
      `${name}_bucket{${label},le="+Inf"} ${h.count}`,
      `${name}_sum{${label}} ${h.sum}`,
      `${name}_count{${label}} ${h.count}`,
    ]);
  simple("vllm:num_requests_running", "gauge", "Requests in the running batch.", s.running);
  if (engine.kvCacheDtype !== undefined) {
    metric("vllm:cache_config_info", "gauge", "Information of the KV cache's configuration (labels; the value is 1).", [
      `vllm:cache_config_info{${label},cache_dtype="${engine.kvCacheDtype}",num_gpu_blocks="${s.kvTotalBlocks}"} 1`,
    ]);
  }
  simple("vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled (queue depth).", s.waiting);
  const lora = engine.adapterRequests?.();
  if (lora && engine.adapterNames) {
    // vLLM's: labels carry the adapters (comma-separated), the value is the time of the scrape.
    metric("vllm:lora_requests_info", "gauge", "Running and waiting LoRA adapters (labels; the value is the time in seconds).", [
      `vllm:lora_requests_info{${label},max_lora="${MAX_LORA_ADAPTERS}",running_lora_adapters="${esc(lora.running.join(","))}",waiting_lora_adapters="${esc(lora.waiting.join(","))}"} ${Date.now() / 1000}`,
    ]);
    simple("evolving:lora_adapters_loaded", "gauge", "LoRA adapters loaded (--lora-modules and runtime loads).", engine.adapterNames().length);
  }
  simple("vllm:kv_cache_usage_perc", "gauge", "Fraction of KV blocks in use (1 = full).", s.kvTotalBlocks ? s.kvUsedBlocks / s.kvTotalBlocks : 0);
  simple("vllm:kv_cache_blocks_used", "gauge", "KV blocks referenced by running requests.", s.kvUsedBlocks);
  simple("vllm:kv_cache_blocks_total", "gauge", "KV blocks in the pool.", s.kvTotalBlocks);
  simple("vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", s.prefixQueriedTokens);
  simple("vllm:prefix_cache_hits_total", "counter", "Prompt tokens served from the prefix cache.", s.prefixHitTokens);
  simple("vllm:prefix_cache_hit_rate", "gauge", "Prefix cache hits over queries, in tokens, since start.", s.prefixQueriedTokens ? s.prefixHitTokens / s.prefixQueriedTokens : 0);
  simple("vllm:num_preemptions_total", "counter", "Requests preempted (KV recomputed or swapped to host memory).", s.preemptions);
  simple("evolving:num_priority_preemptions_total", "counter", "Preemptions that made room for a more urgent waiting request (its priority), not for KV growth.", s.priorityPreemptions);
  simple("vllm:num_preemptions_swapped_total", "counter", "Preemptions whose KV was swapped to host memory.", s.swapOuts);
  simple("vllm:num_recomputed_tokens_total", "counter", "Tokens whose KV was computed again after a recompute preemption.", s.recomputedTokens);
  simple("vllm:kv_swapped_out_blocks_total", "counter", "KV blocks copied to host swap space.", s.swappedOutBlocks);
  simple("vllm:kv_swapped_in_blocks_total", "counter", "KV blocks copied back from host swap space.", s.swappedInBlocks);
  simple("vllm:cpu_cache_usage_perc", "gauge", "Fraction of host swap space in use (1 = full).", s.swapTotalBlocks ? s.swapUsedBlocks / s.swapTotalBlocks : 0);
  simple("evolving:kv_host_blocks", "gauge", "KV blocks held in the host-memory tier (--kv-offload-blocks).", s.kvHostBlocks);
  simple("evolving:kv_host_capacity_blocks", "gauge", "Capacity of the host-memory KV tier in blocks (0 = off).", s.kvHostCapacityBlocks);
  simple("evolving:kv_host_bytes", "gauge", "Bytes of KV held in the host-memory tier (an f16 cache's at 2 bytes a value).", s.kvHostBytes);
  simple("evolving:kv_offloaded_blocks_total", "counter", "Evicted cached KV blocks copied to host memory.", s.kvOffloadedBlocks);
  simple("evolving:kv_restored_blocks_total", "counter", "KV blocks written back from host memory for a prefix hit.", s.kvRestoredBlocks);
  simple("evolving:kv_prefetched_blocks_total", "counter", "Of the restored blocks, those written back before a tool-waiting session's predicted return.", s.kvPrefetchedBlocks);
  if (s.stateCheckpointCapacity > 0) {
    // A model whose state is not in its KV blocks (recurrent layers, windowed sliding layers) resumes a prompt only at a state checkpoint.
    simple("evolving:state_checkpoints", "gauge", "State checkpoints held on the device (prefix hits of a model whose state is not in its KV blocks reach only as far as one).", s.stateCheckpoints);
    simple("evolving:state_checkpoint_capacity", "gauge", "State checkpoints the device keeps at most (--state-checkpoints).", s.stateCheckpointCapacity);
    simple("evolving:state_checkpoints_written_total", "counter", "State checkpoints taken for a state to keep (a prompt's last whole block, an answer's, where a prompt leaves a shared prefix; one dropped before its step wrote it counts too).", s.stateCheckpointsWritten);
    simple("evolving:state_checkpoint_resumes_total", "counter", "Prompts that resumed from a state checkpoint instead of computing their cached prefix again.", s.stateCheckpointResumes);
    simple("evolving:host_state_checkpoints", "gauge", "State checkpoints held in host memory (--host-state-checkpoints).", s.hostStateCheckpoints);
    simple("evolving:host_state_capacity", "gauge", "State checkpoints host memory keeps at most (0 = off).", s.hostStateCapacity);
    simple("evolving:host_states_offloaded_total", "counter", "State checkpoints read to host memory as the device's were taken for others.", s.hostStatesOffloaded);
    simple("evolving:host_states_restored_total", "counter", "State checkpoints written back from host memory for a waiting prompt.", s.hostStatesRestored);
  }
  simple("vllm:prompt_tokens_total", "counter", "Prompt tokens received.", m.promptTokens);
  simple("vllm:generation_tokens_total", "counter", "Tokens generated.", m.generationTokens);
  simple("evolving:jump_forward_tokens_total", "counter", "Of the generated tokens, those an output grammar forced, appended without sampling (jump-forward decoding).", s.jumpForwardTokens);
  simple("evolving:steps_run_ahead_total", "counter", "Forwards run ahead of a read of their tokens (multi-step decoding, --num-scheduler-steps): each a read saved.", s.stepsRunAhead);
  simple("vllm:spec_decode_num_drafts_total", "counter", "Decode steps that verified a speculative draft.", s.specDrafts);
  simple("vllm:spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified (speculative decoding).", s.specDraftTokens);
  simple("vllm:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens the model's own samples agreed with, kept without a step of their own.", s.specAcceptedTokens);
  simple("evolving:spec_decode_state_rollbacks_total", "counter", "Drafts not all taken whose sequence's recurrent state was put back to before the draft (a model with recurrent layers; 0 for others).", s.specStateRollbacks);
  simple("evolving:spec_decode_refed_tokens_total", "counter", "Tokens fed again after a state rollback (the step's token and the taken drafts, in the sequence's next step).", s.specRefedTokens);
  metric("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter", "Drafts whose token at this position (0 first) was accepted.",
    s.specAcceptedPerPos.map((n, i) => `vllm:spec_decode_num_accepted_tokens_per_pos_total{${label},position="${i}"} ${n}`));
  simple("vllm:request_rejected_total", "counter", "Requests refused for load: the queue was full (429), or a cluster had no room for a new session (503).", m.rejected);
  // vLLM declares a series for each of its finish reasons from the start, so that increase() and rate() see the first.
  const reasons = new Map([["stop", 0], ["length", 0], ["abort", 0], ...m.finished]);
  metric("vllm:request_success_total", "counter", "Finished requests by finish reason (abort: cancelled, as by a client that went away).",
    [...reasons].map(([r, n]) => `vllm:request_success_total{${label},finished_reason="${esc(r)}"} ${n}`));
  const sessions = engine.sessionStatusCounts();
  if (sessions) {
    metric("evolving:kv_sessions", "gauge", "Sessions the agent-aware KV retention tracks, by status (waiting-tool: the last answer called a tool); summed over workers, so a session whose KV is on two workers counts on each (see evolving:worker_kv_sessions).",
      Object.entries(sessions).map(([st, n]) => `evolving:kv_sessions{${label},status="${st}"} ${n}`));
  }
  const mixing = engine.stepMixing;
  metric("evolving:step_mixing", "gauge", "How steps run prefill chunks and decodes: together (mixed) or as separate steps (split); 1 = current mode.",
    ["mixed", "split"].map((mode) => `evolving:step_mixing{${label},mode="${mode}"} ${mode === mixing ? 1 : 0}`));
  const workers = engine.workerStatuses();
  const wl = (w: { id: string }) => `${label},worker="${esc(w.id)}"`;
  metric("evolving:worker_role", "gauge", "Each worker's role (1 = current): what the router sends it; the online planner flips it.",
    workers.flatMap((w) => ["mixed", "prefill", "decode"].map((r) => `evolving:worker_role{${wl(w)},role="${r}"} ${r === w.role ? 1 : 0}`)));
  metric("evolving:worker_requests_waiting", "gauge", "Requests waiting on each worker.", workers.map((w) => `evolving:worker_requests_waiting{${wl(w)}} ${w.waiting}`));
  metric("evolving:worker_requests_running", "gauge", "Requests running on each worker.", workers.map((w) => `evolving:worker_requests_running{${wl(w)}} ${w.running}`));
  metric("evolving:worker_kv_cache_usage_perc", "gauge", "Fraction of each worker's KV blocks in use.", workers.map((w) => `evolving:worker_kv_cache_usage_perc{${wl(w)}} ${w.kvUsage}`));
  metric("evolving:worker_up", "gauge", "1 while a worker's engine runs, 0 once it has failed or stopped (a worker process that died stays listed here, with its last role).",
    workers.map((w) => `evolving:worker_up{${wl(w)}} ${w.alive === false ? 0 : 1}`));
  metric("evolving:worker_draining", "gauge", "1 while a worker leaves the cluster (no new requests; those in flight finish).", workers.map((w) => `evolving:worker_draining{${wl(w)}} ${w.draining ? 1 : 0}`));
  metric("evolving:worker_parked", "gauge", "1 while the SLA planner's replica targets leave a worker out (no new requests; those in flight finish).", workers.map((w) => `evolving:worker_parked{${wl(w)}} ${w.parked ? 1 : 0}`));
  metric("evolving:worker_starting", "gauge", "1 while a worker the SLA planner took back is in its start-up (--sla-worker-start-s; no new requests yet).", workers.map((w) => `evolving:worker_starting{${wl(w)}} ${w.starting ? 1 : 0}`));
  if (workers.some((w) => w.sessions)) {
    metric("evolving:worker_kv_sessions", "gauge", "Sessions each worker's agent-aware KV retention tracks, by status.",
      workers.flatMap((w) => Object.entries(w.sessions ?? {}).map(([st, n]) => `evolving:worker_kv_sessions{${wl(w)},status="${esc(st)}"} ${n}`)));
  }
  if (isClusterFront(engine)) {
    const c = engine.counters;
    simple("evolving:prefill_handoffs_total", "counter", "Prompts prefilled on a prefill worker and handed to another worker to decode.", c.prefillHandoffs);
    simple("evolving:prefix_moves_total", "counter", "Cached prefixes moved between workers (pulled from the session's holder, or sent to a prefill worker first).", c.prefixMoves);
    simple("evolving:moved_kv_blocks_total", "counter", "KV blocks written into a worker from another (hand-offs and prefix moves).", c.movedBlocks);
    simple("evolving:role_flips_total", "counter", "Worker role flips the online planner applied.", c.flips);
    simple("evolving:step_mixing_changes_total", "counter", "Times the online planner switched between mixed and split steps (see evolving:step_mixing).", c.mixingChanges);
    simple("evolving:worker_join_failures_total", "counter", "Workers announced on NATS whose join failed (unreachable, another model, refused); each is tried again after a pause.", c.joinFailures);
  }
  hist("vllm:time_to_first_token_seconds", "Time to first token.", m.ttft);
  hist("vllm:inter_token_latency_seconds", "Time between consecutive output tokens.", m.itl);
  hist("vllm:e2e_request_latency_seconds", "End-to-end request latency.", m.e2e);
  hist("vllm:request_decode_time_seconds", "Time from a request's first output token to its last.", m.decodeTime);
  hist("vllm:request_queue_time_seconds", "Time a request waited before its first step ran (after a cluster's hand-off: on the prefill worker).", m.queueTime);
  hist("vllm:request_prefill_time_seconds", "Time from a request's first step to its first output token.", m.prefillTime);
  hist("vllm:request_inference_time_seconds", "Time from a request's first step to its end.", m.inferenceTime);
  hist("vllm:request_params_max_tokens", "Output budget of each finished request (max_tokens, or what the context left it).", m.maxTokensParam, engine.maxModelLen);
  // Steps run on the workers: a cluster front sees none of its own (each worker's /metrics has them).
  if (!isClusterFront(engine)) hist("vllm:iteration_tokens_total", "Tokens each engine step ran (prompt chunks, decodes and draft tokens).", m.iterationTokens);
  hist("vllm:request_prompt_tokens", "Prompt tokens of each finished request.", m.promptLen, engine.maxModelLen);
  hist("vllm:request_generation_tokens", "Generated tokens of each finished request.", m.generationLen, engine.maxModelLen);
  return out.join("\n") + "\n";
}
