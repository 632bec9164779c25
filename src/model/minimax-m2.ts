/**
 * MiniMax-M2 (llama.cpp's `minimax-m2` GGUFs, transformers' MiniMaxM2ForCausalLM checkpoints: MiniMax-M2,
 * M2.1, M2.5): Llama's layout without the q/k permutation, q and k RMS-normed over each token's whole
 * projection (`qk_norm_type` "per_layer"; "per_head" norms each head), RoPE (NeoX) over the first
 * `rotary_dim` dims of each head, and every layer's feed-forward routed experts (Mixtral's
 * `block_sparse_moe` names, `w1`/`w3`/`w2`): sigmoid scores chosen with a selection bias
 * (`e_score_correction_bias`), the chosen weights renormalised, unscaled. The MTP modules are not run.
 * The GGUF side is gguf-moe.ts's case and gguf-config.ts's per-row q/k norm.
 */
import { ModelLoadError, type ModelConfig, type MoeConfig, plainMoe } from "./config.ts";
import { type Json, wholeAtLeast } from "./hf-json.ts";
import type { LayerRole } from "./weights.ts";
import { EXPERT } from "./expert-stack.ts";

/** What a MiniMaxM2ForCausalLM config.json sets beyond the common fields; what is not run refused by name. */
export function hfMinimaxM2(cfg: Json, headDim: number, path: string): Pick<ModelConfig, "qkNorm"> & Partial<Pick<ModelConfig, "qkNormPerRow" | "rotaryDim">> & { moe: MoeConfig } {
  const experts = wholeAtLeast(cfg, "num_local_experts", path, 256, 1);
  const used = wholeAtLeast(cfg, "num_experts_per_tok", path, 8, 1);
  if (used > experts) throw new ModelLoadError(`"num_experts_per_tok" in "${path}" should be 1 to ${experts}, got ${used}`);
  const scoring = cfg.scoring_func ?? "sigmoid";
  if (scoring !== "sigmoid" && scoring !== "softmax") throw new ModelLoadError(`"scoring_func" in "${path}" is ${JSON.stringify(scoring)}; MiniMax-M2's experts are scored by sigmoid or softmax`);
  if (typeof cfg.shared_intermediate_size === "number" && cfg.shared_intermediate_size > 0) {
    throw new ModelLoadError(`Model "${path}" sets shared_intermediate_size ${cfg.shared_intermediate_size}; MiniMax-M2 with a shared expert is not supported`);
  }
  const rotary = wholeAtLeast(cfg, "rotary_dim", path, headDim, 2);
  if (rotary > headDim || rotary % 2 !== 0) throw new ModelLoadError(`"rotary_dim" in "${path}" should be an even number up to the head's ${headDim} dims, got ${rotary}`);
  const norm = cfg.use_qk_norm !== false;
  const perHead = cfg.qk_norm_type === "per_head";
  if (norm && cfg.qk_norm_type !== undefined && cfg.qk_norm_type !== "per_layer" && !perHead) {
    throw new ModelLoadError(`"qk_norm_type" in "${path}" is ${JSON.stringify(cfg.qk_norm_type)}; expected "per_layer" or "per_head"`);
  }
  return {
    moe: { ...plainMoe(experts, used, true), gating: scoring, selectionBias: cfg.use_routing_bias !== false },
    qkNorm: norm,
    ...(norm && !perHead ? { qkNormPerRow: true } : {}),
    ...(rotary !== headDim ? { rotaryDim: rotary } : {}),
  };
}

/** MiniMaxM2ForCausalLM's expert names under `model.layers.N.`. */
export const MINIMAX_M2_EXPERT_NAMES: Partial<Record<LayerRole, string>> = {
  router: "block_sparse_moe.gate.weight",
  routerBias: "block_sparse_moe.e_score_correction_bias",
  wGate: `block_sparse_moe.experts.${EXPERT}.w1.weight`,
  wUp: `block_sparse_moe.experts.${EXPERT}.w3.weight`,
  wDown: `block_sparse_moe.experts.${EXPERT}.w2.weight`,
};
