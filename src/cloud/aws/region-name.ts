/**
 * How an AWS region is spelt, in every partition: `us-east-1`, `cn-north-1`, `us-gov-west-1`,
 * `us-iso-east-1`, `eusc-de-east-1`. Pure: the configuration's schema reads it without loading the SDK.
 */
const regionPattern = /^[a-z]{2,}(?:-[a-z0-9]+)+-\d+$/;

/** Whether `name` is spelt as an AWS region. */
export function isAwsRegionName(name: string): boolean {
  return regionPattern.test(name);
}
