/**
 * One test API for both runtimes: `Deno.test` under Deno, `node:test` under Node.
 * Test files import `test` from here and assertions from `node:assert/strict`
 * (Deno's std lives on JSR, which these machines cannot reach).
 */
type TestFn = () => void | Promise<void>;

interface TestOptions {
  /** Skip with a reason printed (only for capabilities the machine truly lacks, e.g. no CUDA device). */
  ignore?: boolean;
}

interface DenoTestApi {
  test(def: { name: string; fn: TestFn; ignore?: boolean; sanitizeOps?: boolean; sanitizeResources?: boolean }): void;
}

const denoApi = (globalThis as unknown as { Deno?: DenoTestApi }).Deno;
const nodeTest = denoApi ? undefined : (await import("node:test")).test;

/**
 * Where scripts/node-tests.ts collects the Node tests a file registers, so that it can await them
 * before it takes the next file (absent under `node --test` and Deno).
 */
export const NODE_PENDING_TESTS: unique symbol = Symbol.for("evolving.nodePendingTests") as never;

/** Registers a test on the current runtime's test runner. */
export function test(name: string, fn: TestFn, options: TestOptions = {}): void {
  if (denoApi) {
    // WebGPU devices and servers hold resources across tests by design; leak checks stay off.
    denoApi.test({ name, fn, ignore: options.ignore, sanitizeOps: false, sanitizeResources: false });
  } else {
    const done = nodeTest!(name, { skip: options.ignore ?? false }, fn);
    (globalThis as { [NODE_PENDING_TESTS]?: Promise<unknown>[] })[NODE_PENDING_TESTS]?.push(done);
  }
}

/** Path of the project root, for fixtures. */
export const projectRoot: string = new URL("..", import.meta.url).pathname.replace(/\/$/, "");

/** Path of the shared folder beside the project (../shared in CI and for developers). */
export const sharedRoot: string = `${projectRoot}/../shared`;
