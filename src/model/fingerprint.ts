/**
 * A short identity of a loaded model: what a cluster compares to be sure every worker loaded the
 * same model as the server (a path names a file on each machine, and two files may differ). Hashes
 * the config, the tokenizer's ids for a fixed text, and samples of weight bytes (the first and last
 * 4 KiB of the embedding, of the first and last layers' attention projections and of the output
 * norm), so a fine-tune of the same shape differs too, without reading gigabytes.
 */
import { createHash } from "node:crypto";
import type { HostTensor, LoadedModel } from "./config.ts";

const SAMPLE = 4096;
const PROBE_TEXT = "Once upon a time, 0123456789 <tool_call> ünïcödé";

/** Hex SHA-256 identity of `model` (equal for the same model loaded from the same bytes). */
export function modelFingerprint(model: LoadedModel): string {
  const h = createHash("sha256");
  h.update(JSON.stringify(model.config));
  h.update(JSON.stringify(model.tokenizer.encode(PROBE_TEXT)));
  const w = model.weights;
  const last = w.layers[w.layers.length - 1];
  for (const t of [w.tokenEmbedding, w.layers[0]?.wq, last?.wo, w.outputNorm, w.output]) if (t) sample(h, t);
  return h.digest("hex").slice(0, 32);
}

function sample(h: ReturnType<typeof createHash>, t: HostTensor): void {
  h.update(`${t.name}:${t.dtype}:${t.shape.join("x")}:${t.data.length}`);
  h.update(t.data.subarray(0, SAMPLE));
  h.update(t.data.subarray(Math.max(0, t.data.length - SAMPLE)));
}
