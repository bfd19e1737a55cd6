/**
 * Completes package-lock.json with entries for optional platform packages
 * (darwin, win32, musl builds of native addons) that the registry mirror on
 * these machines does not serve. npm then writes a lock without them, and
 * `npm ci` refuses that lock as out of sync with package.json. The added
 * entries name only version, os and cpu: npm skips them on linux-x64 and never
 * fetches them. Run after any `npm install` that changes dependencies:
 *
 *   node scripts/complete-lockfile.mjs
 *
 * then `npm install` once more: npm rewrites the added entries in its own
 * order and form (with `dev` flags). Commit that lock: `npm ci` accepts it and
 * a later `npm install` leaves it unchanged.
 */
import { readFileSync, writeFileSync } from "node:fs";

const path = process.argv[2] ?? "package-lock.json";
const lock = JSON.parse(readFileSync(path, "utf8"));
let added = 0;
for (const [key, entry] of Object.entries(lock.packages)) {
  for (const [name, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const nested = `${key ? `${key}/` : ""}node_modules/${name}`;
    const top = `node_modules/${name}`;
    if (lock.packages[nested] || lock.packages[top]) continue;
    const platform = /(darwin|linux|win32|freebsd|android)-(x64|arm64|arm|ia32)(-musl)?/.exec(name);
    if (!platform) {
      console.error(`complete-lockfile: ${name} names no platform; left alone`);
      continue;
    }
    lock.packages[top] = { version, optional: true, os: [platform[1]], cpu: [platform[2]], ...(platform[3] ? { libc: ["musl"] } : {}) };
    added++;
  }
}
writeFileSync(path, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`complete-lockfile: added ${added} platform entries`);
