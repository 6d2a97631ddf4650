/**
 * JSON objects as decoded from an answer or a file, whatever shape it had: what every reader of
 * untrusted JSON (the API server's objects, kops' files, the clouds' answers) asks before it reads a
 * field, written once.
 */

/** Whether `value` is an object of JSON: not null, not an array. */
export function isJsonObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** The fields of `value` when it is an object of JSON, else none. */
export function fieldsOf(value: unknown): Record<string, unknown> {
  return isJsonObject(value) ? value : {};
}

/** Whether `value` is an object of JSON whose every value is a string (labels, annotations, tags). */
export function isStringMap(value: unknown): value is Record<string, string> {
  return isJsonObject(value) && Object.values(value).every((v) => typeof v === 'string');
}

/** Whether `value` is a list of strings. */
export function isStringList(value: unknown): value is string[] {
  return Array.isArray(value) && value.every((v) => typeof v === 'string');
}
