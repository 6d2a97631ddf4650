/**
 * Which node holds which pod range, so that a range is never given to a second node: a lookup by
 * overlap that costs a few map reads per prefix length present (every node of a cluster usually has
 * the same one), not a scan of every node. Pure.
 */
import { type Cidr, overlaps, parseCidr, truncate } from './cidr.ts';

/** The ranges of many nodes, by node name. */
export class RangeIndex {
  readonly #byNode = new Map<string, Cidr[]>();
  /** Canonical range text → the nodes holding exactly that range. */
  readonly #byRange = new Map<string, Set<string>>();
  /** `<family>/<length>` → how many held ranges have it. */
  readonly #lengths = new Map<string, number>();

  /** Records `node`'s ranges, replacing what it held; text that does not parse holds nothing. */
  set(node: string, ranges: readonly string[]): void {
    this.delete(node);
    const parsed = ranges.flatMap((text) => {
      try {
        return [parseCidr(text)];
      } catch {
        return [];
      }
    });
    if (parsed.length === 0) return;
    this.#byNode.set(node, parsed);
    for (const cidr of parsed) {
      const holders = this.#byRange.get(cidr.text) ?? new Set();
      this.#byRange.set(cidr.text, holders.add(node));
      const length = `${cidr.family}/${cidr.prefixLength}`;
      this.#lengths.set(length, (this.#lengths.get(length) ?? 0) + 1);
    }
  }

  /** Forgets `node`'s ranges. */
  delete(node: string): void {
    for (const cidr of this.#byNode.get(node) ?? []) {
      const holders = this.#byRange.get(cidr.text);
      holders?.delete(node);
      if (holders?.size === 0) this.#byRange.delete(cidr.text);
      const length = `${cidr.family}/${cidr.prefixLength}`;
      const left = (this.#lengths.get(length) ?? 1) - 1;
      if (left === 0) this.#lengths.delete(length);
      else this.#lengths.set(length, left);
    }
    this.#byNode.delete(node);
  }

  /** The nodes other than `except` holding a range that overlaps `cidr`, sorted. */
  holders(cidr: Cidr, except?: string): string[] {
    const found = new Set<string>();
    for (const key of this.#lengths.keys()) {
      const [family, length] = key.split('/').map(Number) as [number, number];
      if (family !== cidr.family) continue;
      if (length <= cidr.prefixLength) {
        // A range as long or shorter overlaps `cidr` only by containing it: one lookup.
        for (const node of this.#byRange.get(truncate(cidr, length)) ?? []) found.add(node);
      } else {
        // Longer ranges inside `cidr`: rare (mixed sizes), so a scan is acceptable.
        for (const [node, ranges] of this.#byNode) {
          if (ranges.some((r) => r.prefixLength === length && overlaps(r, cidr))) found.add(node);
        }
      }
    }
    if (except !== undefined) found.delete(except);
    return [...found].sort();
  }
}
