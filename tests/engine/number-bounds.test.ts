/** Numeric bounds in constrained decoding: the prefix check, and the grammar's numbers under minimum/maximum. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { grammarComplete, grammarFeed, grammarStart, grammarStep, type GrammarState, type OutputGrammar } from "../../src/engine/grammar.ts";
import { compileSchema, type JsonSchema } from "../../src/engine/json-schema.ts";
import { canReach, decimalStep, inRange, type NumberRange } from "../../src/engine/number-bounds.ts";

const json = (schema: JsonSchema): OutputGrammar => ({ kind: "json", schema });
const NUMBER_CHARS = [..."-0123456789.eE+"];

/** Every text of at most `depth` characters the grammar lets a bare number value be, with its state. */
function walk(state: GrammarState, depth: number, visit: (text: string, s: GrammarState) => void, text = ""): void {
  visit(text, state);
  if (depth === 0) return;
  for (const c of NUMBER_CHARS) {
    const next = grammarStep(state, c);
    if (next.length > 0) walk(next, depth - 1, visit, text + c);
  }
}

/** Whether some continuation of at most `depth` characters completes the value. */
function completable(state: GrammarState, depth: number): boolean {
  if (grammarComplete(state)) return true;
  if (depth === 0) return false;
  return NUMBER_CHARS.some((c) => {
    const next = grammarStep(state, c);
    return next.length > 0 && completable(next, depth - 1);
  });
}

const INTEGER_RANGES: [JsonSchema, number, number][] = [
  [{ type: "integer", minimum: -12, maximum: 34 }, -12, 34],
  [{ type: "integer", exclusiveMinimum: -1, exclusiveMaximum: 3 }, 0, 2],
  [{ type: "integer", minimum: 95, maximum: 105 }, 95, 105],
  [{ type: "integer", minimum: -7, maximum: -3 }, -7, -3],
  [{ type: "integer", minimum: 0.5, maximum: 2.5 }, 1, 2],
  [{ type: "integer", minimum: 0, maximum: 0 }, 0, 0],
  [{ type: "integer", minimum: 3, exclusiveMinimum: true, maximum: 5 }, 4, 5],
];

for (const [schema, lo, hi] of INTEGER_RANGES) {
  test(`grammarStart() writes exactly the integers ${lo} to ${hi} for ${JSON.stringify(schema)}`, () => {
    const written = new Set<number>();
    walk(grammarStart(json(schema)), 5, (text, s) => {
      assert.ok(completable(s, 5), `${JSON.stringify(text)} was allowed but cannot be completed`);
      if (grammarComplete(s)) written.add(Number(text));
      assert.ok(!/[.eE]/.test(text), `${JSON.stringify(text)}: an integer has no fraction or exponent`);
    });
    const expected = Array.from({ length: hi - lo + 1 }, (_, i) => lo + i);
    assert.deepEqual([...written].sort((a, b) => a - b), expected);
  });
}

const NUMBER_RANGES: JsonSchema[] = [
  { type: "number", minimum: -0.5, maximum: 0.25 },
  { type: "number", exclusiveMinimum: 0, exclusiveMaximum: 1 },
  { type: "number", minimum: 12.5, maximum: 13 },
  { type: "number", exclusiveMinimum: 0.19, maximum: 0.3 },
  { type: "number", maximum: -2 },
  { type: "number", exclusiveMinimum: 7 },
];

for (const schema of NUMBER_RANGES) {
  test(`grammarStart() writes only values inside ${JSON.stringify(schema)}, and never a dead end`, () => {
    const range = (compileSchema(schema) as { range: NumberRange }).range;
    let whole = 0;
    walk(grammarStart(json(schema)), 5, (text, s) => {
      assert.ok(completable(s, 4), `${JSON.stringify(text)} was allowed but cannot be completed`);
      if (!grammarComplete(s)) return;
      whole++;
      const v = Number(text);
      assert.ok(inRange(text, range) && !Number.isNaN(v), `${text} is outside the bounds`);
      assert.ok(!/[eE]/.test(text), `${text}: a bounded number is written without an exponent`);
    });
    assert.ok(whole >= 3, `only ${whole} values written`);
  });
}

/** Whether the decimal `text` is a multiple of `step` (a decimal too), exactly. */
function isMultiple(text: string, step: number): boolean {
  const scale = (t: string, d: number) => {
    const [w, f = ""] = t.replace("-", "").split(".");
    return BigInt(w + f.padEnd(d, "0"));
  };
  const d = Math.max((text.split(".")[1] ?? "").length, (String(step).split(".")[1] ?? "").length);
  return scale(text, d) % scale(String(step), d) === 0n;
}

const STEPPED: [{ readonly type: string; readonly [k: string]: unknown }, number][] = [
  [{ type: "integer", multipleOf: 3, minimum: -10, maximum: 20 }, 3],
  [{ type: "integer", multipleOf: 0.5 }, 0.5],
  [{ type: "integer", multipleOf: 2.5, exclusiveMinimum: 0 }, 2.5],
  [{ type: "number", multipleOf: 0.25, minimum: -1, maximum: 1.3 }, 0.25],
  [{ type: "number", multipleOf: 0.1, exclusiveMinimum: 0.29 }, 0.1],
  [{ type: "number", multipleOf: 7 }, 7],
  [{ type: "number", multipleOf: 0.03, minimum: 0.1, maximum: 0.2 }, 0.03],
];

for (const [schema, step] of STEPPED) {
  test(`grammarStart() writes only multiples of ${step} for ${JSON.stringify(schema)}, every one of them it can, and never a dead end`, () => {
    const range = (compileSchema(schema) as { range: NumberRange }).range;
    const written = new Set<number>();
    walk(grammarStart(json(schema)), 5, (text, s) => {
      assert.ok(completable(s, 5), `${JSON.stringify(text)} was allowed but cannot be completed`);
      if (!grammarComplete(s)) return;
      assert.ok(isMultiple(text, step) && inRange(text, range), `${text} is not a multiple of ${step} inside the bounds`);
      written.add(Number(text));
    });
    // Every multiple inside the bounds with a short decimal form is among the values written.
    for (let k = -400; k <= 400; k++) {
      const v = Number((k * step).toFixed(6));
      const text = String(v);
      if (text.length <= 5 && !text.includes("e") && inRange(text, range) && (schema.type === "number" || Number.isInteger(v))) {
        assert.ok(written.has(v), `${text} is a multiple of ${step} inside the bounds but was never written`);
      }
    }
    assert.ok(written.size >= 3, `only ${written.size} values written`);
  });
}

test("decimalStep() reads multipleOf exactly, as an integer step for integers", () => {
  assert.deepEqual(decimalStep(0.01, false), { p: 1n, d: 2 });
  assert.deepEqual(decimalStep(2.5, false), { p: 25n, d: 1 });
  assert.deepEqual(decimalStep(1e21, false), { p: 10n ** 21n, d: 0 });
  assert.deepEqual(decimalStep(1e-7, false), { p: 1n, d: 7 });
  assert.deepEqual(decimalStep(2.5, true), { p: 5n, d: 0 });
  assert.deepEqual(decimalStep(0.3, true), { p: 3n, d: 0 });
  assert.deepEqual(decimalStep(0.5, true), { p: 1n, d: 0 });
  // 0.1 + 0.2 is not 0.3 in binary; read as decimals, 0.3 is a multiple of 0.1.
  assert.ok(canReach("0.3", false, { lo: 0.3, loOpen: false, hi: 0.3, hiOpen: false, step: decimalStep(0.1, false) }));
  assert.ok(!canReach("0.31", false, { lo: 0, loOpen: false, hi: 1, hiOpen: false, step: decimalStep(0.1, false) }), "more fraction digits than the step has");
  assert.ok(!canReach("1.", false, { lo: 0, loOpen: false, hi: 9, hiOpen: false, step: decimalStep(2, false) }), "an integer step has no fraction");
  assert.ok(canReach("12", false, { lo: 1e6, loOpen: false, hi: Infinity, hiOpen: false, step: decimalStep(7, false) }), "12 then more digits passes a million");
  assert.ok(!canReach("12", false, { lo: 127, loOpen: false, hi: 132, hiOpen: false, step: decimalStep(7, false) }), "no multiple of 7 in 127–132");
});

test("canReach() agrees with a search over the completions of each prefix, with and without a step", () => {
  const ranges: NumberRange[] = [
    { lo: -3.25, loOpen: false, hi: 14, hiOpen: true },
    { lo: 0, loOpen: true, hi: 0.05, hiOpen: false },
    { lo: -Infinity, loOpen: false, hi: -10, hiOpen: false },
    { lo: 99, loOpen: false, hi: 101, hiOpen: false },
    ];
  // Prefixes of up to 4 characters; completions add up to 3 more (enough for these bounds).
  const prefixes = new Set<string>([""]);
  for (let len = 0; len < 4; len++) {
    for (const p of [...prefixes]) for (const c of [..."-0159."]) if (/^-?(0|[1-9][0-9]*)?(\.[0-9]*)?$/.test(p + c) && !/^-?\./.test(p + c)) prefixes.add(p + c);
  }
  const isNumber = (t: string) => /^-?(0|[1-9][0-9]*)(\.[0-9]+)?$/.test(t);
  for (const [base, multipleOf] of ranges.flatMap((r) => [[r, 0], [r, 0.25], [r, 3]] as const)) {
    for (const integer of [false, true]) {
      const r: NumberRange = multipleOf === 0 ? base : { ...base, step: decimalStep(multipleOf, integer) };
      const show = `${JSON.stringify(base)} multipleOf ${multipleOf} (integer ${integer})`;
      for (const p of prefixes) {
        if (integer && p.includes(".")) continue;
        let found = false;
        const search = (t: string, more: number) => {
          if (found) return;
          // A stepped number is written with no more fraction digits than its step has.
          const fraction = t.split(".")[1]?.length ?? 0;
          if (isNumber(t) && (!integer || !t.includes(".")) && (r.step === undefined || fraction <= r.step.d) && inRange(t, r)) found = true;
          if (more > 0) for (const c of [..."0123456789."]) search(t + c, more - 1);
        };
        search(p, 3);
        if (found) assert.ok(canReach(p, integer, r), `${JSON.stringify(p)} can reach ${show}`);
        else if (p.replace("-", "").length >= 2) assert.ok(!canReach(p, integer, r), `${JSON.stringify(p)} cannot reach ${show}`);
      }
    }
  }
});

test("grammarStart() keeps bounds inside objects: a property's number ends only inside them", () => {
  const g = json({ type: "object", properties: { n: { type: "integer", minimum: 1, maximum: 10 }, x: { type: "number", exclusiveMaximum: 0 } }, additionalProperties: false });
  const fits = (text: string, whole = false) => {
    const s = grammarFeed(grammarStart(g), text);
    return whole ? grammarComplete(s) : s.length > 0;
  };
  assert.ok(fits('{"n":10}', true));
  assert.ok(fits('{"n": 7, "x": -0.5}', true));
  for (const bad of ['{"n":11', '{"n":0', '{"n":1e1', '{"n":-', '{"x":0}', '{"x":0.0', '{"x":3']) assert.ok(!fits(bad), `accepted ${bad}`);
  assert.ok(fits('{"n":1'), "1 may go on to 10");
  assert.ok(!fits('{"n":1,"x":0,', ), "x = 0 is not below 0");
});

test("compileSchema() refuses bounds that hold no value, or that are not numbers, naming them", () => {
  const cases: [unknown, RegExp][] = [
    [{ type: "integer", minimum: 5, maximum: 4 }, /bounds the integer to \[5, 4\], which holds no integer/],
    [{ type: "integer", exclusiveMinimum: 1, exclusiveMaximum: 2 }, /holds no integer/],
    [{ type: "integer", minimum: 0.2, maximum: 0.8 }, /holds no integer/],
    [{ type: "number", exclusiveMinimum: 3, maximum: 3 }, /bounds the number to \(3, 3\], which holds no value/],
    [{ type: "number", minimum: "3" }, /"minimum" at # must be a finite number, got "3"/],
    [{ properties: { a: { type: "number", exclusiveMaximum: true } } }, /"exclusiveMaximum" at #\/properties\/a is a boolean without "maximum"/],
    [{ type: "number", multipleOf: 0 }, /"multipleOf" at # must be a number above 0, got 0/],
    [{ type: "integer", multipleOf: 10, minimum: 1, maximum: 9 }, /bounds the integer to \[1, 9\] and asks for multiples of 10, which holds no integer/],
    [{ type: "number", multipleOf: 0.3, exclusiveMinimum: 0.3, exclusiveMaximum: 0.6 }, /multiples of 0.3, which holds no value/],
  ];
  for (const [schema, message] of cases) assert.throws(() => compileSchema(schema), { name: "SchemaError", message }, JSON.stringify(schema));
  // The tighter of two bounds on a side holds.
  assert.deepEqual((compileSchema({ minimum: 2, exclusiveMinimum: 2, maximum: 9, exclusiveMaximum: 8 }) as { range: NumberRange }).range, { lo: 2, loOpen: true, hi: 8, hiOpen: true });
});
