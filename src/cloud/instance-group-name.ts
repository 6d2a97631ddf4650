/**
 * What a cloud's record may name as a kops instance group. kops names instance groups as Kubernetes
 * objects (a lower-case DNS-1123 subdomain) and writes the name into the node label
 * `kops.k8s.io/instancegroup`, a label value of at most 63 characters; the controller then reads
 * `instancegroup/<name>` from the state store. A tag or label the cloud reports that is no such
 * name (path characters, upper case, a 300-character value) was not written by kops: it names no
 * instance group, whatever else the record says.
 */
import { isDnsSubdomain } from '../dns-name.ts';

/** The longest instance group name (a label value's limit). */
const maxInstanceGroupNameLength = 63;

/** Why `name` cannot be a kops instance group name, or undefined when it can. */
export function instanceGroupNameProblem(name: string): string | undefined {
  if (name.length <= maxInstanceGroupNameLength && isDnsSubdomain(name)) return undefined;
  const shown =
    name.length > 64
      ? `${JSON.stringify(name.slice(0, 64))}… (${name.length} characters)`
      : JSON.stringify(name);
  return `${shown} is not a kops instance group name (a lower-case DNS name of at most ${maxInstanceGroupNameLength} characters)`;
}
