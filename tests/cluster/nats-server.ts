/** A real NATS server for the control-plane tests (Debian's `nats-server`, installed by scripts/setup.sh). */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";

/** Starts `nats-server` on a free loopback port (with `args`); resolves with its URL once it accepts clients. */
export function startNatsServer(args: string[] = []): Promise<{ url: string; stop(): void }> {
  const bin = ["/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"].find((p) => existsSync(p)) ?? "nats-server";
  const child: ChildProcess = spawn(bin, ["-a", "127.0.0.1", "-p", "-1", ...args], { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  return new Promise((resolve, reject) => {
    // The deadline only turns a server that never listens into a failure (generous: CI may be loaded).
    const timer = setTimeout(() => {
      child.kill();
      reject(new Error(`nats-server did not listen within 60 s: ${log}`));
    }, 60_000);
    const fail = (e: Error) => {
      clearTimeout(timer);
      reject(e);
    };
    child.on("error", (e) => fail(new Error(`Cannot start nats-server (bash scripts/setup.sh installs it): ${e.message}`)));
    child.stderr!.on("data", (d: Uint8Array) => {
      log += new TextDecoder().decode(d);
      const m = /Listening for client connections on (\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve({ url: `nats://${m[1]}`, stop: () => child.kill() });
      }
    });
    child.on("exit", (code) => fail(new Error(`nats-server exited with ${code}: ${log}`)));
  });
}
