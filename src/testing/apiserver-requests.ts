/**
 * What the simulated API server says it answered, from its own /metrics (`apiserver_request_total`,
 * as a real one counts them): how tests count the calls the code under test made.
 */
import { request as httpsRequest } from 'node:https';
import type { SimApiServer } from '../sim/apiserver/index.ts';

/** One `apiserver_request_total` series: its labels and its count. */
export interface ApiRequestCount {
  labels: Record<string, string>;
  count: number;
}

/** Every `apiserver_request_total` series of `resource` the simulated API server has answered. */
export async function apiServerRequests(sim: SimApiServer, resource: string): Promise<ApiRequestCount[]> {
  const options: { headers?: Record<string, string> } = {};
  await sim.kubeConfig().applyToHTTPSOptions(options);
  const text = await new Promise<string>((resolve, reject) => {
    httpsRequest(new URL('/metrics', sim.url), { ...options, ca: sim.caCertificate }, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk));
      res.on('end', () => resolve(body));
    })
      .on('error', reject)
      .end();
  });
  return text
    .split('\n')
    .filter((line) => line.startsWith('apiserver_request_total{'))
    .map((line) => ({
      labels: Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]])),
      count: Number(line.slice(line.lastIndexOf(' ') + 1)),
    }))
    .filter((series) => series.labels['resource'] === resource);
}

/** The sum of the counts of `series` whose labels include `labels`. */
export function countOf(series: readonly ApiRequestCount[], labels: Record<string, string>): number {
  return series
    .filter((s) => Object.entries(labels).every(([name, value]) => s.labels[name] === value))
    .reduce((sum, s) => sum + s.count, 0);
}
