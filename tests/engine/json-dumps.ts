/** JSON spaced as Python's json.dumps writes it by default: the compact output grammar's spacing. */

/** `v` as json.dumps writes it: ", " and ": " between items, no other whitespace. */
export const dumps = (v: unknown): string =>
  Array.isArray(v) ? `[${v.map(dumps).join(", ")}]`
  : v !== null && typeof v === "object" ? `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${dumps(x)}`).join(", ")}}`
  : JSON.stringify(v);
