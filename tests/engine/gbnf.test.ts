/**
 * GBNF output grammars (src/engine/gbnf.ts) stepped by the output automaton (grammar.ts): what they
 * accept against independent oracles (a JavaScript regular expression for a regular grammar, a
 * hand-written recursive-descent checker for a recursive one), constant depth for right recursion,
 * merged configurations for ambiguous grammars, forced text, and the errors for what cannot be followed.
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { test } from "../harness.ts";
import { compileGbnf } from "../../src/engine/gbnf.ts";
import { grammarComplete, grammarFeed, grammarStart, type GrammarState, grammarStateKey, ObjectIds } from "../../src/engine/grammar.ts";
import { grammarForcedText } from "../../src/engine/grammar-forced.ts";
import { SchemaError } from "../../src/engine/json-schema.ts";

const start = (grammar: string): GrammarState => grammarStart({ kind: "gbnf", grammar });
const accepts = (s: GrammarState, text: string) => grammarComplete(grammarFeed(s, text));

test("compileGbnf() grammars accept what an equivalent regular expression matches (fast-check)", () => {
  const g = start(String.raw`
root ::= word ("-" [0-9]{1,2})? | "x" [ab]* "y"   # two shapes
word ::= [a-c]+
`);
  const re = /^(?:[a-c]+(?:-[0-9]{1,2})?|x[ab]*y)$/;
  fc.assert(
    fc.property(fc.array(fc.constantFrom(..."abcxy-09"), { maxLength: 8 }), (chars) => {
      const text = chars.join("");
      assert.equal(accepts(g, text), re.test(text), JSON.stringify(text));
      // Every prefix of an accepted text leaves the automaton somewhere to go.
      if (re.test(text)) for (let i = 0; i < text.length; i++) assert.ok(grammarFeed(g, text.slice(0, i)).length > 0);
    }),
    { numRuns: 2000, seed: 11 },
  );
});

/** An independent checker of the arithmetic grammar below: expr := term (("+"|"-") term)*, and so on. */
function isArithmetic(text: string): boolean {
  let i = 0;
  const num = () => {
    const m = /^[0-9]+(\.[0-9]{1,3})?/.exec(text.slice(i));
    if (!m) return false;
    i += m[0].length;
    return true;
  };
  const factor = (): boolean => {
    if (text[i] !== "(") return num();
    i++;
    if (!expr() || text[i] !== ")") return false;
    i++;
    return true;
  };
  const chain = (item: () => boolean, ops: string) => () => {
    if (!item()) return false;
    while (ops.includes(text[i] ?? "!")) {
      i++;
      if (!item()) return false;
    }
    return true;
  };
  const term = chain(factor, "*/");
  const expr: () => boolean = chain(term, "+-");
  return expr() && i === text.length;
}

const ARITHMETIC = String.raw`
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= num | "(" expr ")"
num    ::= [0-9]+ ("." [0-9]{1,3})?
`;

test("compileGbnf() recursive grammars accept what a recursive-descent checker accepts (fast-check)", () => {
  const g = start(ARITHMETIC);
  const { expr } = fc.letrec((tie) => ({
    expr: fc.oneof({ depthSize: "small", withCrossShrink: true }, fc.integer({ min: 0, max: 999 }).map(String), fc.tuple(tie("expr"), fc.constantFrom("+", "-", "*", "/"), tie("expr")).map(([a, op, b]) => `${a}${op}${b}`), tie("expr").map((e) => `(${e})`)),
  }));
  fc.assert(
    fc.property(expr as fc.Arbitrary<string>, fc.nat(), fc.constantFrom("", "+", ")", "(", ".", "1"), (text, at, junk) => {
      assert.ok(accepts(g, text), text);
      // The same text with a character dropped or added somewhere: both sides must agree.
      const i = at % (text.length + 1);
      for (const other of [text.slice(0, i) + text.slice(i + 1), text.slice(0, i) + junk + text.slice(i)]) assert.equal(accepts(g, other), isArithmetic(other), other);
    }),
    { numRuns: 500, seed: 5 },
  );
});

test("compileGbnf() right recursion runs in constant depth, and nesting is capped", () => {
  const g = start('root ::= "a" root | "b"');
  const ids = new ObjectIds();
  const short = grammarFeed(g, "a".repeat(10));
  const long = grammarFeed(g, "a".repeat(5000));
  assert.equal(grammarStateKey(long, ids), grammarStateKey(short, ids), "the same state (no deeper stack) after 5000 as after 10");
  assert.ok(grammarComplete(grammarFeed(long, "b")));
  // Each "(" nests factor -> expr -> term -> factor; a model opening parentheses forever hits the cap.
  const a = start(ARITHMETIC);
  assert.ok(accepts(a, "(".repeat(40) + "1" + ")".repeat(40)));
  assert.equal(grammarFeed(a, "(".repeat(1000)).length, 0);
});

test("compileGbnf() merges configurations an ambiguous grammar would multiply", () => {
  const g = start("root ::= [a]* [a]* [a]*");
  const s = grammarFeed(g, "a".repeat(300));
  assert.ok(s.length <= 8, `${s.length} configurations after 300 characters`);
  assert.ok(grammarComplete(s));
});

test("compileGbnf() reads escapes, classes with escapes, dot and counts", () => {
  assert.ok(accepts(start(String.raw`root ::= "\x41\u00e9\n\"" [\]\\^-] . [^a-z]{2,}`), 'Aé\n"^ж12'));
  assert.ok(!accepts(start(String.raw`root ::= [^a-z]{2,}`), "1b"));
  assert.ok(accepts(start('root ::= "😀"+'), "😀😀"));
  assert.ok(accepts(start('root ::= "a"{3}'), "aaa") && !accepts(start('root ::= "a"{3}'), "aa"));
  // Rules may span lines and be defined after use; alternatives may be empty.
  const g = start('root ::= "<" inner ">"\ninner ::=\n  "x" |\n  ');
  assert.ok(accepts(g, "<x>") && accepts(g, "<>"));
});

test("grammarForcedText() follows literals and one-character classes of a GBNF grammar", () => {
  assert.equal(grammarForcedText(start('root ::= "hello" [ ] "world" ("!" | "?")'), 50).text, "hello world");
});

test("compileGbnf() refuses what it cannot follow with a message that names it", () => {
  const cases: [string, RegExp][] = [
    ['start: "a"', /line 1, column 6: expected "::=" after the rule name "start"/],
    ['root ::= root "a" | "b"', /"root" is left-recursive \(root -> root/],
    ['root ::= a\na ::= b? a "x"\nb ::= "y"', /"a" is left-recursive \(a -> a/],
    ['root ::= x', /line 1, column 10: the rule "x" is not defined/],
    ['root ::= ("a"?)*', /repeated expression can match the empty string/],
    ['item ::= "a"', /no rule named "root".*"item"/],
    ['root ::= "a', /literal is not closed/],
    ['root ::= [z-a]', /range "z"-"a" runs backwards/],
    ['root ::= "a"{3,1}', /maximum below its minimum/],
    ['root ::= "a"{5000}', /counts above 1000/],
    ['root ::= "a"\nroot ::= "b"', /"root" is defined twice/],
    ['root ::= "\\q"', /unknown escape "\\\\q"/],
    ['root ::= ("a"', /expected "\)" to close the group/],
    ["", /grammar is empty/],
  ];
  for (const [grammar, message] of cases) assert.throws(() => compileGbnf(grammar), (e: unknown) => e instanceof SchemaError && message.test(e.message), grammar);
});
