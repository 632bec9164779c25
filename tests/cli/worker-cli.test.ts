/** The worker CLI (`worker --listen`) as an operator meets it: spawned under Node (tsx), its log lines. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import net from "node:net";
import { projectRoot, test } from "../harness.ts";

test("worker CLI names the address of a connection it refuses, even one that hung up during the greeting", async () => {
  const child = spawn("node", ["--import", `${projectRoot}/node_modules/tsx/dist/loader.mjs`, `${projectRoot}/src/cli/worker.ts`, "--listen", "127.0.0.1:0"], {
    cwd: projectRoot, stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, NODE_OPTIONS: "", EVOLVING_WORKER_TOKEN: "s3cret" },
  });
  let log = "";
  // The deadline only turns a worker that never logs into a failure (generous: CI may be loaded).
  const logged = (re: RegExp) => new Promise<RegExpExecArray>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the worker did not log ${re} within 120 s: ${log}`)), 120_000);
    const look = () => {
      const m = re.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(m);
      }
    };
    child.stderr!.on("data", (d: Uint8Array) => {
      log += new TextDecoder().decode(d);
      look();
    });
    child.on("exit", (code) => reject(new Error(`worker exited with ${code}: ${log}`)));
    look();
  });
  try {
    const [, host, port] = await logged(/listening on (\S+):(\d+)/);
    // A stranger (a port scanner, a server killed at once) connects and hangs up before greeting.
    const socket = net.connect({ host, port: Number(port) });
    const local = await new Promise<number>((resolve) => socket.once("connect", () => resolve(socket.localPort!)));
    // A FIN, with whatever the worker sent read: destroy() with unread bytes sends a reset instead,
    // and the worker's log then says "read ECONNRESET" (seen once in CI).
    socket.resume();
    socket.end();
    const [line] = await logged(/refused a connection from .*/);
    assert.equal(line, `refused a connection from 127.0.0.1:${local}: The connection failed during the greeting: The connection closed`);
    socket.destroy();
  } finally {
    child.kill();
  }
});
