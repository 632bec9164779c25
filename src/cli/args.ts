/**
 * A small command-line flag parser: `--name value`, `--name=value` and boolean `--name`, typed by
 * a spec, with one-line errors that quote the offending flag or value.
 */

/** Kinds of flag values. */
export type FlagKind = "string" | "int" | "number" | "boolean";

/** One flag's declaration. */
export interface FlagSpec {
  kind: FlagKind;
  /** Short description for --help. */
  help: string;
  /** Lowest accepted value for int/number flags. */
  min?: number;
  /** Highest accepted value for int/number flags. */
  max?: number;
  /** A string flag that refuses an empty value (`--api-key=`), which would otherwise pass as set. */
  nonEmpty?: boolean;
  /** Another name of the flag `aliasOf` (another server's, e.g. vLLM's): its value is that flag's. */
  aliasOf?: string;
  /** A flag another server has and this one does not: refused whatever its value, with this explanation (what to use here). */
  refused?: string;
}

/** A parser's declarations, keyed by flag name without dashes (e.g. "max-tokens"). */
export type FlagSpecs = Record<string, FlagSpec>;

/** Parsed values (absent when not given). */
export type ParsedFlags<S extends FlagSpecs> = {
  [K in keyof S]?: S[K]["kind"] extends "boolean" ? boolean
    : S[K]["kind"] extends "string" ? string
    : number;
};

/** Thrown for an unknown flag, a missing value or a value of the wrong kind. */
export class ArgsError extends Error {
  override name = "ArgsError";
}

function parseValue(name: string, spec: FlagSpec, raw: string): string | number {
  if (spec.kind === "string") {
    if (spec.nonEmpty && raw === "") throw new ArgsError(`Flag --${name} needs a non-empty value, got ""`);
    return raw;
  }
  const value = Number(raw);
  const isInt = spec.kind === "int";
  // Decimal only: Number() would also read "0x10" as 16, "1e3" as 1000 and " 8" as 8; an int must be
  // exactly representable (Number.isSafeInteger), so "99999999999999999999" is not silently rounded.
  const decimal = isInt ? /^[+-]?\d+$/ : /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;
  if (!decimal.test(raw) || !Number.isFinite(value)) {
    throw new ArgsError(`Flag --${name} expects ${isInt ? "an integer" : "a number"}, got "${raw}"`);
  }
  const min = isInt ? Math.max(spec.min ?? -Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER) : spec.min;
  const max = isInt ? Math.min(spec.max ?? Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER) : spec.max;
  if (min !== undefined && value < min) {
    throw new ArgsError(`Flag --${name} must be at least ${min}, got "${raw}"`);
  }
  if (max !== undefined && value > max) {
    throw new ArgsError(`Flag --${name} must be at most ${max}, got "${raw}"`);
  }
  return value;
}

/** Parses `argv` against `specs`; positional arguments are refused. */
export function parseArgs<S extends FlagSpecs>(argv: readonly string[], specs: S): ParsedFlags<S> {
  const out: Record<string, string | number | boolean> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith("--") || arg === "--") throw new ArgsError(`Unexpected argument "${arg}"; flags start with --`);
    const eq = arg.indexOf("=");
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    const spec = Object.hasOwn(specs, name) ? specs[name] : undefined;
    if (!spec) throw unknownFlag(name, Object.keys(specs).filter((k) => specs[k].refused === undefined));
    if (spec.refused !== undefined) throw new ArgsError(`Flag --${name} is not supported: ${spec.refused}`);
    // An alias's value is recorded as its flag's (given both ways with two values, it is a contradiction).
    const key = spec.aliasOf ?? name;
    if (spec.kind === "boolean") {
      const raw = eq === -1 ? "true" : arg.slice(eq + 1);
      if (raw !== "true" && raw !== "false") throw new ArgsError(`Flag --${name} expects true or false, got "${raw}"`);
      set(out, key, raw === "true");
      continue;
    }
    let raw: string;
    if (eq !== -1) raw = arg.slice(eq + 1);
    else {
      const next = argv[i + 1];
      // `--prompt --json` almost surely forgot the prompt; `--prompt=--json` stays possible.
      if (next === undefined || (next.startsWith("--") && Object.hasOwn(specs, next.slice(2).split("=")[0]))) {
        throw new ArgsError(`Flag --${name} needs a value`);
      }
      raw = argv[++i];
    }
    set(out, key, parseValue(name, spec, raw));
  }
  return out as ParsedFlags<S>;
}

/** Records a flag's value; the same flag again with another value is a contradiction, not an override. */
function set(out: Record<string, string | number | boolean>, name: string, value: string | number | boolean): void {
  if (Object.hasOwn(out, name) && out[name] !== value) {
    throw new ArgsError(`Flag --${name} is given twice, as "${out[name]}" and "${value}"; give it once`);
  }
  out[name] = value;
}

/** Edit distance between two names (insertions, deletions, substitutions, and swaps of neighbours). */
function distance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}

/** The error for an unknown flag: the known flag it was most likely meant to be, else the list of them. */
function unknownFlag(name: string, known: readonly string[]): ArgsError {
  const typed = name.toLowerCase().replaceAll("_", "-");
  let best: { flag: string; d: number } | undefined;
  for (const flag of known) {
    const d = distance(typed, flag);
    if (best === undefined || d < best.d) best = { flag, d };
  }
  // At most 2 edits, and fewer than half the name: "--seed" is no typo of "--json".
  if (best !== undefined && best.d <= Math.min(2, Math.floor((best.flag.length - 1) / 2))) {
    return new ArgsError(`Unknown flag "--${name}"; did you mean --${best.flag}? (--help lists the flags)`);
  }
  return new ArgsError(`Unknown flag "--${name}"; known flags: ${known.map((k) => `--${k}`).join(", ")}`);
}

/** Usage text listing every flag. */
export function usage(command: string, specs: FlagSpecs): string {
  const lines = Object.entries(specs).map(([name, s]) => {
    const arg = s.kind === "boolean" ? "" : ` <${s.kind === "string" ? "text" : s.kind}>`;
    // A name longer than the column still gets a space before its help.
    return `${`  --${name}${arg}`.padEnd(25)} ${s.help}`;
  });
  return `Usage: ${command} [flags]\n${lines.join("\n")}`;
}
