/**
 * Token masks from an output grammar (src/engine/grammar.ts): before each step, every token whose
 * text cannot come next gets a logit of -1e30 through the same sparse add as logit biases, and EOS
 * is allowed only where the grammar may end.
 *
 * The vocabulary's token texts sit in a character trie built once per engine, so finding the
 * allowed tokens walks only the prefixes the grammar accepts: in most states a handful of first
 * characters, not the whole vocabulary. Building the mask still touches every token id (the barred
 * ones are the output), a cost to know at 150k-token vocabularies.
 */
import { grammarComplete, grammarFeed, grammarStart, grammarStep, type GrammarState, type OutputGrammar } from "./grammar.ts";

interface TrieNode {
  readonly children: Map<string, TrieNode>;
  /** Tokens whose text ends here. */
  readonly ids: number[];
}

/** The token texts of a vocabulary as a character trie (empty texts and partial UTF-8 pieces left out). */
export class TokenTrie {
  readonly root: TrieNode = { children: new Map(), ids: [] };

  /** @param texts each token's text as it streams (tokenizer.tokenText), "" for special tokens */
  constructor(readonly texts: readonly string[]) {
    texts.forEach((t, id) => {
      // A piece of a UTF-8 character decodes to U+FFFD: no grammar can place it.
      if (t === "" || t.includes("\uFFFD")) return;
      let node = this.root;
      for (const c of t) {
        let next = node.children.get(c);
        if (next === undefined) node.children.set(c, (next = { children: new Map(), ids: [] }));
        node = next;
      }
      node.ids.push(id);
    });
  }

  /** Ids of the tokens whose whole text the grammar accepts from `state`. */
  allowed(state: GrammarState): number[] {
    const out: number[] = [];
    const walk = (node: TrieNode, s: GrammarState) => {
      for (const [c, child] of node.children) {
        const next = grammarStep(s, c);
        if (next.length === 0) continue;
        out.push(...child.ids);
        walk(child, next);
      }
    };
    walk(this.root, state);
    return out;
  }
}

/** One request's output constraint: its grammar state and the masks it implies. */
export class OutputConstraint {
  #state: GrammarState;
  #fed = 0;

  /**
   * Throws SchemaError when the grammar's schema is outside the supported subset. With
   * `afterReasoning` the output starts as reasoning, free until `</think>` (grammar.ts).
   */
  constructor(grammar: OutputGrammar, private readonly trie: TokenTrie, private readonly eos: readonly number[], afterReasoning = false) {
    this.#state = grammarStart(grammar, afterReasoning);
  }

  /**
   * Masks for the next token, the output so far being `tokens` from `outputStart` on: the tokens
   * barred next, as additions of -1e30 (EOS barred until the grammar may end).
   */
  next(tokens: readonly number[], outputStart: number): Map<number, number> {
    for (; outputStart + this.#fed < tokens.length; this.#fed++) {
      const fed = grammarFeed(this.#state, this.trie.texts[tokens[outputStart + this.#fed]] ?? "");
      // A token the mask allowed always feeds; a stale state (none should arise) keeps the last good one.
      if (fed.length > 0) this.#state = fed;
    }
    const ok = new Uint8Array(this.trie.texts.length);
    for (const id of this.trie.allowed(this.#state)) ok[id] = 1;
    const done = grammarComplete(this.#state);
    for (const id of this.eos) ok[id] = done ? 1 : 0;
    const barred = new Map<number, number>();
    for (let id = 0; id < ok.length; id++) if (ok[id] === 0) barred.set(id, -1e30);
    return barred;
  }
}
