/** The page a listing request selects: its size parameter and `NextToken`, as every AWS Describe call reads them. */
import { intParam, pageToken } from './query.ts';

/** How a call sizes its pages: the parameter's name and the sizes AWS accepts. */
export interface PageSize {
  param: 'MaxResults' | 'MaxRecords';
  min: number;
  max: number;
  /** Without the parameter (EC2 answers everything at once: `Number.MAX_SAFE_INTEGER`). */
  default: number;
}

/** The items of the requested page and the token of the next one, when more remain. */
export function pageOf<T>(
  items: readonly T[],
  params: ReadonlyMap<string, string>,
  size: PageSize,
): { page: T[]; nextToken: string | undefined } {
  const limit = intParam(params, size.param, size);
  const offset = pageToken.decode(params.get('NextToken'));
  const page = items.slice(offset, offset + limit);
  const end = offset + page.length;
  return { page, nextToken: end < items.length ? pageToken.encode(end) : undefined };
}
