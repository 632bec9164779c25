/** Regular expressions for constrained decoding: JSON Schema `pattern` and `format`, checked against JavaScript's RegExp. */
import assert from "node:assert/strict";
import { test } from "../harness.ts";
import { SeededRng } from "../../kv/rng.ts";
import { compilePattern, type CompiledRegex, FORMATS, formatPattern, RegexError, type RegexState } from "../../src/engine/regex-nfa.ts";

/** Whether `re` accepts the whole of `text`, stepping one code point at a time. */
function matches(re: CompiledRegex, text: string): boolean {
  let s: RegexState | null = re.start;
  for (const c of text) {
    s = re.step(s, c);
    if (s === null) return false;
    // A state that is not null can still reach a match, and 0 characters more means it is one.
    assert.ok(Number.isFinite(re.minToAccept(s)), `no match reachable but a state after ${JSON.stringify(c)}`);
    assert.equal(re.minToAccept(s) === 0, re.accepts(s));
  }
  return re.accepts(s);
}

const ALPHABET = ["a", "b", "c", "x", "1", "-", " ", "\n", ".", "_", "😀"];
const FIXED = [
  "", "a", "b", "c", "ab", "aab", "abc", "aaa", "aaaa", "abab", "abcx", "xa", "\n", "a\nb", "12.5", " ", "-", "ab-c", "😀", "x😀y", "\u2028", "\t\r",
];

/** Strings over ALPHABET, 12 per pattern. */
function randomStrings(seed: number): string[] {
  const rng = new SeededRng(seed); // seeded, so that failures repeat
  return Array.from({ length: 12 }, () => Array.from({ length: rng.int(0, 6) }, () => ALPHABET[rng.int(0, ALPHABET.length - 1)]).join(""));
}

/** Patterns valid under the `u` flag, with strings that reach their edges. */
const ORACLE_U: [string, string[]][] = [
  ["^[a-c]+$", ["abcabc", "abd"]],
  ["[^abc]", ["abc", "abcd"]],
  ["^a{2,3}$", ["aaaaa"]],
  ["^a{2}$", []],
  ["^a{2,}$", ["aaaaaaa"]],
  ["^a{0}b$", ["ab"]],
  ["^(?:ab|a)*c$", ["ababac", "abbc", "c"]],
  ["x|y|zz", ["z", "zz", "yy"]],
  ["^(a|bc)+?$", ["bcabc", "bca", "b"]],
  ["^\\d+\\.\\d*$", ["1.", "12.34", ".5", "1.5.1"]],
  ["\\w\\W", ["a-", "__", "a😀"]],
  ["^\\s*$", ["  \n\t", "\u00a0\ufeff", " x"]],
  ["^\\S+$", ["a😀", "a b"]],
  ["^.$", ["\r", "\u2029", "\u0085"]],
  ["a.b", ["a\nb", "a😀b", "ab"]],
  ["^[\\d\\-x]+$", ["1-x", "1-y"]],
  ["^[-a]+$", ["-a-"]],
  ["^[a-]$", []],
  ["^[\\]a]$", ["]", "[]"]],
  ["^[^\\d\\s]{1,2}$", ["1", "aa", "a a", "😀😀"]],
  ["^\\x61\\u0062\\u{63}$", []],
  ["^[\\x61-\\x63]{1,2}$", ["cc", "ad"]],
  ["^(?<g>ab)c$", []],
  ["^\\^\\$\\|\\(\\)\\[\\]\\{\\}\\*\\+\\?\\\\\\/\\.$", ["^$|()[]{}*+?\\/.", "^$"]],
  ["^a*?b$", ["aaab", "b", "aba"]],
  ["^(a?){3}$", ["aa", "aaaa"]],
  ["^[^]$", ["\n"]],
  ["^[]$", []],
  ["^$", []],
  ["^", []],
  ["$", []],
  ["a$", ["ba", "ab"]],
  ["^a", ["ab", "ba"]],
  ["^\\t\\n\\r\\f\\v\\0$", ["\t\n\r\f\v\0"]],
  ["^(?:a|b(?:c|x)*)+$", ["bcxcab", "bcxd"]],
  ["^\\uD83D\\uDE00.$", ["😀a", "😀😀", "\ud83d"]],
  ["^[😀-😂]$", ["😁", "😃"]],
];

/** Patterns valid only without the `u` flag (Annex B literals), checked on strings without astral characters. */
const ORACLE_PLAIN: [string, string[]][] = [
  ["^a\\-b$", ["a-b"]],
  ["^[\\w-.]+$", ["a-.b", "a,b"]],
  ["^a{,2}$", ["a{,2}"]],
  ["^a]$", ["a]"]],
  ["x{", ["x{"]],
  ["^}$", ["}"]],
];

test("compilePattern() agrees with RegExp on classes, quantifiers, alternation, escapes, dot and anchors", () => {
  const cases = [...ORACLE_U.map(([p, s]) => [p, s, "u"] as const), ...ORACLE_PLAIN.map(([p, s]) => [p, s, ""] as const)];
  cases.forEach(([pattern, extra, flags], i) => {
    const re = compilePattern(pattern);
    const oracle = new RegExp(pattern, flags);
    const texts = [...FIXED, ...extra, ...randomStrings(1000 + i)].filter((t) => flags === "u" || !/[\ud800-\udfff]/.test(t));
    for (const text of texts) {
      assert.equal(matches(re, text), oracle.test(text), `pattern ${JSON.stringify(pattern)} on ${JSON.stringify(text)}`);
    }
  });
});

test("compilePattern() matches anywhere unless anchored", () => {
  const cases: [string, string, boolean][] = [
    ["b", "abc", true], ["^b", "abc", false], ["^a", "abc", true], ["b$", "abc", false], ["c$", "abc", true],
    ["^abc$", "abc", true], ["^abc$", "abcd", false], ["", "anything", true], ["[0-9]{3}", "ab1234", true],
  ];
  for (const [p, text, want] of cases) assert.equal(matches(compilePattern(p), text), want, `${p} on ${text}`);
});

test("CompiledRegex.step() returns null once an anchored prefix cannot match, and equal positions have equal keys", () => {
  const re = compilePattern("^ab+c$");
  const a = re.step(re.start, "a");
  assert.ok(a !== null);
  assert.equal(re.step(a, "c"), null);
  assert.equal(re.step(re.start, "b"), null);
  const ab = re.step(a, "b")!, abb = re.step(ab, "b")!;
  assert.equal(ab.key, abb.key);
  assert.equal(re.step(re.step(abb, "c")!, "c"), null, "nothing may follow the end anchor");
  // Unanchored at the end: past a match every text matches, in one state.
  const any = compilePattern("a");
  const keys = ["a", "ab", "abba", "xa\n"].map((t) => [...t].reduce<RegexState>((s, c) => any.step(s, c)!, any.start).key);
  assert.equal(new Set(keys).size, 1, keys.join(" | "));
  const star = compilePattern("^(ab)*$");
  assert.equal(star.step(star.step(star.start, "a")!, "b")!.key, star.start.key);
  // A state belongs to the expression that made it.
  assert.throws(() => re.accepts(any.start), /not a state of the pattern "\^ab\+c\$"/);
  assert.throws(() => re.step({ key: ab.key }, "c"), RangeError);
});

test("CompiledRegex.minToAccept() counts the fewest characters still needed", () => {
  const feed = (re: CompiledRegex, text: string) => [...text].reduce<RegexState | null>((s, c) => (s === null ? null : re.step(s, c)), re.start);
  const cases: [string, string, number][] = [
    ["^a{3}$", "", 3], ["^a{3}$", "a", 2], ["^a{3}$", "aaa", 0], ["^a+$", "", 1], ["^a+$", "aa", 0], ["^(ab|c)d$", "", 2],
    ["^x{2,5}y?$", "", 2], ["^x{2,5}y?$", "xxx", 0], ["b", "", 1], ["b", "xyz", 1], ["b", "xbz", 0], ["^(?:abc|d)*e$", "a", 3],
  ];
  for (const [p, text, want] of cases) {
    const re = compilePattern(p);
    assert.equal(re.minToAccept(feed(re, text)!), want, `${p} after ${JSON.stringify(text)}`);
  }
  const dead = compilePattern("^[^\\s\\S]$");
  assert.equal(dead.minToAccept(dead.start), Infinity);
  assert.equal(dead.accepts(dead.start), false);
  assert.equal(dead.step(dead.start, "a"), null);
});

test("CompiledRegex.universal() holds once every continuation matches, and only then", () => {
  const feed = (re: CompiledRegex, text: string) => [...text].reduce<RegexState | null>((s, c) => (s === null ? null : re.step(s, c)), re.start)!;
  const open = compilePattern("ab");
  assert.equal(open.universal(open.start), false);
  assert.equal(open.universal(feed(open, "xa")), false, "no match yet");
  assert.equal(open.universal(feed(open, "xab")), true);
  assert.equal(open.universal(feed(open, "xab\n\"z")), true, "anything may follow a match when the end is unanchored");
  const closed = compilePattern("^ab$");
  assert.equal(closed.accepts(feed(closed, "ab")) && !closed.universal(feed(closed, "ab")), true, "a match that must end here is not universal");
  const tail = compilePattern("a$");
  assert.equal(tail.universal(feed(tail, "ba")), false);
});

test("compilePattern() refuses lookarounds, backreferences, boundaries, flags, property escapes and misplaced anchors", () => {
  const refused: [string, RegExp][] = [
    ["a(?=b)", /lookahead "\(\?="/], ["a(?!b)", /lookahead "\(\?!"/], ["(?<=a)b", /lookbehind "\(\?<="/], ["(?<!a)b", /lookbehind "\(\?<!"/],
    ["(a)\\1", /backreference "\\1"/], ["(?<n>a)\\k<n>", /backreference "\\k/], ["\\bword", /word boundary "\\b"/], ["a\\B", /word boundary "\\B"/],
    ["(?i)a", /inline flags/], ["(?i:a)", /inline flags/], ["\\p{L}", /Unicode property escape/], ["[\\P{L}]", /Unicode property escape/],
    ["^a|b$", /alternation/], ["^a|b", /alternation/], ["a|b$", /alternation/], ["a^b", /anchor "\^"/], ["(^a)", /anchor "\^"/],
    ["a$b", /anchor "\$"/], ["(a$)", /anchor "\$"/], ["\\q", /unknown escape "\\q"/], ["\\01", /octal escape/],
  ];
  for (const [p, what] of refused) {
    assert.throws(() => compilePattern(p), (e: unknown) => {
      assert.ok(e instanceof RegexError, `${p}: ${String(e)}`);
      assert.equal(e.name, "RegexError");
      assert.match(e.message, what, p);
      assert.ok(e.message.includes(JSON.stringify(p)), `${p}: the message quotes the source: ${e.message}`);
      assert.match(e.message, /^The pattern .* not support/);
      return true;
    });
  }
});

test("compilePattern() refuses invalid syntax, naming what is wrong and quoting the source", () => {
  const invalid: [string, RegExp][] = [
    ["a(b", /group "\(" at offset 1 is not closed/], ["a)b", /unmatched "\)"/], ["a{3,1}", /"\{3,1\}" has its numbers out of order/],
    ["*a", /nothing to repeat/], ["a**", /nothing to repeat/], ["a|+", /nothing to repeat/], ["^*", /nothing to repeat/], ["{2}", /nothing to repeat/],
    ["a\\", /lone backslash/], ["[ab", /class "\[" at offset 0 is not closed/], ["[z-a]", /range "z-a" is out of order/],
    ["\\x4", /"\\x"/], ["\\u12", /"\\u"/], ["\\u{110000}", /"\\u\{"/], ["(?%a)", /starts no known group/], ["(?<1a>x)", /name/], ["\\c1", /"\\c"/],
  ];
  for (const [p, what] of invalid) {
    assert.throws(() => compilePattern(p), (e: unknown) => {
      assert.ok(e instanceof RegexError, `${p}: ${String(e)}`);
      assert.match(e.message, what, p);
      assert.ok(e.message.startsWith(`The pattern ${JSON.stringify(p)} is invalid: `), e.message);
      return true;
    });
    assert.throws(() => new RegExp(p, "u"), SyntaxError, `RegExp agrees ${p} is invalid`);
  }
});

test("compilePattern() refuses an automaton over the size cap", () => {
  for (const p of ["a{5000}", "(a{100}){100}", "x{999999999}", "(?:){0,9999}", "[a-z]{2,}".repeat(1000)]) {
    assert.throws(() => compilePattern(p), (e: unknown) => e instanceof RegexError && /too large .* over 4000 states/.test(e.message), p);
  }
  const big = compilePattern("^[a-z]{1,1000}$");
  assert.equal(matches(big, "q".repeat(1000)), true);
  assert.equal(matches(big, "q".repeat(1001)), false);
  assert.ok(matches(compilePattern(`^${"(".repeat(100)}a${")".repeat(100)}$`), "a"));
  assert.throws(() => compilePattern("(".repeat(200) + ")".repeat(200)), /nest deeper than 100/);
  // Valid for RegExp, but never read as "{2,}".
  assert.throws(() => compilePattern("a{2,99999999999999999999}"), /"\{2,99999999999999999999\}" has a count too large/);
});

const FORMAT_EXAMPLES: Record<string, { ok: string[]; bad: string[] }> = {
  date: { ok: ["2024-02-29", "2000-02-29", "1999-12-31", "0000-01-01", "0000-02-29"], bad: ["2024-02-30", "2023-02-29", "1900-02-29", "2024-04-31", "2024-13-01", "2024-00-10", "2024-1-01", "24-01-01", "2024-01-32", "2024-01-00", "2024-01-01T", "x2024-01-01"] },
  time: { ok: ["23:59:60Z", "00:00:00z", "12:30:45.123+05:30", "12:30:45-00:00"], bad: ["24:00:00Z", "12:60:00Z", "12:30:61Z", "12:30:45", "12:30:45.Z", "12:30:45+5:30", "12:30Z"] },
  "date-time": { ok: ["2024-02-29T12:30:45Z", "2024-02-29t12:30:45.5+01:00", "1985-04-12T23:20:50.52Z", "1990-12-31T15:59:60-08:00"], bad: ["2024-02-29 12:30:45Z", "2024-02-29T12:30:45", "2024-02-29T25:00:00Z", "2024-02-29"] },
  email: { ok: ["a@b.co", "first.last+tag@example.com", "x!#$%&'*+/=?^_`{|}~-@a-b.c", "root@localhost"], bad: ["a@", "@b.com", "a b@c.com", "a@-b.com", "a@b-.com", "a@b..com", "a@@b.com", "a@b.com."] },
  uuid: { ok: ["123e4567-e89b-12d3-a456-426614174000", "AAAAAAAA-BBBB-CCCC-DDDD-EEEEEEEEEEEE"], bad: ["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400", "g23e4567-e89b-12d3-a456-426614174000"] },
  ipv4: { ok: ["0.0.0.0", "255.255.255.255", "192.168.1.10", "10.0.0.9"], bad: ["256.1.1.1", "01.1.1.1", "1.1.1", "1.1.1.1.1", "1.1.1.-1", " 1.1.1.1", "1.1.1.300"] },
  hostname: { ok: ["example.com", "a", "xn--bcher-kva.example", "a-b.c1", "a".repeat(63)], bad: ["-a.com", "a-.com", "a..b", "a_b.com", `${"a".repeat(64)}.com`, "", "a.b."] },
  uuid1: { ok: ["123e4567-e89b-11d3-a456-426614174000"], bad: ["123e4567-e89b-41d3-a456-426614174000", "123e4567-e89b-11d3-c456-426614174000"] },
  uuid3: { ok: ["123e4567-e89b-31d3-8456-426614174000"], bad: ["123e4567-e89b-11d3-a456-426614174000"] },
  uuid4: { ok: ["123e4567-e89b-42d3-a456-426614174000", "F47AC10B-58CC-4372-A567-0E02B2C3D479"], bad: ["123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-42d3-7456-426614174000", "123e4567e89b42d3a456426614174000"] },
  uuid5: { ok: ["123e4567-e89b-52d3-b456-426614174000"], bad: ["123e4567-e89b-42d3-b456-426614174000"] },
  duration: { ok: ["P1Y", "P1Y2M", "P1Y2M3D", "P2M10D", "P3D", "PT4H", "PT4H5M6S", "PT5M", "PT6S", "P1DT12H", "P4W", "P0D"], bad: ["P", "PT", "P1Y3D", "P1H", "PT1D", "P1W2D", "1Y", "P-1D", "PT1.5S", "P1YT", "p1y"] },
  ipv6: { ok: ["::", "::1", "fe80::1", "2001:db8::8a2e:370:7334", "2001:0db8:85a3:0000:0000:8a2e:0370:7334", "1::", "1:2:3:4:5:6:7::", "::2:3:4:5:6:7:8", "1:2:3:4:5:6::8"], bad: [":", ":::", "1:2:3:4:5:6:7:8:9", "12345::", "1::2::3", "fe80:::1", "g::1", "1:2:3:4:5:6:7", "::1:2:3:4:5:6:7:8"] },
  uri: { ok: ["https://example.com/a?b=c", "urn:isbn:0451450523", "mailto:a@b.c", "a+b.c-d:"], bad: ["not a uri", "//example.com", "https://exa mple.com", "1http://x", "http://x/<y>", 'http://x"y', "http://x\ty"] },
};

test("formatPattern() gives an anchored pattern for each of FORMATS that takes valid values and refuses others", () => {
  assert.deepEqual([...FORMATS].sort(), ["date", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "time", "uri", "uuid", "uuid1", "uuid3", "uuid4", "uuid5"]);
  for (const name of FORMATS) {
    const source = formatPattern(name);
    assert.ok(source !== undefined && source.startsWith("^") && source.endsWith("$"), name);
    const re = compilePattern(source);
    const oracle = new RegExp(source, "u");
    const { ok, bad } = FORMAT_EXAMPLES[name];
    for (const text of ok) assert.ok(matches(re, text) && oracle.test(text), `${name} refused ${JSON.stringify(text)}`);
    for (const text of bad) assert.ok(!matches(re, text) && !oracle.test(text), `${name} took ${JSON.stringify(text)}`);
  }
  for (const other of ["iri", "regex", "toString", "", "DATE"]) assert.equal(formatPattern(other), undefined, other);
});

test("formatPattern(\"date\") takes exactly the calendar's dates: days per month, 29 February in leap years only", () => {
  const re = compilePattern(formatPattern("date")!);
  for (const year of [0, 4, 100, 400, 1900, 1999, 2000, 2023, 2024, 2100, 9996]) {
    for (let month = 0; month <= 13; month++) {
      for (let day = 0; day <= 32; day++) {
        const text = `${String(year).padStart(4, "0")}-${String(month).padStart(2, "0")}-${String(day).padStart(2, "0")}`;
        const leap = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
        const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1] ?? 0;
        assert.equal(matches(re, text), day >= 1 && day <= days, text);
      }
    }
  }
});

test("CompiledRegex.runRooms() gives the runs of each class set that keep the expression live, counted runs included", () => {
  const classes = ["abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " "];
  const word = compilePattern("^[A-Z][a-z]+( [A-Z][a-z]+)*$");
  assert.deepEqual(word.runRooms(word.start, classes, 64), [{ depth: 1, kinds: 0b0010, need: 2 }], "a capital, then a lowercase letter must follow");
  const inRun = word.step(word.start, "Sa")!;
  assert.deepEqual(word.runRooms(inRun, classes, 64), [{ depth: 1, kinds: 0b1001, need: 2 }, { depth: Infinity, kinds: 0b0001, need: 0 }], "a space or a letter, but no lowercase letter or second space after a space; letters alone run on");
  const unanchored = compilePattern("a.a");
  assert.deepEqual(unanchored.runRooms(unanchored.start, ["bcd", "xya"], 64), [{ depth: Infinity, kinds: 0b11, need: 3 }], "classes are the caller's; a search never dies");
  const counted = compilePattern("^[^<>]{1,8}0$");
  assert.deepEqual(counted.runRooms(counted.start, classes, 4), [{ depth: 4, kinds: 0b1111, need: 2 }], "looked at up to the cap");
  assert.deepEqual(counted.runRooms(counted.start, classes, 64), [{ depth: 8, kinds: 0b1111, need: 2 }], "eight of any plain character, then only the 0");
  assert.deepEqual(counted.runRooms(counted.start, classes, 4), [{ depth: 8, kinds: 0b1111, need: 2 }], "what was found looking further holds");
  const digits = compilePattern("^[0-9]{2,}$");
  assert.deepEqual(digits.runRooms(digits.start, classes, 64), [{ depth: Infinity, kinds: 0b0100, need: 2 }], "digits from the start, however many");
});

test("CompiledRegex.step() reads code points, caches transitions and stays quick", () => {
  const re = compilePattern(formatPattern("email")!);
  assert.equal(re.step(re.start, "😀"), null);
  assert.equal(re.step(re.start, ""), re.start);
  assert.equal(re.step(re.start, "ab")?.key, re.step(re.step(re.start, "a")!, "b")?.key, "a longer string steps through its code points");
  const t0 = performance.now();
  for (let i = 0; i < 2000; i++) assert.ok(matches(re, `user${i % 50}@host${i % 7}.example.com`));
  assert.ok(performance.now() - t0 < 1000, `2000 emails took ${Math.round(performance.now() - t0)} ms`);
});
