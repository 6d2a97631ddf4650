/** Test helpers: the cloud call metrics read back from a registry, keyed for plain assertions. */
import type { Registry } from 'prom-client';

/**
 * `kops_controller_cloud_requests_total` as `{"<cloud> <call> <result>": count}`, only the series
 * that exist (an empty object when nothing was counted).
 */
export async function cloudRequests(registry: Registry): Promise<Record<string, number>> {
  const metric = registry.getSingleMetric('kops_controller_cloud_requests_total');
  const out: Record<string, number> = {};
  for (const { labels, value } of (await metric?.get())?.values ?? []) {
    out[`${labels['cloud']} ${labels['call']} ${labels['result']}`] = value;
  }
  return out;
}

/** The calls `call` of `cloud` counted in `kops_controller_cloud_requests_total`, whatever their result. */
export async function cloudCallsMade(registry: Registry, cloud: string, call: string): Promise<number> {
  return Object.entries(await cloudRequests(registry))
    .filter(([key]) => key.startsWith(`${cloud} ${call} `))
    .reduce((sum, [, n]) => sum + n, 0);
}

/** How many calls `kops_controller_cloud_request_duration_seconds` observed for `cloud` and `call`. */
export async function cloudCallsTimed(registry: Registry, cloud: string, call: string): Promise<number> {
  const metric = registry.getSingleMetric('kops_controller_cloud_request_duration_seconds');
  const count = (await metric?.get())?.values.find(
    (v) =>
      (v as { metricName?: string }).metricName === 'kops_controller_cloud_request_duration_seconds_count' &&
      v.labels['cloud'] === cloud &&
      v.labels['call'] === call,
  );
  return count?.value ?? 0;
}
