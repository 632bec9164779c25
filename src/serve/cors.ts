/**
 * CORS as vLLM answers it (any origin by default, `--allowed-origins` narrows it): a preflight gets 204
 * with the methods and the headers it asked for, before any key is checked; every other answer is
 * marked for the origin once its route has made it.
 *
 * Hono's `cors()` answers alike but sets its first header before the route runs. Hono then copies the
 * route's response to merge that header in (`new Response(res.body, res)`), and under
 * @hono/node-server the copy is a real fetch Response whose body Node reads through a byte stream,
 * which detaches an ArrayBuffer: on Node 20 one detach slows every typed-array kernel of the isolate
 * for good (docs/results/bench-detach.md). So the headers go onto the route's own response, after it.
 */
import type { MiddlewareHandler } from "hono";

/** The methods a preflight is told the API takes (Hono's `cors()` defaults). */
const ALLOWED_METHODS = "GET,HEAD,PUT,POST,DELETE,PATCH";

/** The CORS middleware for `origins` ("*" among them: any origin). */
export function corsHeaders(origins: readonly string[]): MiddlewareHandler {
  const any = origins.includes("*");
  const allowed = (origin: string): string | null => (any ? "*" : origins.includes(origin) ? origin : null);
  return async (c, next) => {
    const allow = allowed(c.req.header("origin") ?? "");
    if (c.req.method === "OPTIONS") {
      const headers = new Headers({ "Access-Control-Allow-Methods": ALLOWED_METHODS });
      if (allow !== null) headers.set("Access-Control-Allow-Origin", allow);
      if (!any) headers.append("Vary", "Origin");
      const asked = c.req.header("access-control-request-headers");
      if (asked) {
        headers.set("Access-Control-Allow-Headers", asked.split(",").map((h) => h.trim()).join(","));
        headers.append("Vary", "Access-Control-Request-Headers");
      }
      return new Response(null, { status: 204, headers });
    }
    await next();
    // Every route's response is made here, so its headers can change (as Hono's cors() assumes too).
    if (allow !== null) c.res.headers.set("Access-Control-Allow-Origin", allow);
    if (!any) c.res.headers.append("Vary", "Origin");
  };
}
