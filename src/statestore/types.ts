/**
 * The state store as the controller sees it: a small virtual file system addressed by URL
 * (`file://`, `s3://`, `gs://`, `memfs://`, the S3-compatible `do://`, `hos://`, `linode://`,
 * `scw://`, OpenStack's `swift://` and `azureblob://`, as kops writes them), the layout kops writes
 * into it, and change detection by ETag / generation so that edits reach nodes in seconds.
 */

/** One object read from the store, with the version tag used for change detection. */
export interface StoredObject {
  data: Buffer;
  /**
   * ETag (S3 and the S3-compatible stores, Swift, Azure Blob), generation (GCS), inode+mtime+size
   * (file) or a counter (memfs): changes when the object does.
   */
  version: string;
  /**
   * When the store says the object was last written (ms since the epoch; S3, Swift and Azure Blob's
   * `Last-Modified`), where it says so. A read whose object is older than the one held is a lagging
   * replica's or a stale cache's answer, not an edit: the ClusterStore keeps the newer one.
   */
  modifiedMs?: number;
}

/** A virtual file system rooted at a URL such as `s3://bucket/prefix` or `file:///srv/state`. */
export interface Vfs {
  /** The URL this VFS is rooted at. */
  readonly url: string;
  /** Reads an object; throws NotFoundError when it does not exist. */
  read(path: string): Promise<StoredObject>;
  /** Returns only the object's version, or undefined if absent — cheap enough to poll. */
  stat(path: string): Promise<string | undefined>;
  /** Writes an object atomically (readers see the old or the new content, never a mix). */
  write(path: string, data: Buffer | string, options?: { mode?: number }): Promise<void>;
  /** Lists object paths (relative to the root) under a prefix, sorted. */
  list(prefix: string): Promise<string[]>;
  /** Deletes an object; deleting an absent object is not an error. */
  delete(path: string): Promise<void>;
}

/**
 * The largest object a backend reads (and the largest listing page): kops' objects are kilobytes, so
 * anything near this is not one, and a store that sends more is refused rather than held in memory.
 */
export const maxObjectBytes = 16 * 1024 * 1024;
