/**
 * The greeting on a TCP worker connection, before the cluster protocol (worker-protocol.ts) starts.
 * The worker speaks first ("hello", with a nonce, saying whether it requires the worker token). With
 * a token on both sides they prove to each other that they know it, without sending it: the server
 * answers HMAC-SHA256(token, "server|" + the worker's nonce) with a nonce of its own, the worker
 * checks it and answers HMAC(token, "worker|" + the server's nonce). So a worker takes orders (which
 * model file to load, which prompts to run) only from a server that knows the token, and a server with
 * a token sends prompts only to workers that know it (a stray NATS announcement cannot attract them).
 * The bytes that follow are not encrypted: keep clusters on private networks, or tunnel them.
 */
import { Buffer } from "node:buffer";
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { ThreadPort } from "../runtime/threads.ts";

/** Thrown when a greeting fails: a token missing on one side, a wrong token, or no greeting at all. */
export class WorkerAuthError extends Error {
  override name = "WorkerAuthError";
}

type Greeting =
  | { op: "hello"; v: 1; nonce: string; auth: boolean }
  | { op: "auth"; mac: string; nonce: string }
  | { op: "authed"; mac: string }
  | { op: "failed"; message: string };

const mac = (token: string, side: "server" | "worker", nonce: string) => createHmac("sha256", token).update(`${side}|${nonce}`).digest("hex");

function sameMac(a: unknown, b: string): boolean {
  if (typeof a !== "string" || a.length !== b.length) return false;
  return timingSafeEqual(Buffer.from(a), Buffer.from(b));
}

/** Resolves with the next message on `port`, or rejects after `timeoutMs` or when the port fails. */
function nextMessage(port: ThreadPort, timeoutMs: number, what: string): Promise<Greeting> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new WorkerAuthError(`No ${what} within ${timeoutMs / 1000} s`)), timeoutMs);
    port.onError((e) => {
      clearTimeout(timer);
      reject(new WorkerAuthError(`The connection failed during the greeting: ${e.message}`));
    });
    port.onMessage((m) => {
      clearTimeout(timer);
      resolve(m as Greeting);
    });
  });
}

/**
 * The worker's side: greets the server on a new connection and, when `token` is set, waits for it to
 * prove it knows the token. Resolves when the cluster protocol may start; rejects (after telling the
 * server why) otherwise; the caller closes the port.
 */
export async function greetServer(port: ThreadPort, token: string | undefined, timeoutMs = 10_000): Promise<void> {
  const nonce = randomBytes(16).toString("hex");
  port.post({ op: "hello", v: 1, nonce, auth: token !== undefined } satisfies Greeting);
  if (token === undefined) return;
  const m = await nextMessage(port, timeoutMs, "answer from the server");
  if (m.op !== "auth" || !sameMac(m.mac, mac(token, "server", nonce)) || typeof m.nonce !== "string") {
    const why = m.op === "auth" ? "The server's worker token does not match this worker's" : "This worker requires the worker token (--worker-token or EVOLVING_WORKER_TOKEN on the server)";
    port.post({ op: "failed", message: why } satisfies Greeting);
    throw new WorkerAuthError(why);
  }
  port.post({ op: "authed", mac: mac(token, "worker", m.nonce) } satisfies Greeting);
}

/**
 * The server's side: reads the worker's greeting and, when either side has a token, proves itself and
 * checks the worker's proof. Rejects naming worker `id` at `addr` when they do not agree.
 */
export async function greetWorker(port: ThreadPort, id: string, addr: string, token: string | undefined, timeoutMs = 10_000): Promise<void> {
  const who = `Worker ${id} at ${addr}`;
  const hello = await nextMessage(port, timeoutMs, `greeting from ${who}`).catch((e: Error) => {
    throw new WorkerAuthError(`${who} did not greet (is it an evolving worker of this version?): ${e.message}`);
  });
  if (hello.op !== "hello" || hello.v !== 1 || typeof hello.nonce !== "string") throw new WorkerAuthError(`${who} did not greet as an evolving worker of this version does`);
  if (token === undefined) {
    if (hello.auth) throw new WorkerAuthError(`${who} requires the worker token; give the server the same --worker-token (or EVOLVING_WORKER_TOKEN)`);
    return;
  }
  if (!hello.auth) throw new WorkerAuthError(`${who} does not check the worker token; start it with the same --worker-token (or EVOLVING_WORKER_TOKEN)`);
  const nonce = randomBytes(16).toString("hex");
  port.post({ op: "auth", mac: mac(token, "server", hello.nonce), nonce } satisfies Greeting);
  const m = await nextMessage(port, timeoutMs, `proof from ${who}`);
  if (m.op === "failed") throw new WorkerAuthError(`${who} refused the server: ${m.message}`);
  if (m.op !== "authed" || !sameMac(m.mac, mac(token, "worker", nonce))) throw new WorkerAuthError(`${who} did not prove it knows the worker token`);
}
