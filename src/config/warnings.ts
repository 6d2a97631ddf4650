/**
 * What a valid config asks for that this implementation accepts but does not do, as one line each
 * for the log at start-up: kops writes these keys, so refusing them would stop kops' clusters from
 * starting, and ignoring them silently would hide a difference an operator must know about.
 */
import type { Config } from './schema.ts';

export function configWarnings(config: Config): string[] {
  const warnings: string[] = [];
  if (config.discovery?.enabled) {
    warnings.push(
      'discovery.enabled (gossip, k8s.local clusters) is accepted but not implemented: this controller ' +
        'does not publish gossip discovery records, so nodes must reach the API server and this server ' +
        'through DNS names or a load balancer (docs/configuration.md)',
    );
  }
  return warnings;
}
