/**
 * The HTTP layer under hostile or careless clients, over raw sockets: an upload that stalls is cut
 * with a 408 (Deno never timed one out, Node only after 5 minutes), a refused body closes its
 * connection rather than leaving it to be reused, a body that cannot be read is a 400 (it was a
 * 500), an overflowing number is quoted as itself, and a stream whose client stops reading holds
 * nothing once the client leaves or the server shuts down.
 */
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { projectRoot, test } from "../harness.ts";
import { loadModel } from "../../src/model/load.ts";
import { createApp } from "../../src/serve/app.ts";
import { startServer } from "../../src/serve/server.ts";

const modelPath = `${projectRoot}/models/stories260K.gguf`;
const model = await loadModel(modelPath);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const chat = (extra: Record<string, unknown> = {}) => JSON.stringify({ model: "stories260K", messages: [{ role: "user", content: "Hi" }], max_tokens: 2, ...extra });

/** A raw connection: what it received, and whether the server closed it. */
interface Raw {
  socket: Socket;
  received: () => string;
  closed: () => boolean;
}

async function rawClient(port: number): Promise<Raw> {
  const socket = connect(port, "127.0.0.1");
  let got = "";
  let closed = false;
  socket.on("data", (d) => (got += String(d)));
  socket.on("error", () => {});
  socket.on("end", () => (closed = true));
  socket.on("close", () => (closed = true));
  await new Promise<void>((r) => socket.once("connect", () => r()));
  return { socket, received: () => got, closed: () => closed };
}

/**
 * What the server does over a socket comes "soon": the deadline only turns a hang into a failure,
 * generous for a loaded CI machine (a normal run returns as soon as `done` holds).
 */
const SOON_MS = 30_000;

/** Waits up to `ms` for `done`; whether it came. */
async function until(done: () => boolean, ms = SOON_MS): Promise<boolean> {
  const t0 = Date.now();
  while (!done()) {
    if (Date.now() - t0 > ms) return false;
    await sleep(20);
  }
  return true;
}

test("an upload that stalls mid-body gets a 408 naming the wait and its connection closed, and is not counted in flight", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", bodyTimeoutMs: 300 });
  try {
    const declared = await rawClient(s.port);
    declared.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"model"`);
    const chunked = await rawClient(s.port);
    chunked.socket.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n{"model"\r\n`);
    await sleep(100);
    // Waiting for its body, a request is no generation yet: a drain does not wait for it.
    assert.equal(s.inFlight, 0);
    for (const c of [declared, chunked]) {
      assert.ok(await until(() => c.received().endsWith("}")), `no answer to the stalled upload; got ${JSON.stringify(c.received())}`);
      assert.match(c.received(), /^HTTP\/1\.1 408 [^]*\r\nconnection: close\r\n/i);
      // Node closes the connection; Deno's server (no timeouts of its own) keeps it until the client does.
      if (!("Deno" in globalThis)) assert.ok(await until(() => c.closed()), "the stalled upload's connection was not closed");
      assert.match(c.received(), /"code":"body_timeout"/);
      assert.match(c.received(), /no bytes of the request body for 0\.3 s/);
      c.socket.destroy();
    }
  } finally {
    await s.shutdown();
  }
});

test("a body that keeps coming, however slowly, is read whole though it takes longer than the body timeout", async () => {
  // The wait is for the next bytes, not for the whole body: 30 pieces or more 50 ms apart take 1.5 s, past the
  // 1 s timeout, while each gap stays 20 times shorter than it (a loaded machine's late timers too).
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", bodyTimeoutMs: 1000 });
  try {
    const slow = await rawClient(s.port);
    const body = chat();
    slow.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n`);
    const piece = Math.max(1, Math.floor(body.length / 30));
    const t0 = Date.now();
    for (let i = 0; i < body.length; i += piece) {
      slow.socket.write(body.slice(i, i + piece));
      await sleep(50);
    }
    assert.ok(Date.now() - t0 > 1000, "the body took longer than the timeout to send");
    assert.ok(await until(() => slow.closed()));
    assert.match(slow.received(), /^HTTP\/1\.1 200 /);
  } finally {
    await s.shutdown();
  }
});

test("a 413 closes its connection (it said keep-alive, then Node cut it), refuses a chunked body before reading it all, and the server serves on", async () => {
  const limit = 64 * 1024;
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", maxBodyBytes: limit });
  try {
    // Answers to other mistakes leave the connection to carry the next request.
    const reused = await rawClient(s.port);
    const statuses = (c: Raw) => [...c.received().matchAll(/HTTP\/1\.1 (\d+)/g)].map((m) => m[1]);
    for (const [i, q] of ["POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n{x}", "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", "PUT /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nabcd", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"].entries()) {
      reused.socket.write(q);
      // Each answer before the next question (or the connection's end), however slow the machine.
      await until(() => statuses(reused).length > i || reused.closed());
    }
    assert.deepEqual([...reused.received().matchAll(/HTTP\/1\.1 (\d+)/g)].map((m) => m[1]), ["400", "404", "405", "200"]);
    reused.socket.destroy();
    for (const size of [2 * limit, 24 * limit]) {
      const c = await rawClient(s.port);
      c.socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${size}\r\n\r\n${"x".repeat(size)}`);
      assert.ok(await until(() => /\r\n\r\n\{.*\}$/s.test(c.received())), c.received());
      await sleep(100);
      c.socket.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
      // The next answer, the connection's end, or a 413 that said it closes (Deno's server may keep the
      // socket until the client leaves): whichever comes, with no guess at how long a loaded machine takes.
      const saysClose = () => /^connection: close\r$/im.test(c.received());
      await until(() => statuses(c).length >= 2 || c.closed() || saysClose());
      const answers = statuses(c);
      assert.equal(answers[0], "413");
      // Either the connection carries the next request, or the 413 said it would not.
      if (answers.length < 2) assert.match(c.received(), /^connection: close\r$/im, `the 413 to a ${size}-byte body did not say the connection closes, and it did:\n${c.received()}`);
      c.socket.destroy();
    }
    // Chunks beyond the limit are not read: the 413 comes while the client is still sending.
    const chunked = await rawClient(s.port);
    chunked.socket.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    let sent = 0;
    const piece = "y".repeat(8192);
    while (sent < 64 * limit && chunked.received() === "" && !chunked.closed()) {
      chunked.socket.write(`2000\r\n${piece}\r\n`);
      sent += piece.length;
      await sleep(1);
    }
    assert.ok(await until(() => chunked.received() !== ""));
    assert.match(chunked.received(), /^HTTP\/1\.1 413 [^]*"code":"body_too_large"/);
    assert.ok(sent < 32 * limit, `${sent} bytes were sent before the 413`);
    chunked.socket.destroy();
    const r = await fetch(`${s.url}/v1/chat/completions`, { method: "POST", body: chat() });
    assert.equal(r.status, 200, await r.text());
  } finally {
    await s.shutdown();
  }
});

test("a body whose stream fails mid-read (a broken chunked upload) is a 400, not a 500", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference" });
  try {
    const app = createApp({ engine: s.serving, model, modelName: "stories260K" });
    let sentOne = false;
    const broken = new ReadableStream<Uint8Array>({
      pull(ctl) {
        if (sentOne) ctl.error(new Error("aborted"));
        else ctl.enqueue(new TextEncoder().encode('{"model": "stories'));
        sentOne = true;
      },
    });
    const errors: unknown[] = [];
    const logged = console.error;
    console.error = (...args: unknown[]) => errors.push(args);
    let r: Response;
    try {
      r = await app.request("/v1/chat/completions", { method: "POST", headers: { "transfer-encoding": "chunked" }, body: broken, duplex: "half" } as RequestInit);
    } finally {
      console.error = logged;
    }
    const body = await r.json() as { error: { code: string; message: string } };
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(body.error.code, "body_unreadable");
    assert.match(body.error.message, /aborted/);
    assert.deepEqual(errors, [], "nothing is logged as an internal error");
  } finally {
    await s.shutdown();
  }
});

test("a number that overflows to Infinity (1e400) is quoted as Infinity, not as null", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference" });
  try {
    const r = await fetch(`${s.url}/v1/chat/completions`, { method: "POST", body: chat({ max_tokens: 2 }).replace('"max_tokens":2', '"max_tokens":1e400') });
    const body = await r.json() as { error: { param: string; message: string } };
    assert.equal(r.status, 400);
    assert.equal(body.error.param, "max_tokens");
    assert.doesNotMatch(body.error.message, /null/, body.error.message);
    assert.match(body.error.message, /Infinity/);
  } finally {
    await s.shutdown();
  }
});

test("a streaming client that stops reading and leaves frees its request; shutdown ends a stream no one reads; 200 idle sockets block no one", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference" });
  let idle: Raw[] = [];
  let stopped = false;
  try {
    const running = async () => Number(/^vllm:num_requests_running\{[^}]*\} (\d+)/m.exec(await (await fetch(`${s.url}/metrics`)).text())?.[1]);
    const body = chat({ max_tokens: 1500, stream: true, ignore_eos: true });
    const request = `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    const stalled = await rawClient(s.port);
    stalled.socket.write(request);
    assert.ok(await until(() => stalled.received().includes("data: ")));
    stalled.socket.pause();
    await sleep(300);
    assert.equal(await running(), 1);
    stalled.socket.destroy();
    assert.ok(await until(() => s.inFlight === 0), `${s.inFlight} still in flight after the client left`);
    assert.equal(await running(), 0);
    // Many connections that send nothing, or half their headers, do not hold up a real request.
    idle = await Promise.all(Array.from({ length: 200 }, () => rawClient(s.port)));
    idle.slice(0, 100).forEach((c) => c.socket.write("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"));
    // Served while every idle socket is still open and unanswered: it waited for none of them (no
    // bound on how long it took: a loaded machine is slow, and blocked it would hang past the deadline).
    let timer: ReturnType<typeof setTimeout> | undefined;
    const hung = new Promise<"hung">((res) => (timer = setTimeout(() => res("hung"), SOON_MS)));
    const r = await Promise.race([fetch(`${s.url}/v1/chat/completions`, { method: "POST", body: chat() }), hung]);
    clearTimeout(timer);
    assert.ok(r !== "hung", `no answer in ${SOON_MS / 1000} s beside 200 idle sockets`);
    assert.equal(r.status, 200, await r.text());
    assert.ok(idle.every((c) => !c.closed() && c.received() === ""), "the idle sockets are still open and unanswered");
    // A stream whose client stopped reading ends when the server shuts down.
    const paused = await rawClient(s.port);
    paused.socket.write(request);
    assert.ok(await until(() => paused.received().includes("data: ")));
    paused.socket.pause();
    await sleep(200);
    stopped = true;
    // A shutdown that waited for the stream would wait forever: the deadline only catches that.
    const ended = await Promise.race([s.shutdown().then(() => "ended"), new Promise((res) => (timer = setTimeout(() => res("hung"), SOON_MS)))]);
    clearTimeout(timer);
    assert.equal(ended, "ended", "shutdown returned though no one reads the stream");
    paused.socket.resume();
    assert.ok(await until(() => paused.closed()), "the paused stream's connection is still open");
  } finally {
    idle.forEach((c) => c.socket.destroy());
    if (!stopped) await s.shutdown();
  }
});

test("a value nested 10,000 levels deep in any field of any route is a 4xx or served, never a stack overflow 500", async () => {
  const s = await startServer({ modelPath, model, host: "127.0.0.1", port: 0, backend: "reference", maxBodyBytes: 8 << 20 });
  try {
    const depth = 10_000;
    const deep = ["[".repeat(depth) + "]".repeat(depth), '{"a":'.repeat(depth) + "1" + "}".repeat(depth)];
    const M = '"model":"stories260K"';
    const user = '{"role":"user","content":"Hi"}';
    const at = (v: string): [string, string][] => [
      // A tool call's arguments (or id, type, name) that are no string were quoted with JSON.stringify, which overflows on Node.
      ...["arguments", "name"].map((f): [string, string] => ["/v1/chat/completions", `{${M},"max_tokens":2,"messages":[${user},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}","${f}":${v}}}]}]}`]),
      ...["id", "type"].map((f): [string, string] => ["/v1/chat/completions", `{${M},"max_tokens":2,"messages":[${user},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"},"${f}":${v}}]}]}`]),
      ["/v1/chat/completions", `{${M},"max_tokens":2,"messages":[{"role":${v},"content":"Hi"}]}`],
      ["/v1/chat/completions", `{${M},"max_tokens":2,"messages":[${user}],"reasoning_effort":${v}}`],
      ["/v1/chat/completions", `{${M},"max_tokens":2,"messages":[${user}],"chat_template_kwargs":{"x":${v}},"zz":${v}}`],
      ["/v1/completions", `{${M},"max_tokens":2,"prompt":${v}}`],
      ["/v1/responses", `{${M},"max_output_tokens":2,"input":[{"type":"message","role":${v},"content":"Hi"}]}`],
      ["/v1/responses", `{${M},"max_output_tokens":2,"input":"Hi","text":{"format":{"type":${v}}}}`],
      ["/v1/messages", `{${M},"max_tokens":2,"messages":[{"role":${v},"content":"Hi"}]}`],
      ["/v1/messages", `{${M},"max_tokens":2,"messages":[${user}],"metadata":${v}}`],
      ["/v1/embeddings", `{${M},"input":${v}}`],
      ["/tokenize", `{${M},"messages":${v}}`],
      ["/v1/conversations", `{"items":[{"type":"message","role":"user","content":${v}}]}`],
    ];
    for (const [path, body] of deep.flatMap(at)) {
      const r = await fetch(`${s.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body });
      const text = await r.text();
      assert.ok(r.status < 500, `${path} ${body.slice(0, 120)}...: ${r.status} ${text.slice(0, 200)}`);
    }
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
  } finally {
    await s.shutdown();
  }
});
