/**
 * An O(1) least-recently-used order: a Map to nodes of a doubly linked list. (A plain Map used as a
 * queue degrades: V8 leaves deleted slots at its front that every `keys().next()` must skip.)
 */
import { BlockHashTable } from "./hash-table.ts";
import type { BlockHash } from "./types.ts";

interface Node<K, V> {
  key: K;
  value: V;
  prev: Node<K, V> | null;
  next: Node<K, V> | null;
}

/** The key → node map an {@link LruList} needs (a Map, or a {@link BlockHashTable} for block hashes). */
interface NodeMap<K, N> {
  readonly size: number;
  get(key: K): N | undefined;
  has(key: K): boolean;
  set(key: K, node: N): void;
  delete(key: K): boolean;
}

/** Keys in recency order, oldest first, each with a value. */
export class LruList<K, V> {
  private head: Node<K, V> | null = null; // oldest
  private tail: Node<K, V> | null = null; // newest

  /** Creates an empty list; `nodes` defaults to a Map (see {@link LruList.forBlockHashes}). */
  constructor(private readonly nodes: NodeMap<K, Node<K, V>> = new Map<K, Node<K, V>>()) {}

  /** A list keyed by block hashes or block ids (non-negative integers), on a faster table than Map. */
  static forBlockHashes<V>(): LruList<BlockHash, V> {
    return new LruList<BlockHash, V>(new BlockHashTable<Node<BlockHash, V>>());
  }

  /** Number of keys. */
  get size(): number {
    return this.nodes.size;
  }

  /** Value of `key`, without touching its recency. */
  get(key: K): V | undefined {
    return this.nodes.get(key)?.value;
  }

  /** True when `key` is present. */
  has(key: K): boolean {
    return this.nodes.has(key);
  }

  /** Inserts or updates `key` as the newest. */
  set(key: K, value: V): void {
    let n = this.nodes.get(key);
    if (n !== undefined) {
      this.unlink(n);
      n.value = value;
    } else {
      n = { key, value, prev: null, next: null };
      this.nodes.set(key, n);
    }
    n.prev = this.tail;
    n.next = null;
    if (this.tail !== null) this.tail.next = n;
    this.tail = n;
    if (this.head === null) this.head = n;
  }

  /** Removes `key`; true when it was present. */
  delete(key: K): boolean {
    const n = this.nodes.get(key);
    if (n === undefined) return false;
    this.unlink(n);
    this.nodes.delete(key);
    return true;
  }

  /** Oldest key, or undefined. */
  oldest(): K | undefined {
    return this.head?.key;
  }

  /** Removes and returns the oldest key. */
  shift(): K | undefined {
    const n = this.head;
    if (n === null) return undefined;
    this.unlink(n);
    this.nodes.delete(n.key);
    return n.key;
  }

  private unlink(n: Node<K, V>): void {
    if (n.prev !== null) n.prev.next = n.next;
    else this.head = n.next;
    if (n.next !== null) n.next.prev = n.prev;
    else this.tail = n.prev;
    n.prev = n.next = null;
  }
}
