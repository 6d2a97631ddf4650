/**
 * How text someone else chose reaches a reason, an error, an audit record or a log line: bounded.
 * A request can carry 16 KiB of unverified proof (a Host header, a credential scope, a token's `kid`,
 * a certificate's names), and a reason that repeats a field of it in full made one denial cost the
 * log 24 KB. Shown through {@link quoted}, the same field costs about a hundred bytes and still says
 * what was sent: its start, and how long it was.
 */

/** Characters a JSON string may hold raw that a terminal or an editor would act on: C1 controls, line and paragraph separators, bidi overrides. */
const unsafeInJson = /[\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** At most `max` UTF-16 units of `text`, never half a surrogate pair. */
function head(text: string, max: number): string {
  const cut = text.slice(0, max);
  return /[\uD800-\uDBFF]$/.test(cut) ? cut.slice(0, -1) : cut;
}

/**
 * `value` as a JSON string, control characters escaped, its first `max` characters only (default 80):
 * `"sts.us-east-1.amazonaws.com"`, or `"éééé…"… (5802 characters)` when it is longer.
 */
export function quoted(value: string, max = 80): string {
  const text = JSON.stringify(head(value, max)).replace(
    unsafeInJson,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
  return value.length > max ? `${text}… (${value.length} characters)` : text;
}

/**
 * `text` (a sentence, not a value) cut to its first `max` characters, with its length when cut: the
 * last bound on a record's text, for the reasons whose values no call site quoted.
 */
export function clipped(text: string, max: number): string {
  return text.length > max ? `${head(text, max)}… (${text.length} characters)` : text;
}
