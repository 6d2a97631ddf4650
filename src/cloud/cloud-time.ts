/**
 * The times clouds write in their records (a server's creation time, which decides whether a
 * certificate was issued to that machine or to one before it), read strictly.
 */
import { malformedAnswer } from './api-answer.ts';

/** How a cloud writes its times, beyond RFC 3339 with an offset (`Z`, `+00:00`). */
export interface CloudTimeFormat {
  /**
   * A time without an offset is UTC, as the cloud documents it (Linode writes `2018-01-01T00:01:01`;
   * Azure "reports time in UTC but it doesn't include the 'Z' time zone suffix in some cases", as
   * Azure/azure-sdk-for-go's generated time_rfc3339.go reads ARM's times). Elsewhere such a time says
   * nothing of its zone, and is refused.
   */
  utcWithoutOffset?: boolean;
}

/** RFC 3339 date-time: date, `T`, time, an optional fraction and (see {@link CloudTimeFormat}) an offset. */
const rfc3339 = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|([+-])(\d{2}):(\d{2}))?$/;

/**
 * The time a cloud's record states (a server's creation time), or undefined when the record states
 * none (the field absent or null). A value that is there but is no time — not a string, not RFC 3339,
 * a day or hour out of range (which `Date` would silently carry over: February 30th is March 1st to
 * it), or without an offset where the cloud always writes one — is a malformed answer, never dropped:
 * a server's creation time decides whether a certificate was issued to it or to a machine before it.
 */
export function cloudTime(value: unknown, what: string, format: CloudTimeFormat = {}): Date | undefined {
  if (value === undefined || value === null) return undefined;
  const match = typeof value === 'string' ? rfc3339.exec(value) : null;
  const time = match ? timeOfMatch(match, format) : undefined;
  if (time === undefined) {
    throw malformedAnswer(
      `${what} is ${JSON.stringify(value)?.slice(0, 60)}, not a time (RFC 3339${format.utcWithoutOffset ? '' : ' with an offset'})`,
    );
  }
  return time;
}

/** The instant an RFC 3339 match names, or undefined when a field is out of its range. */
function timeOfMatch(match: RegExpExecArray, format: CloudTimeFormat): Date | undefined {
  const [, dateTime = '', fraction = '', zone, sign, offsetHours = '0', offsetMinutes = '0'] = match;
  if (zone === undefined && !format.utcWithoutOffset) return undefined;
  if (Number(offsetHours) > 23 || Number(offsetMinutes) > 59) return undefined;
  const utc = new Date(`${dateTime}Z`);
  // Date carries a field out of its range over (February 30th is March 1st to it, 24:00 the next
  // day): what does not read back as written is refused instead.
  if (Number.isNaN(utc.getTime()) || utc.toISOString().slice(0, 19) !== dateTime) return undefined;
  const offsetMs = (Number(offsetHours) * 60 + Number(offsetMinutes)) * 60_000 * (sign === '-' ? -1 : 1);
  return new Date(utc.getTime() + Number(fraction.padEnd(3, '0').slice(0, 3)) - offsetMs);
}
