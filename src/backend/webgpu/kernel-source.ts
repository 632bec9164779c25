/**
 * Loads the WGSL sources in `kernels-wgsl/` and specialises them with `wgsl-preprocessor`.
 *
 * A .wgsl file is written as the body of a template literal: `${NAME}` placeholders are template
 * parameters, and `#if ${FLAG}` … `#endif` blocks are resolved by the preprocessor. The files are read
 * relative to this module's URL (not the cwd), with node:fs, which Deno and Node both provide.
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { wgsl } from "wgsl-preprocessor/wgsl-preprocessor.js";

/** Template parameters of one kernel variant: flags (booleans) and interpolated values. */
export type KernelParams = Readonly<Record<string, boolean | number | string>>;

/** Kernels whose sources are read; `weights` is a prelude, prepended where a kernel reads weights. */
export const KERNEL_FILES = [
  "weights", "embedding", "gather_rows", "copy_columns", "fill", "elementwise", "rmsnorm", "softmax", "matmul_gemv",
  "matmul_tiled", "rope", "kv_write", "paged_attention", "argmax", "sample", "scatter_add", "mask_logits", "penalize_repeats", "penalize_sampled", "bench_copy", "bench_fma",
  "moe_route", "matmul_experts", "matmul_experts_tiled", "moe_group", "moe_combine", "attention_combine", "matmul_glu_gemv", "matmul_glu_tiled",
  "matmul_qkv_gemv", "matmul_qkv_tiled", "matmul_experts_glu", "matmul_experts_glu_tiled", "sigmoid_mul", "causal_conv1d", "gated_delta_net", "ssm_scan",
] as const;

/** Name of one kernel source file (without `.wgsl`). */
export type KernelName = (typeof KERNEL_FILES)[number];

/** Kernels that read a weight through the `weights` prelude. */
const USES_WEIGHTS: ReadonlySet<KernelName> = new Set([
  "embedding", "matmul_gemv", "matmul_tiled", "matmul_experts", "matmul_experts_tiled", "matmul_glu_gemv", "matmul_glu_tiled",
  "matmul_qkv_gemv", "matmul_qkv_tiled", "matmul_experts_glu", "matmul_experts_glu_tiled",
]);
/** Kernels that read more weights of the first's dtype: copies of the prelude with these suffixes, at these bindings ({@link secondWeightPrelude}). */
const MORE_WEIGHTS: ReadonlyMap<KernelName, readonly [suffix: string, binding: number][]> = new Map([
  ["matmul_glu_gemv", [["_u", 6]]],
  ["matmul_glu_tiled", [["_u", 6]]],
  ["matmul_qkv_gemv", [["_u", 6], ["_v", 7]]],
  ["matmul_qkv_tiled", [["_u", 6], ["_v", 7]]],
  ["matmul_experts_glu", [["_u", 6]]],
  ["matmul_experts_glu_tiled", [["_u", 6]]],
] as [KernelName, [string, number][]][]);

/**
 * The specialised weights prelude again, for another weight of the same dtype at `binding`: every
 * name it declares (its buffer, functions, structs, constants) gets `suffix` (`w_at4_u`), and its
 * `enable` directives are dropped (the first copy holds them, at the top as WGSL requires).
 */
export function secondWeightPrelude(prelude: string, suffix = "_u", binding = 6): string {
  const names = new Set<string>();
  // Module-scope declarations start their line (the prelude's style); locals stay as they are.
  for (const m of prelude.matchAll(/^(?:fn|struct|const|alias)\s+([A-Za-z_]\w*)/gm)) names.add(m[1]);
  for (const m of prelude.matchAll(/^(?:@group\(\d+\)\s*@binding\(\d+\)\s*)?var(?:<[^>]*>)?\s+([A-Za-z_]\w*)/gm)) names.add(m[1]);
  let text = prelude.replace(/^\s*enable\s[^;]*;/gm, "").replace(/@binding\(1\)/g, `@binding(${binding})`);
  for (const name of names) text = text.replace(new RegExp(`\\b${name}\\b`, "g"), `${name}${suffix}`);
  return text;
}

/** Thrown when a kernel template names a parameter the caller did not supply. */
export class KernelTemplateError extends Error {
  override name = "KernelTemplateError";
}

/** Reads every kernel source once (synchronously: a few kilobytes). */
export function loadKernelSources(): ReadonlyMap<KernelName, string> {
  const dir = new URL("../../../kernels-wgsl/", import.meta.url);
  const out = new Map<KernelName, string>();
  for (const name of KERNEL_FILES) out.set(name, readFileSync(fileURLToPath(new URL(`${name}.wgsl`, dir)), "utf8"));
  return out;
}

/** Splits `${NAME}` placeholders out of a source and runs it through the preprocessor's tag. */
function applyTemplate(source: string, params: KernelParams, kernel: string): string {
  const strings: string[] = [];
  const values: unknown[] = [];
  const re = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;
  let last = 0;
  for (const m of source.matchAll(re)) {
    const name = m[1];
    if (!(name in params)) throw new KernelTemplateError(`Kernel "${kernel}" needs template parameter "${name}"`);
    strings.push(source.slice(last, m.index));
    values.push(params[name]);
    last = (m.index ?? 0) + m[0].length;
  }
  strings.push(source.slice(last));
  return wgsl(strings, ...values);
}

/** The specialised WGSL text of one kernel variant. */
export function specialiseKernel(
  sources: ReadonlyMap<KernelName, string>,
  name: KernelName,
  params: KernelParams,
): string {
  const body = sources.get(name);
  if (body === undefined) throw new KernelTemplateError(`Unknown kernel "${name}"`);
  const prelude = USES_WEIGHTS.has(name) ? applyTemplate(sources.get("weights") ?? "", params, "weights") : "";
  const more = (MORE_WEIGHTS.get(name) ?? []).map(([suffix, binding]) => secondWeightPrelude(prelude, suffix, binding)).join("");
  return prelude + more + applyTemplate(body, params, name);
}

/** A stable cache key for a kernel variant: its name and its template parameters, never shapes. */
export function kernelKey(name: KernelName, params: KernelParams): string {
  const parts = Object.keys(params).sort().map((k) => `${k}=${params[k]}`);
  return `${name}(${parts.join(",")})`;
}

/**
 * The group-0 layout a specialised kernel declares, read from its `@binding(n) var<…>` lines
 * (comments stripped). An explicit layout instead of `layout: "auto"` lets the uniform block
 * (binding 0, the only uniform) take a dynamic offset, so one bind group serves every dispatch
 * of a kernel over the same buffers whatever slot of the uniform ring its parameters landed in.
 */
export function bindGroupLayoutEntries(code: string, kernel: string): GPUBindGroupLayoutEntry[] {
  const text = code.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");
  const re = /@group\(\s*0\s*\)\s*@binding\(\s*(\d+)\s*\)\s*var\s*<\s*(\w+)\s*(?:,\s*(\w+)\s*)?>/g;
  const entries: GPUBindGroupLayoutEntry[] = [];
  for (const m of text.matchAll(re)) {
    const binding = Number(m[1]);
    if (entries.some((e) => e.binding === binding)) throw new KernelTemplateError(`Kernel "${kernel}" declares binding ${binding} twice`);
    const visibility = GPUShaderStage.COMPUTE;
    if (m[2] === "uniform") {
      if (binding !== 0) throw new KernelTemplateError(`Kernel "${kernel}" has a uniform at binding ${binding}; only binding 0 may be one`);
      entries.push({ binding, visibility, buffer: { type: "uniform", hasDynamicOffset: true } });
    } else if (m[2] === "storage") {
      entries.push({ binding, visibility, buffer: { type: m[3] === "read_write" ? "storage" : "read-only-storage" } });
    } else {
      throw new KernelTemplateError(`Kernel "${kernel}" binds a var<${m[2]}> at ${binding}, which the backend cannot lay out`);
    }
  }
  return entries.sort((a, b) => a.binding - b.binding);
}
