/**
 * Bounds the connections both listeners hold open, idle keep-alive ones
 * included, where uWS cannot count them: this uWS has no HTTP connection
 * open/close hook and closes idle connections only after its fixed 10 s. So the
 * process's open descriptors are counted on a timer; above the cap the
 * listeners stop accepting (the kernel refuses new connections cleanly, and
 * accept cannot spin on EMFILE while the registry still needs a descriptor),
 * and they accept again once idle connections have timed out.
 */
import { readdirSync } from "node:fs";
import { limits } from "../config/limits.js";
import { log } from "../log.js";

export interface ListenerSwitch {
  /** Closes the listen sockets; open connections keep being served. */
  pause(): void;
  /** Listens again on the same ports; false when a port could not be taken (tried again on the next count). */
  resume(): boolean;
}

/** Descriptors open in this process; undefined where /proc is missing (then nothing is guarded). */
function descriptorsOpen(): number | undefined {
  try {
    return readdirSync("/proc/self/fd").length;
  } catch {
    return undefined;
  }
}

export function guardConnections(listeners: ListenerSwitch): { stop(): void } {
  const resumeBelow = Math.floor(limits.httpDescriptorsOpenMax * 0.9);
  let paused = false;
  const timer = setInterval(() => {
    const open = descriptorsOpen();
    if (open === undefined) return clearInterval(timer);
    if (!paused && open >= limits.httpDescriptorsOpenMax) {
      paused = true;
      listeners.pause();
      // Without listeners nothing else may keep the process alive once the last connection closes.
      timer.ref();
      log.warn(`${open} descriptors open (EVENTIDE_HTTP_DESCRIPTORS_OPEN_MAX ${limits.httpDescriptorsOpenMax}): not accepting connections until below ${resumeBelow}`);
    } else if (paused && open < resumeBelow) {
      if (!listeners.resume()) return log.warn(`${open} descriptors open, but a listener's port cannot be taken again: retrying`);
      paused = false;
      timer.unref();
      log.info(`${open} descriptors open: accepting connections again`);
    }
  }, limits.httpDescriptorsSampleIntervalMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
