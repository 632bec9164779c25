/**
 * `generate`: load a model, run one prompt, print the continuation (or one JSON object with
 * --json). User errors print one line on stderr and exit with code 2.
 *
 *   deno task generate --prompt "Once upon a time" --max-tokens 20 --temperature 0 --json
 *   npx tsx src/cli/generate.ts --model models/stories260K.gguf --backend reference
 *   deno task generate --model gemma-3-4b-it-Q4_K_M.gguf --mmproj mmproj-model-f16.gguf --image shot.png --prompt "What is on the screen?"
 */
import { kvDtypeChoice, KvDTypeError } from "../engine/kv-cache.ts";
import { loadLoraAdapter } from "../model/lora-load.ts";
import { uploadLoraSet } from "../model/lora-set.ts";
import { fileURLToPath } from "node:url";
import { isBackendChoice, selectBackend, BACKEND_NAMES } from "../backend/select.ts";
import { BackendShapeError, BackendUnavailableError, type Backend } from "../backend/types.ts";
import { generate, GenerateInputError } from "../engine/generate.ts";
import { defaultSchedulerSteps } from "../engine/engine-factory.ts";
import { ModelLoadError } from "../model/config.ts";
import { uploadModel } from "../model/device-weights.ts";
import { ForwardInputError } from "../model/forward.ts";
import { type LoadProgress, loadModel } from "../model/load.ts";
import { cliArgs, exitProcess } from "../runtime/env.ts";
import { ArgsError, type FlagSpecs, parseArgs, usage } from "./args.ts";
import { checkSideFiles } from "./preflight.ts";
import { isQuantizeDType, QUANTIZE_DTYPES } from "../model/weights.ts";
import type { LoadedModel } from "../model/config.ts";
import type { PromptImage } from "../engine/engine-types.ts";
import { ImageDecodeError } from "../model/vision/png.ts";
import { decodeImage } from "../model/vision/image-decode.ts";
import { encodeWithImages, IMAGE_MARKER, MAX_IMAGE_PIXELS } from "../serve/prompt-images.ts";
import { ApiError } from "../serve/errors.ts";
import { readFile } from "../runtime/fs.ts";

/** The bundled model, found relative to this file so any working directory works. */
export const DEFAULT_MODEL = fileURLToPath(new URL("../../models/stories260K.gguf", import.meta.url));

const FLAGS = {
  model: { kind: "string", nonEmpty: true, help: "GGUF file or Hugging Face directory (default: bundled stories260K)" },
  quantize: { kind: "string", help: "block format the model's f32/f16/bf16 matrices are quantized into at load (round to nearest; rows that are not whole blocks stay as stored): q8_0 halves a bf16 model's memory at little cost, q6_k/q5_k/q4_k/q4_0… go further (default: as stored)" },
  prompt: { kind: "string", help: 'prompt text (default "Once upon a time")' },
  "max-tokens": { kind: "int", min: 0, help: "tokens to generate (default 64)" },
  temperature: { kind: "number", min: 0, help: "0 = greedy (default 0)" },
  "top-k": { kind: "int", min: 0, help: "keep the k most likely tokens, 0 = off (default 0)" },
  "top-p": { kind: "number", min: 0, max: 1, help: "nucleus mass, 1 = off (default 1)" },
  seed: { kind: "int", help: "sampling seed (default 0)" },
  "num-scheduler-steps": { kind: "int", min: 1, help: "decode forwards per read of their tokens, each fed the ids the one before sampled on the device: the same tokens (default 4 on WebGPU, else 1; serve's flag)" },
  mmproj: { kind: "string", nonEmpty: true, help: "a llama.cpp multimodal projector file (mmproj-*.gguf: LLaVA's or Gemma 3's vision tower), for --image" },
  image: { kind: "string", nonEmpty: true, help: `a PNG, JPEG or GIF file the prompt holds (needs --mmproj): at "${IMAGE_MARKER}" in the prompt, else before it` },
  lora: { kind: "string", help: "a LoRA adapter to run with: a llama.cpp GGUF adapter file or a Hugging Face PEFT directory (default none)" },
  "lora-scale": { kind: "number", help: "multiplies the adapter's delta (llama.cpp's --lora-scaled; default 1)" },
  backend: { kind: "string", help: `${BACKEND_NAMES.join("|")} (default auto)` },
  "kv-cache-dtype": { kind: "string", help: "auto|f16|f32|fp8: the KV cache's element type, as serve's flag (default auto: f16 where the backend's attention reads it)" },
  json: { kind: "boolean", help: 'print {"backend","prompt_ids","ids","text"}' },
  help: { kind: "boolean", help: "show this help" },
} satisfies FlagSpecs;

/** Errors the user can fix: reported in one line with exit code 2. */
const USER_ERRORS = [ArgsError, ModelLoadError, GenerateInputError, BackendUnavailableError, ForwardInputError, KvDTypeError, ImageDecodeError];

/** The prompt's ids and images: `text` as it is, or with `imagePath`'s image at its marker (before the text where it has none). */
async function promptOf(model: LoadedModel, text: string, imagePath: string | undefined): Promise<{ ids: number[]; images?: PromptImage[] }> {
  if (imagePath === undefined) return { ids: model.tokenizer.encode(text, { addBos: model.config.addBos }) };
  let bytes: Uint8Array;
  try {
    bytes = await readFile(imagePath);
  } catch {
    throw new ArgsError(`Image file not found: "${imagePath}"`);
  }
  const image = decodeImage(bytes, { maxPixels: MAX_IMAGE_PIXELS });
  try {
    const placed = encodeWithImages(model, text.includes(IMAGE_MARKER) ? text : `${IMAGE_MARKER}\n${text}`, [image], model.config.addBos, "--image");
    return { ids: placed.prompt, images: placed.images };
  } catch (e) {
    if (e instanceof ApiError) throw new GenerateInputError(e.message.replace("loaded with --mmproj", "given with --mmproj"));
    throw e;
  }
}

function write(stream: "stdout" | "stderr", text: string): void {
  (stream === "stdout" ? console.log : console.error)(text);
}

/** Prints load progress to stderr in 10% steps, only for files big enough to make a user wait. */
function progressPrinter(): (p: LoadProgress) => void {
  let shown = -1;
  return ({ bytesRead, totalBytes, note }) => {
    if (note) write("stderr", `loading: ${note}`);
    if (totalBytes < 64 * 2 ** 20) return;
    const tenth = Math.floor((bytesRead / totalBytes) * 10);
    if (tenth === shown) return;
    shown = tenth;
    write("stderr", `loading: ${tenth * 10}% of ${(totalBytes / 2 ** 20).toFixed(0)} MiB`);
  };
}

async function run(argv: readonly string[]): Promise<void> {
  const flags = parseArgs(argv, FLAGS);
  if (flags.help) {
    write("stdout", usage("generate", FLAGS));
    return;
  }
  const backendName = flags.backend ?? "auto";
  if (!isBackendChoice(backendName)) {
    throw new ArgsError(`Flag --backend expects one of ${BACKEND_NAMES.join(", ")}, got "${backendName}"`);
  }
  if (flags["top-p"] === 0) throw new ArgsError('Flag --top-p must be above 0, got "0"');
  const kvCacheDtype = kvDtypeChoice(flags["kv-cache-dtype"] ?? "auto");
  if (kvCacheDtype === undefined) throw new ArgsError(`Unknown KV cache dtype "${flags["kv-cache-dtype"]}"; choose auto, f16, f32 or fp8 (f8_e4m3)`);
  const quantize = flags.quantize;
  if (quantize !== undefined && !isQuantizeDType(quantize)) throw new ArgsError(`Unknown --quantize format "${quantize}"; choose ${QUANTIZE_DTYPES.join(", ")}`);
  await checkSideFiles({ lora: flags.lora === undefined ? [] : [{ name: "", path: flags.lora }], ...(flags.mmproj !== undefined ? { mmproj: flags.mmproj } : {}) });
  if (flags.image !== undefined && flags.mmproj === undefined) throw new ArgsError("Flag --image needs --mmproj, the model's vision projector");
  const model = await loadModel(flags.model ?? DEFAULT_MODEL, { onProgress: progressPrinter(), ...(quantize ? { quantize } : {}), ...(flags.mmproj !== undefined ? { mmproj: flags.mmproj } : {}) });
  const prompt = flags.prompt ?? "Once upon a time";
  const { ids: promptIds, images } = await promptOf(model, prompt, flags.image);
  if (promptIds.length > model.config.contextLength) {
    throw new GenerateInputError(
      `The prompt has ${promptIds.length} tokens, more than the context length ${model.config.contextLength}`,
    );
  }
  const adapter = flags.lora === undefined ? undefined : await loadLoraAdapter(flags.lora, model.config, { scale: flags["lora-scale"] ?? 1, hasOutput: model.weights.output !== undefined });
  const { backend, reason } = await selectBackend(backendName);
  let held: Backend | undefined = backend;
  try {
    if (!flags.json) write("stderr", `backend: ${reason}`);
    const device = uploadModel(backend, model);
    const lora = adapter && uploadLoraSet(backend, model.config, [adapter], model.weights.output !== undefined);
    const [result] = await generate(device, backend, [promptIds], {
      ...(lora ? { lora } : {}),
      maxTokens: flags["max-tokens"] ?? 64,
      temperature: flags.temperature ?? 0,
      topK: flags["top-k"] ?? 0,
      topP: flags["top-p"] ?? 1,
      seed: flags.seed ?? 0,
      kvCacheDtype,
      schedulerSteps: flags["num-scheduler-steps"] ?? defaultSchedulerSteps(backend),
      ...(images ? { images: [images] } : {}),
    });
    const text = model.tokenizer.decode(result.ids);
    if (flags.json) {
      write("stdout", JSON.stringify({ backend: backend.info.name, prompt_ids: promptIds, ids: result.ids, text }));
    } else {
      // An image's positions hold ids drawn from its pixels, not text: the prompt is shown as given.
      write("stdout", images ? `${prompt}${text}` : model.tokenizer.decode([...promptIds, ...result.ids]));
    }
    backend.destroy();
    held = undefined;
  } finally {
    held?.destroy();
  }
}

try {
  await run(cliArgs());
  exitProcess(0);
} catch (e) {
  const known = USER_ERRORS.some((cls) => e instanceof cls) || e instanceof BackendShapeError;
  const message = (e instanceof Error ? e.message : String(e)).split("\n")[0];
  write("stderr", known ? `error: ${message}` : `internal error: ${message}`);
  exitProcess(known ? 2 : 1);
}
