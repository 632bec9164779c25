/**
 * The sampling defaults a GGUF's converter recorded from the model's generation_config.json, under
 * llama.cpp's `general.sampling.*` keys (gguf-py's constants: `temp`, `top_k`, `top_p`, `min_p`,
 * `penalty_repeat`, and others sampling here cannot follow), as a Hugging Face directory's
 * generation_config.json gives them (hf-generation-config.ts): serve's `--generation-config auto`
 * applies them to requests that leave them out.
 */
import { ModelLoadError, type SamplingDefaults } from "./config.ts";
import { GgufType } from "./gguf-types.ts";
import { type GgufMetadata, showGgufValue } from "./gguf-metadata.ts";

/** Keys whose sampler is not here, with the value that leaves it off (any other value is reported, not applied). */
const UNSUPPORTED_SAMPLING_KEYS: Record<string, number | undefined> = {
  xtc_probability: 0, mirostat: 0, penalty_last_n: -1,
  // The order llama.cpp chains its samplers in: ours is fixed (temperature, min_p, top_k, top_p).
  sequence: undefined,
};

/**
 * `v` as the shortest decimal that is the same 32-bit float: a file's `top_p` of 0.95 is stored as
 * 0.949999988079071, and a server should say (and apply) 0.95.
 */
function shortestF32(v: number): number {
  for (let digits = 1; digits <= 9; digits++) {
    const d = Number(v.toPrecision(digits));
    if (Math.fround(d) === Math.fround(v)) return d;
  }
  return v;
}

/**
 * The sampling defaults of a GGUF's `general.sampling.*` metadata (undefined: it has none). A value
 * out of its range is a ModelLoadError naming the key; a repetition penalty's `penalty_last_n`
 * (llama.cpp applies it to the last n tokens only) other than -1 (all of them, as here) is reported.
 */
export function ggufSamplingDefaults(meta: GgufMetadata, path: string): SamplingDefaults | undefined {
  const numberAt = (key: string, ok: (v: number) => boolean, range: string): number | undefined => {
    const name = `general.sampling.${key}`;
    const entry = meta.entries.get(name);
    if (entry === undefined) return undefined;
    const v = typeof entry.value === "bigint" ? Number(entry.value) : entry.value;
    if (typeof v !== "number" || !ok(v)) throw new ModelLoadError(`GGUF metadata "${name}" in "${path}" should be ${range}, got ${showGgufValue(entry.value)}`);
    return entry.type === GgufType.FLOAT32 ? shortestF32(v) : v;
  };
  const temperature = numberAt("temp", (v) => v >= 0 && Number.isFinite(v), "a number from 0");
  const topP = numberAt("top_p", (v) => v > 0 && v <= 1, "a number above 0 and at most 1");
  const topK = numberAt("top_k", (v) => Number.isInteger(v), "a whole number");
  const minP = numberAt("min_p", (v) => v >= 0 && v <= 1, "a number from 0 to 1");
  const repetitionPenalty = numberAt("penalty_repeat", (v) => v > 0 && Number.isFinite(v), "a positive number");
  const unsupported = Object.entries(UNSUPPORTED_SAMPLING_KEYS).flatMap(([key, off]) => {
    const entry = meta.entries.get(`general.sampling.${key}`);
    if (entry === undefined) return [];
    const v = typeof entry.value === "bigint" ? Number(entry.value) : entry.value;
    // A window over the last n tokens only matters to a repetition penalty that is applied.
    if (key === "penalty_last_n" && (repetitionPenalty === undefined || repetitionPenalty === 1)) return [];
    return v === off ? [] : [key];
  });
  const d: SamplingDefaults = {
    ...(temperature !== undefined ? { temperature } : {}), ...(topP !== undefined ? { topP } : {}),
    ...(topK !== undefined && topK > 0 ? { topK } : {}), ...(minP !== undefined && minP > 0 ? { minP } : {}),
    ...(repetitionPenalty !== undefined && repetitionPenalty !== 1 ? { repetitionPenalty } : {}),
    ...(unsupported.length > 0 ? { unsupported } : {}),
  };
  return Object.keys(d).length > 0 ? { ...d, source: "GGUF general.sampling" } : undefined;
}
