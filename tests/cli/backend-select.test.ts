/** selectBackend(): what `--backend` resolves to, and the reasons and errors it reports. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { BACKEND_NAMES, isBackendChoice, selectBackend } from "../../src/backend/select.ts";
import { BackendUnavailableError } from "../../src/backend/types.ts";

test("selectBackend() returns the reference backend when asked for it", async () => {
  const { backend, reason } = await selectBackend("reference");
  assert.equal(backend.info.name, "reference");
  assert.match(reason, /reference \(requested\)/);
  const x = backend.upload(new Float32Array([1, 2]), [2]);
  assert.deepEqual(Array.from(await backend.download(backend.add(x, x))), [2, 4]);
});

test("selectBackend() in auto mode names its pick and every better backend it skipped", async () => {
  const { backend, reason } = await selectBackend("auto");
  assert.match(reason, new RegExp(`^auto picked ${backend.info.name}`));
  const order = ["cuda", "webgpu", "reference"];
  for (const better of order.slice(0, order.indexOf(backend.info.name))) {
    assert.match(reason, new RegExp(`skipped.*${better} \\(`), reason);
  }
  backend.destroy();
});

test("selectBackend() refuses an explicit backend that cannot start, saying why", async () => {
  for (const name of ["cuda", "webgpu"] as const) {
    try {
      const { backend } = await selectBackend(name);
      assert.equal(backend.info.name, name); // available on this machine: it must be the one asked for
      backend.destroy();
    } catch (e) {
      assert.ok(e instanceof BackendUnavailableError, String(e));
      assert.match(e.message, new RegExp(`^Backend "${name}" is unavailable: \\S`));
      assert.equal(e.message.includes("\n"), false);
    }
  }
});

test("isBackendChoice() accepts exactly the documented names", async () => {
  assert.deepEqual([...BACKEND_NAMES], ["auto", "reference", "webgpu", "cuda"]);
  assert.equal(isBackendChoice("webgpu"), true);
  assert.equal(isBackendChoice("tpu"), false);
  await assert.rejects(() => selectBackend("tpu" as "auto"), /Unknown backend "tpu"/);
});
