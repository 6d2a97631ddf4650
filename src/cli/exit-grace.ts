/**
 * The last word of a command: once it has answered (a clean stop, or an error), nothing it left
 * running — a socket whose call takes no signal, a component that ignored its stop — may keep the
 * process alive, or a pod would hang until SIGKILL instead of exiting with its code.
 */

/** How long a command that has answered may take to exit by itself. */
export const exitGraceMs = 2_000;

/**
 * Ends the process with `code` (default: `process.exitCode`) if it is still alive `exitGraceMs` from
 * now; `onHeld` is first told what kept it alive. Unreferenced, so a process that ends by itself ends
 * at once.
 */
export function exitAfterGrace(code?: number, onHeld?: (handles: string[]) => void): void {
  const end = (): void => {
    // What the command printed and a slow reader (`| less`) has not taken yet is its answer: waited
    // for, never cut off.
    const writing = [process.stdout, process.stderr].find((stream) => stream.writableLength > 0);
    if (writing) {
      writing.once('drain', end);
      return;
    }
    onHeld?.(process.getActiveResourcesInfo());
    process.exit(code);
  };
  setTimeout(end, exitGraceMs).unref();
}
