/**
 * A cluster's LoRA adapters: loaded on every worker (and on each worker that joins), each with its
 * cache namespace and requests in flight; unloaded from every worker that has it once its loads settle.
 * A reload of a name (vLLM's `load_inplace`) loads the new adapter on every worker first, under a name
 * of its own there, and swaps it in only once all have it: a worker that cannot load it leaves the old
 * one serving.
 */
import { adapterRoot, LoraAdapterError, MAX_LORA_ADAPTERS } from "../engine/engine-adapters.ts";
import type { GenerateResult, RequestHandle } from "../engine/engine-types.ts";
import type { LoraAdapter } from "../model/lora.ts";
import type { ClusterWorker } from "./cluster-worker.ts";

/**
 * A loaded LoRA adapter: its cache namespace, its requests in flight, the workers that finished
 * loading it, and when every load sent so far has settled (an unload waits for them, so that a worker
 * still loading it when it is unloaded does not keep it).
 */
export interface AdapterEntry {
  adapter: LoraAdapter;
  /** The name the workers hold it under: the adapter's own, or a name of its own for a reload (see replace). */
  workerName: string;
  root: number;
  /** Its requests in flight, counted by {@link adapterRequest}. */
  inFlight: number;
  /** Woken once {@link inFlight} next drops to 0 (a retired adapter's unload waits on it). */
  whenIdle: (() => void)[];
  loadedOn: Set<ClusterWorker>;
  /** The workers a load was sent to (a worker that joined while the load waited is not sent a second). */
  sentTo: Set<ClusterWorker>;
  settled: Promise<void>;
}

/** The adapters of a cluster whose workers are `workers()`. */
export class ClusterAdapters {
  /** LoRA adapters by name: what joining workers load, each one's cache namespace and requests in flight. */
  private readonly adapters = new Map<string, AdapterEntry>();
  /** Unloads still under way, by worker-side name: a new load of the name waits for its own to end. */
  private readonly unloading = new Map<string, Promise<void>>();
  /** Reloads so far (each one's worker-side name is new). */
  private reloads = 0;
  /** Adapters a reload replaced whose requests have yet to end (the workers still hold them). */
  private retiring = 0;

  constructor(private readonly workers: () => readonly ClusterWorker[]) {}

  /** The loaded adapter `name`, if any. */
  get(name: string): AdapterEntry | undefined {
    return this.adapters.get(name);
  }

  /** Loads every adapter on a worker that joined; it serves an adapter's requests once it has loaded it. */
  joined(w: ClusterWorker): void {
    // Until then the router sends them elsewhere.
    for (const [name, a] of this.adapters) this.joinedOne(w, name, a);
  }

  private joinedOne(w: ClusterWorker, name: string, a: AdapterEntry): void {
    const load = this.loadOn(w, name, a).catch((e) => {
      console.error(`Worker ${w.engine.id} could not load the LoRA adapter "${name}": ${e instanceof Error ? e.message : String(e)}`);
    });
    a.settled = Promise.all([a.settled, load]).then(() => {});
  }

  /** Cluster.loadAdapter. */
  async load(name: string, adapter: LoraAdapter): Promise<void> {
    if (this.adapters.has(name)) throw new LoraAdapterError(`A LoRA adapter named "${name}" is already loaded`);
    // Registered at once (a second load of the name is refused; a worker joining meanwhile loads it
    // too); its requests go only to workers that have finished loading it.
    let loaded!: () => void;
    const entry = newEntry(adapter, name, new Promise((r) => (loaded = r)));
    this.adapters.set(name, entry);
    // An unload of the name still under way ends first (the workers must not have it twice).
    await this.unloading.get(name);
    const workers = this.adapters.get(name) === entry ? this.workers().filter((w) => w.engine.alive && !entry.sentTo.has(w)) : [];
    const loads = Promise.allSettled(workers.map((w) => this.loadOn(w, name, entry)));
    void loads.then(() => loaded());
    const done = await loads;
    const failed = done.findIndex((d) => d.status === "rejected");
    if (failed < 0) return;
    // Unloaded meanwhile: that unload lets go of it on the workers that have it.
    if (this.adapters.get(name) === entry) await this.drop(name, entry);
    const why = (done[failed] as PromiseRejectedResult).reason;
    throw new LoraAdapterError(`Worker ${workers[failed].id} could not load the LoRA adapter "${name}": ${why instanceof Error ? why.message : String(why)}`);
  }

  /**
   * Cluster.replaceAdapter: loads `adapter` on every running worker beside the one loaded as `name`
   * (a plain load when there is none), then swaps it in and unloads the old one once its requests end.
   * When a worker cannot load it, none keeps it, the old one serves on, and the failure is thrown.
   */
  async replace(name: string, adapter: LoraAdapter): Promise<void> {
    const old = this.adapters.get(name);
    if (!old) return await this.load(name, adapter);
    if (old.inFlight > 0) throw new LoraAdapterError(`The LoRA adapter "${name}" is in use by ${old.inFlight} request${old.inFlight === 1 ? "" : "s"}; reload it when they end`);
    // The new one needs a slot beside the old one on every worker. Unloading the old one first would
    // leave the name unloaded (refusing its requests) until every worker has the new one, and for good
    // when one cannot load it: the old one is read again from a file the reload has most likely replaced.
    const held = this.adapters.size + this.unloading.size + this.retiring;
    if (held >= MAX_LORA_ADAPTERS) {
      throw new LoraAdapterError(
        `The LoRA adapter "${name}" cannot be reloaded in place while the workers hold ${held} adapters: a reload loads the new one beside the old one (which serves until every worker has the new one) and a worker holds at most ${MAX_LORA_ADAPTERS}; unload another adapter first, or unload "${name}" and load it again`,
      );
    }
    await old.settled;
    let loaded!: () => void;
    const entry = newEntry(adapter, `${name}\u0000reload-${++this.reloads}`, new Promise((r) => (loaded = r)));
    const workers = this.workers().filter((w) => w.engine.alive);
    const done = await Promise.allSettled(workers.map(async (w) => {
      entry.sentTo.add(w);
      await w.engine.loadAdapter(entry.workerName, adapter);
      entry.loadedOn.add(w);
    }));
    loaded();
    const failed = done.findIndex((d) => d.status === "rejected");
    // Unloaded (or reloaded) meanwhile: the name is no longer the old adapter's to swap.
    const gone = this.adapters.get(name) !== old;
    if (failed >= 0 || gone) {
      await this.release(entry);
      if (gone) throw new LoraAdapterError(`The LoRA adapter "${name}" was unloaded or reloaded while it reloaded`);
      const why = (done[failed] as PromiseRejectedResult).reason;
      throw new LoraAdapterError(`Worker ${workers[failed].id} could not load the LoRA adapter "${name}" (the one loaded before serves on): ${why instanceof Error ? why.message : String(why)}`);
    }
    this.adapters.set(name, entry);
    for (const w of this.workers()) {
      if (entry.loadedOn.has(w)) w.adapters.add(name);
      else w.adapters.delete(name);
    }
    // A worker that joined during the load was sent the old one: it loads the new one now.
    for (const w of this.workers()) if (w.engine.alive && !entry.sentTo.has(w)) this.joinedOne(w, name, entry);
    void this.retire(old);
  }

  /** Cluster.unloadAdapter. */
  async unload(name: string): Promise<void> {
    const a = this.adapters.get(name);
    if (!a) throw new LoraAdapterError(`The LoRA adapter "${name}" is not loaded`, true);
    if (a.inFlight > 0) throw new LoraAdapterError(`The LoRA adapter "${name}" is in use by ${a.inFlight} request${a.inFlight === 1 ? "" : "s"}; unload it when they end`);
    await this.drop(name, a);
  }

  /** Names of the loaded adapters. */
  names(): string[] {
    return [...this.adapters.keys()];
  }

  /** Adapters with requests in flight (all counted as running: the workers do not report theirs). */
  requests(): { running: string[]; waiting: string[] } {
    return { running: [...this.adapters].filter(([, a]) => a.inFlight > 0).map(([name]) => name), waiting: [] };
  }

  /** Loads `entry` as `name` on worker `w`; it serves the adapter's requests from then on, unless the adapter was unloaded meanwhile. */
  private async loadOn(w: ClusterWorker, name: string, entry: AdapterEntry): Promise<void> {
    entry.sentTo.add(w);
    await w.engine.loadAdapter(entry.workerName, entry.adapter);
    entry.loadedOn.add(w);
    if (this.adapters.get(name) === entry) w.adapters.add(name);
  }

  /**
   * Forgets the adapter `name` (its requests are refused from now on) and unloads it from every worker
   * that loaded it, once the loads still under way have ended (a worker still loading it would
   * otherwise keep it, and refuse the name for good).
   */
  private async drop(name: string, entry: AdapterEntry): Promise<void> {
    this.adapters.delete(name);
    for (const w of this.workers()) w.adapters.delete(name);
    await this.release(entry);
  }

  /** Unloads `entry` from every worker that loaded it, once the loads still under way have ended. */
  private async release(entry: AdapterEntry): Promise<void> {
    const key = entry.workerName;
    const prior = this.unloading.get(key);
    const done = (async () => {
      await prior;
      await entry.settled;
      await Promise.allSettled([...entry.loadedOn].map((w) => w.engine.unloadAdapter(key)));
    })();
    this.unloading.set(key, done);
    await done;
    if (this.unloading.get(key) === done) this.unloading.delete(key);
  }

  /** Unloads an adapter a reload replaced, once the requests that took it have ended. */
  private async retire(old: AdapterEntry): Promise<void> {
    this.retiring++;
    try {
      while (old.inFlight > 0) await new Promise<void>((r) => old.whenIdle.push(r));
    } finally {
      this.retiring--;
    }
    await this.release(old);
  }
}

function newEntry(adapter: LoraAdapter, workerName: string, settled: Promise<void>): AdapterEntry {
  return { adapter, workerName, root: adapterRoot(adapter.fingerprint), inFlight: 0, whenIdle: [], loadedOn: new Set(), sentTo: new Set(), settled };
}

/**
 * Counts a request of `entry` in flight; returns what counts it ended (call it once, when the request
 * is done), which wakes whoever waits for the adapter's last request to end.
 */
export function adapterRequest(entry: AdapterEntry): () => void {
  entry.inFlight++;
  return () => {
    if (--entry.inFlight === 0) for (const wake of entry.whenIdle.splice(0)) wake();
  };
}

/** `text` with the worker-side name `from` (as written, or as JSON writes it) quoted as `to`. */
function renamed(text: string, from: string, to: string): string {
  return text.replaceAll(from, to).replaceAll(JSON.stringify(from).slice(1, -1), JSON.stringify(to).slice(1, -1));
}

/** `e` (an Error: its class and fields kept) with the worker-side name `from` quoted as `to`. */
function renameError<E>(e: E, from: string, to: string): E {
  if (e instanceof Error) e.message = renamed(e.message, from, to);
  return e;
}

/**
 * What `submit` (a worker's) gives for a request of the adapter `name`, whose workers hold it under
 * the name `entry.workerName` (a reload's, see ClusterAdapters.replace): a refusal the worker throws
 * or settles later, and its result's error, quote `name` as the client knows it, not the worker's.
 */
export function underClientName(entry: AdapterEntry | undefined, name: string | undefined, submit: () => RequestHandle): RequestHandle {
  if (entry === undefined || name === undefined || entry.workerName === name) return submit();
  const from = entry.workerName;
  let h: RequestHandle;
  try {
    h = submit();
  } catch (e) {
    throw renameError(e, from, name);
  }
  const result = h.result.then((r): GenerateResult => {
    if (r.refused) renameError(r.refused, from, name);
    return r.error === undefined ? r : { ...r, error: renamed(r.error, from, name) };
  });
  return {
    id: h.id, stream: h.stream, result, cancel: () => h.cancel(),
    ...(h.refusal ? { refusal: h.refusal.then((e) => e && renameError(e, from, name)) } : {}),
    get sessionId() {
      return h.sessionId;
    },
  };
}
