/**
 * The LoRA adapters an engine serves, by name (vLLM's `--lora-modules`, its runtime
 * load/unload): each has a slot in the runner's device set (StepRunner.setAdapters) and a
 * prefix-cache namespace of its own, so a prompt's KV computed under one adapter is never reused
 * under another or under the base model. Slots freed by an unload are reused by the next load.
 */
import { namespaceRoot } from "../../kv/index.ts";
import type { LoraAdapter } from "../model/lora.ts";
import type { StepRunner } from "./engine-runner.ts";
import { RequestParamError } from "./engine-types.ts";

/** A loaded adapter's place in the engine. */
export interface AdapterSlot {
  /** Its slot in the device set (1-based; 0 is the base model). */
  slot: number;
  /** The prefix-cache namespace of its sequences (kv/ `namespaceRoot` of its fingerprint). */
  root: number;
  adapter: LoraAdapter;
}

/**
 * Thrown for an adapter that cannot be loaded or unloaded as asked, or a request's adapter that is not
 * loaded (HTTP 400, or 404 for an unknown name). Its `field` is the request's `adapter`, which the
 * OpenAI-style APIs name `model` (refusals.ts); the load and unload routes name `lora_name` (lora.ts).
 */
export class LoraAdapterError extends RequestParamError {
  override name = "LoraAdapterError";
  constructor(message: string, readonly notFound = false) {
    super(message, "adapter");
  }
}

/**
 * The prefix-cache namespace of a request with an adapter (its {@link AdapterSlot.root}) and a cache
 * salt: the salt's root chained under the adapter's; undefined for neither. The engine and a cluster's
 * router compute it alike, so both look a prompt's blocks up under the same chain hashes.
 */
export function cacheRootOf(adapterRoot: number | undefined, salt: string | undefined): number | undefined {
  return salt === undefined ? adapterRoot : namespaceRoot(`salt:${salt}`, adapterRoot ?? null);
}

/** The prefix-cache namespace of an adapter with `fingerprint` (LoraAdapter.fingerprint). */
export function adapterRoot(fingerprint: string): number {
  return namespaceRoot(`lora:${fingerprint}`);
}

/** Most adapters one engine holds at once (vLLM's `--max-loras` bounds a batch; we bound the set). */
export const MAX_LORA_ADAPTERS = 64;

/** The adapters of one engine. */
export class EngineAdapters {
  private readonly byName = new Map<string, AdapterSlot>();
  /** By slot - 1; undefined where an adapter was unloaded. */
  private slots: (LoraAdapter | undefined)[] = [];

  constructor(private readonly runner: StepRunner) {}

  /** Names of the loaded adapters, in load order. */
  names(): string[] {
    return [...this.byName.keys()];
  }

  /** The adapter named `name`, or a {@link LoraAdapterError} (not found). */
  resolve(name: string): AdapterSlot {
    const a = this.byName.get(name);
    if (!a) throw new LoraAdapterError(`The LoRA adapter "${name}" is not loaded`, true);
    return a;
  }

  /** Loads `adapter` as `name` (a name already loaded is refused: unload it first). */
  load(name: string, adapter: LoraAdapter): AdapterSlot {
    if (!this.runner.setAdapters) throw new LoraAdapterError("This engine's runner cannot apply LoRA adapters");
    if (name === "") throw new LoraAdapterError("A LoRA adapter needs a name");
    if (this.byName.has(name)) throw new LoraAdapterError(`A LoRA adapter named "${name}" is already loaded`);
    let index = this.slots.indexOf(undefined);
    if (index < 0) {
      if (this.slots.length >= MAX_LORA_ADAPTERS) throw new LoraAdapterError(`${MAX_LORA_ADAPTERS} LoRA adapters are already loaded; unload one first`);
      index = this.slots.length;
    }
    const next = this.slots.slice();
    next[index] = adapter;
    this.runner.setAdapters(next);
    this.slots = next;
    const entry: AdapterSlot = { slot: index + 1, root: adapterRoot(adapter.fingerprint), adapter };
    this.byName.set(name, entry);
    return entry;
  }

  /** Unloads `name`; `inUse` counts the requests still running with it (they must end first). */
  unload(name: string, inUse: number): void {
    const a = this.resolve(name);
    if (inUse > 0) throw new LoraAdapterError(`The LoRA adapter "${name}" is in use by ${inUse} request${inUse === 1 ? "" : "s"}; unload it when they end`);
    const next = this.slots.slice();
    next[a.slot - 1] = undefined;
    while (next.length > 0 && next[next.length - 1] === undefined) next.pop();
    this.runner.setAdapters!(next);
    this.slots = next;
    this.byName.delete(name);
  }
}
