/**
 * OpenAI-style error bodies: `{"error": {"message", "type", "param", "code"}}`, and the mapping
 * from schema failures and engine errors to HTTP statuses. A client's mistake is never a 500.
 */
import type { ZodError } from "zod";

/** The body of every error response. */
export interface OpenAiErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

/** An error that knows its HTTP status and OpenAI error fields. */
export class ApiError extends Error {
  override name = "ApiError";
  constructor(
    readonly status: 400 | 401 | 404 | 405 | 408 | 413 | 429 | 500 | 503,
    message: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    readonly type = status === 429 ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error",
  ) {
    super(message);
  }

  /** The JSON body. */
  body(): OpenAiErrorBody {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** Anthropic's error type for each status (its Messages API's error bodies). */
const ANTHROPIC_ERROR_TYPES: Record<ApiError["status"], string> = {
  400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error", 405: "invalid_request_error",
  408: "invalid_request_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 503: "overloaded_error",
};

/**
 * The HTTP status Anthropic's Messages API answers `e` with: 529 for an overloaded server (503
 * elsewhere), which `@anthropic-ai/sdk` reads as its `OverloadedError` and retries, as from Anthropic.
 */
export function anthropicStatus(e: ApiError): Exclude<ApiError["status"], 503> | 529 {
  return e.status === 503 ? 529 : e.status;
}

/** The error as Anthropic's Messages API writes one: `{"type": "error", "error": {"type", "message"}}`. */
export function anthropicErrorBody(e: ApiError): { type: "error"; error: { type: string; message: string } } {
  return { type: "error", error: { type: ANTHROPIC_ERROR_TYPES[e.status], message: e.message } };
}

/** A value as a message quotes it: JSON, cut to 60 characters. */
export function describe(value: unknown): string {
  const s = jsonHead(value, 60);
  return s === undefined ? String(value) : s.length > 60 ? `${s.slice(0, 57)}...` : s;
}

/**
 * The JSON text of a parsed body's `value` as JSON.stringify writes it, up to its first `limit` + 1
 * characters (undefined where JSON.stringify gives undefined). Built only that far, so a value many
 * thousand levels deep (which overflows JSON.stringify's stack on Node) or megabytes long costs no
 * more than the characters quoted.
 */
function jsonHead(value: unknown, limit: number): string | undefined {
  let out = "";
  const full = () => out.length > limit;
  const walk = (v: unknown, inArray: boolean): void => {
    if (v !== null && typeof v === "object") {
      if (Array.isArray(v)) {
        out += "[";
        for (let i = 0; i < v.length && !full(); i++) {
          if (i > 0) out += ",";
          walk(v[i], true);
        }
        out += "]";
        return;
      }
      out += "{";
      let first = true;
      for (const [k, x] of Object.entries(v)) {
        if (full()) break;
        if (x === undefined || typeof x === "function" || typeof x === "symbol") continue;
        out += `${first ? "" : ","}${JSON.stringify(k)}:`;
        first = false;
        walk(x, false);
      }
      out += "}";
      return;
    }
    // A number that overflowed (1e400 parses as Infinity) is quoted as what it became, not as JSON's null.
    if (typeof v === "number" && !Number.isFinite(v)) {
      out += String(v);
      return;
    }
    // A string longer than the limit is quoted only as far as the limit (the rest would be cut anyway).
    const text = JSON.stringify(typeof v === "string" && v.length > limit ? v.slice(0, limit) : v) as string | undefined;
    out += text ?? (inArray ? "null" : "");
  };
  if (value === undefined || typeof value === "function" || typeof value === "symbol") return undefined;
  walk(value, false);
  return out;
}

/**
 * The `param` of an error about the value at `path` in a request body, spelled as every error of
 * this server spells it: an index into a list in brackets, an object's key after a dot
 * (`messages[0].content`, `prompt[1]`, `logit_bias.5`, `metadata.k`); null for an empty path.
 * A key is a key whatever it holds: `logit_bias`'s "5" and "-1" are `logit_bias.5` and `logit_bias.-1`.
 */
export function paramPath(path: readonly PropertyKey[]): string | null {
  if (path.length === 0) return null;
  return path.reduce<string>((acc, p, i) => (typeof p === "number" ? `${acc}[${p}]` : i === 0 ? String(p) : `${acc}.${String(p)}`), "");
}

/**
 * Turns the first schema issue into a 400 that names the field and quotes the bad value. A field
 * that is absent gets code `missing_required_parameter`; any other bad value `invalid_value`.
 */
export function schemaError(err: ZodError, body: unknown): ApiError {
  const issue = err.issues[0];
  const path = issue.path.map(String);
  const param = paramPath(issue.path);
  let value: unknown = body;
  for (const p of path) value = value !== null && typeof value === "object" ? (value as Record<string, unknown>)[p] : undefined;
  const got = value === undefined ? "it is missing" : `got ${describe(value)}`;
  const said = issue.message.replace(/^Invalid input: /, "");
  // A message that already quotes what it got ("…, got 0") is not followed by the same again.
  const message = param ? `Invalid value for '${param}': ${said}${/, got /.test(said) ? "" : ` (${got})`}` : `Invalid request body: ${issue.message}`;
  return new ApiError(400, message, param, param !== null && value === undefined ? "missing_required_parameter" : "invalid_value");
}
