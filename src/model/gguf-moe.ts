/**
 * A GGUF's experts as llama.cpp routes each architecture's: Mixtral (`llama` with
 * `llama.expert_count`), Qwen2-MoE, Qwen3-MoE, GLM-4.5, DeepSeek (deepseek2), GPT-OSS, Granite 4.0-H and Nemotron 3
 * (nemotron_h_moe).
 */
import { expertGroups, ModelLoadError, type MoeConfig, plainMoe } from "./config.ts";
import { type GgufMetadata, perLayerNumber } from "./gguf-metadata.ts";
import { GGUF_LAYER_NAMES } from "./gguf-names.ts";
import { gptOssMoe } from "./gguf-gpt-oss.ts";

/** Architectures whose every file has experts. */
const MOE_ARCHITECTURES: readonly string[] = ["qwen2moe", "qwen3moe", "glm4moe", "deepseek2", "gpt-oss", "qwen35moe", "qwen3next", "nemotron_h_moe", "lfm2moe", "minimax-m2"];

/**
 * The experts of a Mixtral (`llama` with `llama.expert_count`), Qwen2-MoE, Qwen3-MoE or GLM-4.5 file,
 * routed as llama.cpp routes each: it renormalises the chosen experts' weights for Mixtral and
 * Qwen3-MoE whatever the file says, never for Qwen2-MoE, and for GLM-4.5 and DeepSeek per
 * `expert_weights_norm`; only GLM-4.5 and DeepSeek may route within expert groups.
 */
export function ggufMoe(meta: GgufMetadata, arch: string, has: (tensor: string) => boolean, path: string): MoeConfig | undefined {
  const numExperts = meta.optionalNumber(`${arch}.expert_count`) ?? 0;
  if (numExperts === 0) {
    if (MOE_ARCHITECTURES.includes(arch)) throw new ModelLoadError(`Model "${path}" is ${arch} but has no "${arch}.expert_count"`);
    return undefined;
  }
  const numExpertsUsed = meta.number(`${arch}.expert_used_count`);
  if (!Number.isInteger(numExpertsUsed) || numExpertsUsed < 1 || numExpertsUsed > numExperts) {
    throw new ModelLoadError(`Model "${path}" uses ${numExpertsUsed} of its ${numExperts} experts per token; expected 1 to ${numExperts}`);
  }
  const groups = expertGroups(
    meta.optionalNumber(`${arch}.expert_group_count`) ?? 0,
    meta.optionalNumber(`${arch}.expert_group_used_count`),
    numExperts,
    numExpertsUsed,
    path,
  );
  const shared = meta.optionalNumber(`${arch}.expert_shared_count`) ?? 0;
  // llama.cpp treats a scale of 0 (its default) as none.
  const scale = meta.optionalNumber(`${arch}.expert_weights_scale`) ?? 0;
  if (!(Number.isFinite(scale) && scale >= 0)) {
    throw new ModelLoadError(`GGUF metadata "${arch}.expert_weights_scale" in "${path}" should be a positive number or 0, got ${scale}`);
  }
  const routedScale = scale === 0 ? 1 : scale;
  if (groups && arch !== "glm4moe" && arch !== "deepseek2") {
    throw new ModelLoadError(`Model "${path}" routes within expert groups, which the "${arch}" architecture does not support`);
  }
  switch (arch) {
    case "qwen35moe":
    case "qwen3next":
      // Qwen3.5's (and Qwen3-Next's) experts: Qwen2-MoE's sigmoid-gated shared expert, the chosen experts' weights renormalised.
      return {
        ...plainMoe(numExperts, numExpertsUsed, true),
        routedScale,
        sharedIntermediateSize: meta.optionalNumber(`${arch}.expert_shared_feed_forward_length`) ?? perLayerNumber(meta, `${arch}.expert_feed_forward_length`, path),
        sharedGate: true,
      };
    case "qwen2moe":
      return {
        ...plainMoe(numExperts, numExpertsUsed, false),
        routedScale,
        // llama.cpp's fallback for files without the shared width: the dense one.
        sharedIntermediateSize: meta.optionalNumber(`${arch}.expert_shared_feed_forward_length`) ??
          perLayerNumber(meta, `${arch}.feed_forward_length`, path),
        sharedGate: true,
      };
    case "glm4moe":
    case "deepseek2": {
      const gatingFunc = meta.optionalNumber(`${arch}.expert_gating_func`) ?? 0;
      if (gatingFunc !== 0 && gatingFunc !== 1 && gatingFunc !== 2) {
        throw new ModelLoadError(`Model "${path}" uses expert gating function ${gatingFunc}; supported: 1 (softmax), 2 (sigmoid)`);
      }
      const denseLayers = meta.optionalNumber(`${arch}.leading_dense_block_count`) ?? 0;
      return {
        numExperts,
        numExpertsUsed,
        normalizeTopK: meta.bool(`${arch}.expert_weights_norm`, false),
        // llama.cpp's default for DeepSeek V2 files without a gating function is softmax.
        gating: gatingFunc === 1 || (gatingFunc === 0 && arch === "deepseek2") ? "softmax" : "sigmoid",
        // DeepSeek V2 has no selection bias; V3 and Kimi K2 do.
        selectionBias: arch === "glm4moe" || has(`blk.${denseLayers}.${GGUF_LAYER_NAMES.routerBias}`),
        routedScale,
        denseLayers,
        denseIntermediateSize: denseLayers > 0 ? perLayerNumber(meta, `${arch}.feed_forward_length`, path) : 0,
        sharedIntermediateSize: shared * perLayerNumber(meta, `${arch}.expert_feed_forward_length`, path),
        sharedGate: false,
        ...(groups ? { groups } : {}),
      };
    }
    case "granitehybrid":
      // Granite's experts (llama.cpp's build_moe_ffn: softmax, the chosen weights renormalised) and an ungated shared one.
      return {
        ...plainMoe(numExperts, numExpertsUsed, true),
        routedScale,
        sharedIntermediateSize: meta.optionalNumber(`${arch}.expert_shared_feed_forward_length`) ?? 0,
        sharedGate: false,
      };
    case "lfm2moe": {
      // LFM2-MoE's experts (llama.cpp's lfm2moe): sigmoid scores (its gating function), chosen with a selection bias, the
      // chosen weights renormalised, never scaled (llama.cpp reads no scale for it); leading dense layers.
      const gatingFunc = meta.optionalNumber(`${arch}.expert_gating_func`) ?? 2;
      if (gatingFunc !== 2) throw new ModelLoadError(`Model "${path}" uses expert gating function ${gatingFunc}; LFM2-MoE's is 2 (sigmoid)`);
      const denseLayers = meta.optionalNumber(`${arch}.leading_dense_block_count`) ?? 0;
      return {
        numExperts,
        numExpertsUsed,
        normalizeTopK: true,
        gating: "sigmoid",
        selectionBias: true,
        routedScale: 1,
        denseLayers,
        denseIntermediateSize: denseLayers > 0 ? perLayerNumber(meta, `${arch}.feed_forward_length`, path) : 0,
        sharedIntermediateSize: 0,
        sharedGate: false,
      };
    }
    case "nemotron_h_moe": {
      // Nemotron 3's experts (llama.cpp's build_moe_ffn): sigmoid scores, chosen with a selection bias, weights renormalised
      // per `expert_weights_norm` and scaled; ungated ReLU² experts and one ungated shared expert of its own width.
      if (meta.has(`${arch}.moe_latent_size`)) {
        throw new ModelLoadError(`Model "${path}" runs its experts in a latent space ("${arch}.moe_latent_size", Nemotron 3 Super's), which is not supported`);
      }
      return {
        numExperts,
        numExpertsUsed,
        normalizeTopK: meta.bool(`${arch}.expert_weights_norm`, false),
        gating: "sigmoid",
        selectionBias: true,
        routedScale,
        denseLayers: 0,
        denseIntermediateSize: 0,
        sharedIntermediateSize: meta.optionalNumber(`${arch}.expert_shared_feed_forward_length`) ?? 0,
        sharedGate: false,
      };
    }
    case "minimax-m2": {
      // MiniMax-M2's experts (llama.cpp's minimax-m2): scored by the file's gating function (sigmoid in the released
      // models), chosen with a selection bias, the chosen weights renormalised, never scaled (llama.cpp reads no scale for it).
      const gatingFunc = meta.optionalNumber(`${arch}.expert_gating_func`);
      if (gatingFunc !== 1 && gatingFunc !== 2) {
        throw new ModelLoadError(`Model "${path}" has "${arch}.expert_gating_func" ${gatingFunc ?? "absent"}; MiniMax-M2's experts are scored by 1 (softmax) or 2 (sigmoid)`);
      }
      if (shared > 0) throw new ModelLoadError(`Model "${path}" has shared experts, which the "${arch}" architecture does not support`);
      return { ...plainMoe(numExperts, numExpertsUsed, true), gating: gatingFunc === 1 ? "softmax" : "sigmoid", selectionBias: true };
    }
    case "gpt-oss":
      if (shared > 0) throw new ModelLoadError(`Model "${path}" has shared experts, which the "${arch}" architecture does not support`);
      return gptOssMoe(numExperts, numExpertsUsed);
    default:
      if (shared > 0) throw new ModelLoadError(`Model "${path}" has shared experts, which the "${arch}" architecture does not support`);
      return plainMoe(numExperts, numExpertsUsed, true);
  }
}
