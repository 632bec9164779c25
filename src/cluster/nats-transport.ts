/**
 * Connecting to NATS with the Node transport of `@nats-io/transport-node`, less one crash.
 *
 * That transport calls `socket.removeAllListeners()` before it destroys a socket it is done with. On
 * Deno a read error raised just before (the NATS server resetting a connection whose token it has
 * refused, measured once in ~40 runs of tests/cluster/nats-cluster.test.ts under load) is emitted a
 * moment later, when no listener is left, and ends the whole process as an uncaught
 * `read ECONNRESET`: a `serve --nats` given a wrong token would die instead of printing why. This
 * transport keeps one listener that ignores socket errors; while the transport listens it still sees
 * every error through its own listener, exactly as before.
 */
import type { Socket } from "node:net";
import { type ConnectionOptions, type NatsConnection, NatsConnectionImpl, setTransportFactory } from "@nats-io/transport-node";
import { NodeTransport, nodeResolveHost } from "@nats-io/transport-node/lib/node_transport.js";

/** The listener kept on every control-plane socket; errors reach the transport's own listener first. */
const ignoreSocketError = (): void => {};

/** Makes `socket` keep {@link ignoreSocketError} through `removeAllListeners()` (idempotent). */
function keepErrorListener(socket: Socket): void {
  if (socket.listeners("error").includes(ignoreSocketError)) return;
  const removeAll = socket.removeAllListeners.bind(socket);
  socket.removeAllListeners = (...event: [string | symbol] | []) => {
    // Spread, not `removeAll(event)`: an explicit undefined removes the listeners of no event at all.
    removeAll(...event);
    if (event.length === 0 || event[0] === "error") socket.on("error", ignoreSocketError);
    return socket;
  };
  socket.on("error", ignoreSocketError);
}

/** The Node transport whose sockets never emit an error with no listener. */
class GuardedNodeTransport extends NodeTransport {
  override async dial(hp: { hostname: string; port: number }): Promise<Socket> {
    const socket = await super.dial(hp);
    keepErrorListener(socket);
    return socket;
  }

  override setupHandlers(): void {
    // A TLS upgrade replaces the dialled socket; guard the one actually used.
    keepErrorListener(this.socket);
    super.setupHandlers();
  }
}

/**
 * `connect()` of `@nats-io/transport-node` with {@link GuardedNodeTransport}. The transport factory is
 * the NATS client's process-wide setting (its own `connect()` sets it on every call, and reconnects
 * read it), so every NATS connection of this project goes through here.
 */
export function connectNats(options: ConnectionOptions): Promise<NatsConnection> {
  setTransportFactory({ factory: () => new GuardedNodeTransport(), dnsResolveFn: nodeResolveHost });
  return NatsConnectionImpl.connect(options);
}
