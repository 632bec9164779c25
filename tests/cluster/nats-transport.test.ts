/**
 * connectNats(): the NATS client's Node transport, kept from crashing the process when a server
 * refuses the token and resets the connection at once (a socket error emitted after the transport
 * dropped its listeners: an uncaught `read ECONNRESET` on Deno).
 */
import assert from "node:assert/strict";
import net from "node:net";
import { test } from "../harness.ts";
import { connectNats } from "../../src/cluster/nats-transport.ts";

/** A stand-in NATS server that asks for a token, answers CONNECT with an authorization error and resets. */
async function refusingServer(): Promise<{ url: string; close(): Promise<void> }> {
  const server = net.createServer((s) => {
    s.on("error", () => {});
    s.write(`INFO {"server_id":"refuser","version":"2.9.10","auth_required":true,"max_payload":1048576}\r\n`);
    s.once("data", () => {
      s.write("-ERR 'Authorization Violation'\r\n");
      s.resetAndDestroy();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const { port } = server.address() as net.AddressInfo;
  return { url: `127.0.0.1:${port}`, close: () => new Promise<void>((r) => server.close(() => r())) };
}

test("connectNats() rejects a refused token with the server's error, and a reset right after crashes nothing", async () => {
  const server = await refusingServer();
  try {
    // Without the guard the first try already ended Deno's test process with an uncaught ECONNRESET
    // (Node orders the events so that it survives either way).
    // (The connect timeout is a generous deadline: the refusal comes at once, even on a loaded machine.)
    for (let i = 0; i < 10; i++) {
      await assert.rejects(
        connectNats({ servers: server.url, token: "wrong", maxReconnectAttempts: -1, reconnectTimeWait: 500, timeout: 30_000 }),
        (e: unknown) => e instanceof Error && /Authorization Violation/i.test(e.message),
      );
    }
    // Errors emitted late arrive after a macrotask; give them one.
    await new Promise((r) => setTimeout(r, 50));
  } finally {
    await server.close();
  }
});
