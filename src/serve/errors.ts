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
    readonly status: 400 | 401 | 404 | 405 | 413 | 429 | 500 | 503,
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
  413: "request_too_large", 429: "rate_limit_error", 500: "api_error", 503: "overloaded_error",
};

/** The error as Anthropic's Messages API writes one: `{"type": "error", "error": {"type", "message"}}`. */
export function anthropicErrorBody(e: ApiError): { type: "error"; error: { type: string; message: string } } {
  return { type: "error", error: { type: ANTHROPIC_ERROR_TYPES[e.status], message: e.message } };
}

/** A value as a message quotes it: JSON, cut to 60 characters. */
export function describe(value: unknown): string {
  const s = JSON.stringify(value);
  return s === undefined ? String(value) : s.length > 60 ? `${s.slice(0, 57)}...` : s;
}

/**
 * Turns the first schema issue into a 400 that names the field and quotes the bad value. A field
 * that is absent gets code `missing_required_parameter`; any other bad value `invalid_value`.
 */
export function schemaError(err: ZodError, body: unknown): ApiError {
  const issue = err.issues[0];
  const path = issue.path.map(String);
  const param = path.length ? path.reduce((acc, p) => (/^\d+$/.test(p) ? `${acc}[${p}]` : acc ? `${acc}.${p}` : p), "") : null;
  let value: unknown = body;
  for (const p of path) value = value !== null && typeof value === "object" ? (value as Record<string, unknown>)[p] : undefined;
  const got = value === undefined ? "it is missing" : `got ${describe(value)}`;
  const message = param ? `Invalid value for '${param}': ${issue.message.replace(/^Invalid input: /, "")} (${got})` : `Invalid request body: ${issue.message}`;
  return new ApiError(400, message, param, param !== null && value === undefined ? "missing_required_parameter" : "invalid_value");
}
