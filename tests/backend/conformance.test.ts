/**
 * The backend conformance suite: every op, on every backend available on this machine, against the
 * reference backend, on fresh inputs from a seeded generator (CONFORMANCE_SEED overrides the seed),
 * with recycled buffers poisoned with NaN before each case. See conformance-cases*.ts for the
 * shapes and the tolerance of each op.
 *
 * WebGPU must be present: without an adapter the suite fails, unless EVOLVING_ALLOW_NO_WEBGPU=1
 * (for machines without Vulkan) turns that into a skip. CUDA runs where its module and a device exist.
 */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { envVar } from "../../src/runtime/env.ts";
import { createReferenceBackend } from "../../src/backend/reference/index.ts";
import { denseBlockQuantStorage } from "../../src/backend/dtype-codec.ts";
import type { Backend, WeightDType } from "../../src/backend/types.ts";
import { conformanceCandidates } from "./conformance-backends.ts";
import { attentionCases } from "./conformance-cases-attention.ts";
import { denseCases } from "./conformance-cases.ts";
import { edgeCases } from "./conformance-cases-edges.ts";
import { moeCases } from "./conformance-cases-moe.ts";
import { recurrentCases } from "./conformance-cases-recurrent.ts";
import { samplingCases } from "./conformance-cases-sampling.ts";
import { type Case, compareOutputs, poisonRecycled, Rng, seedFor } from "./conformance-support.ts";

const baseSeed = Number(envVar("CONFORMANCE_SEED") ?? 20240601);
const cases: Case[] = [...denseCases(), ...attentionCases(), ...moeCases(), ...edgeCases(), ...samplingCases(), ...recurrentCases()];
const ops = [...new Set(cases.map((c) => c.op))];
const reference = createReferenceBackend();

/**
 * The reference as a backend under test stores weights: where it declares `denseBlockQuants`, the
 * reference receives the same f16 (or bf16) bytes, so every case still checks the backend
 * exactly against what it says it holds.
 */
function referenceFor(b: Backend): Backend {
  if (!b.info.denseBlockQuants) return reference;
  return new Proxy(reference, {
    get(target, key) {
      if (key === "uploadWeight") {
        return (raw: Uint8Array, shape: readonly number[], dtype: WeightDType) => {
          const dense = denseBlockQuantStorage(raw, dtype, shape.reduce((a, d) => a * d, 1));
          return target.uploadWeight(dense.raw, shape, dense.dtype);
        };
      }
      const v = Reflect.get(target, key, target);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
}

for (const cand of await conformanceCandidates()) {
  const backend = cand.backend;
  if (!backend) {
    const why = `${cand.name} backend is unavailable: ${cand.reason}`;
    if (cand.required) {
      test(`conformance needs the ${cand.name} backend`, () => {
        assert.fail(`${why} (set EVOLVING_ALLOW_NO_WEBGPU=1 to skip on a machine without Vulkan)`);
      });
    } else {
      test(`conformance on ${cand.name} (${cand.reason})`, () => {}, { ignore: true });
    }
    continue;
  }
  const oracle = referenceFor(backend);
  for (const op of ops) {
    test(`${op}() on ${cand.name} matches reference`, async () => {
      const max = backend.info.maxHeadDim ?? Infinity;
      const kvDtypes = backend.info.kvDtypes ?? ["f32"];
      // Every case runs, and the failures are reported together: on a lent GPU machine one run must
      // say all that is wrong (a failure used to hide the op's later cases).
      const failures: string[] = [];
      const has = (x: Case) => x.optionalOp === undefined || typeof backend[x.optionalOp] === "function";
      for (const c of cases.filter((x) => x.op === op && (x.headDim ?? 0) <= max && kvDtypes.includes(x.kvDtype ?? "f32") && has(x))) {
        const seed = seedFor(`${c.op} ${c.name}`, baseSeed);
        const want = await c.run(oracle, new Rng(seed));
        poisonRecycled(backend);
        let diff: string | undefined;
        try {
          diff = compareOutputs(await c.run(backend, new Rng(seed)), want, c.tolerance);
        } catch (e) {
          diff = `threw ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`;
        }
        if (diff !== undefined) failures.push(`${op} ${c.name} (seed ${seed}) on ${cand.name}: ${diff}`);
      }
      assert.deepEqual(failures, [], `${failures.length} case(s) failed:\n${failures.join("\n")}`);
    });
  }
  // Last test of the file: releasing the device lets the Node process exit.
  test(`conformance releases the ${cand.name} device`, () => {
    backend.destroy();
  });
}
