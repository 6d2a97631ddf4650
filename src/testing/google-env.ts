/**
 * Runs a test with google-auth-library's Application Default Credentials search confined to this
 * machine: no `GOOGLE_APPLICATION_CREDENTIALS` (unless `vars` sets one), no gcloud credentials
 * (`CLOUDSDK_CONFIG` points nowhere), and the metadata server neither pinged
 * (`METADATA_SERVER_DETECTION=none`) nor, should anything ask it, anywhere but a closed loopback port.
 */
const names = [
  'GOOGLE_APPLICATION_CREDENTIALS',
  'google_application_credentials',
  'CLOUDSDK_CONFIG',
  'GCE_METADATA_HOST',
  'GCE_METADATA_IP',
  'METADATA_SERVER_DETECTION',
] as const;

export async function withLocalGoogleCredentials<T>(
  vars: Partial<Record<(typeof names)[number], string>>,
  work: () => Promise<T>,
): Promise<T> {
  const saved = Object.fromEntries(names.map((name) => [name, process.env[name]]));
  for (const name of names) delete process.env[name];
  Object.assign(process.env, {
    CLOUDSDK_CONFIG: '/nonexistent/gcloud',
    GCE_METADATA_HOST: '127.0.0.1:9',
    GCE_METADATA_IP: '127.0.0.1:9',
    METADATA_SERVER_DETECTION: 'none',
    ...vars,
  });
  try {
    return await work();
  } finally {
    for (const name of names) {
      const value = saved[name];
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
}
