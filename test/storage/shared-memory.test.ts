/**
 * Dropped shared buffers are freed while a thread keeps allocating them, as
 * the store's active columns do when they grow and at every checkpoint:
 * V8 does not count shared memory when it decides to collect, and
 * `sharedBuffer` makes it (shared-memory.ts). Run in a process of its own,
 * so the resident memory measured is only this loop's.
 */
import { spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { expect, it } from "vitest";

const moduleUrl = pathToFileURL(resolve(import.meta.dirname, "../../dist/src/storage/shared-memory.js")).href;
const mebibyte = 1024 * 1024;

// With --expose-gc (the server's flags) a thread asks for collections; without it, it allocates balloons.
it.each([[[]], [["--expose-gc"]]])("keeps resident memory near the live set while 3 GiB of shared buffers are allocated and dropped (node flags %j)", (flags: string[]) => {
  // 16 live buffers of 1 MiB, each written whole; 3 072 allocated in all. The event loop turns now and then, as a server's does.
  const script = `
    import { sharedBuffer } from ${JSON.stringify(moduleUrl)};
    const live = [];
    let peak = 0;
    for (let index = 0; index < 3072; index++) {
      const buffer = sharedBuffer(${mebibyte});
      new Uint8Array(buffer).fill(index & 255);
      live.push(buffer);
      if (live.length > 16) live.shift();
      if (index % 32 === 0) await new Promise((resolve) => setImmediate(resolve));
      peak = Math.max(peak, process.memoryUsage().rss);
    }
    process.stdout.write(JSON.stringify({ peak }));
  `;
  const child = spawnSync(process.execPath, [...flags, "--input-type=module", "-e", script], { encoding: "utf8" });
  expect(child.status, child.stderr).toBe(0);
  const { peak } = JSON.parse(child.stdout) as { peak: number };
  // Without balloons or collections asked for, the same loop peaks at about 2 GiB on Node 20.
  expect(peak / mebibyte).toBeLessThan(512);
});
