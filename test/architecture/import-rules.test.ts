/**
 * The house rule of src/: imports point down the data's path, never back up.
 * This reads every module's relative imports (static and dynamic) and checks
 * each arrow against the table of which folder may import which, so a storage
 * module that reaches up into ingest fails here, not in a review.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const srcRoot = resolve(import.meta.dirname, "..", "..", "src");

/**
 * Each layer and the layers it may import (itself always allowed). The README's
 * code map says the same in words; a new folder must be added here first.
 */
const allowedImports: Record<string, readonly string[]> = {
  "config": [],
  "errors": ["config"],
  "log": [],
  "metrics": [],
  "json": ["config", "errors"],
  "storage": ["config", "errors", "log", "metrics"],
  "auth": ["config", "errors", "log", "storage"],
  "ingest": ["config", "errors", "log", "metrics", "json", "storage", "auth", "workers"],
  "query": ["config", "errors", "log", "metrics", "json", "storage", "workers"],
  "workers": ["config", "errors", "log", "json", "storage", "ingest", "query"],
  "http": ["config", "errors", "log", "metrics", "json", "storage", "auth", "ingest", "query", "workers"],
  // The ClickHouse store: its outbox is built on the storage layer's WAL, its queries on the query layer's kernels.
  "clickhouse": ["config", "errors", "log", "metrics", "storage", "query", "workers"],
  "serve": ["config", "errors", "log", "metrics", "json", "storage", "auth", "ingest", "query", "workers", "http", "clickhouse"],
  "main": ["log", "serve"],
  // The command and its lifecycle commands are one layer in two folders: the table in cli.ts loads them lazily.
  "cli": ["config", "errors", "log", "storage", "auth", "lifecycle", "clickhouse"],
  // Import sends through the Node client as any user's process does.
  "lifecycle": ["config", "errors", "log", "json", "storage", "auth", "cli", "client"],
  // Code that runs in browsers or users' processes: it imports nothing of the server.
  "sdk": [],
  "client": [],
};

/** The layer of a path under src/: its first folder, or the file's own name at the root. */
function layerOf(pathFromSrc: string): string {
  const [first] = pathFromSrc.split("/");
  return first.endsWith(".ts") ? first.slice(0, -".ts".length) : first;
}

function sourceFiles(directory: string): string[] {
  return readdirSync(directory).flatMap((name) => {
    const path = join(directory, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return name.endsWith(".ts") ? [path] : [];
  });
}

/** Relative specifiers of `import … from`, `export … from`, bare `import "…"` and `import(…)`. */
function relativeImports(source: string): string[] {
  const specifiers: string[] = [];
  for (const match of source.matchAll(/(?:from\s+|import\s*\(\s*|import\s+)["'](\.{1,2}\/[^"']+)["']/g)) specifiers.push(match[1]);
  return specifiers;
}

interface Arrow {
  from: string;
  to: string;
}

export function importArrows(root: string): Arrow[] {
  return sourceFiles(root).flatMap((file) =>
    relativeImports(readFileSync(file, "utf8")).map((specifier) => ({
      from: relative(root, file),
      to: relative(root, resolve(dirname(file), specifier)).replace(/\.js$/, ".ts"),
    })),
  );
}

export function brokenArrows(arrows: Arrow[]): string[] {
  return arrows.flatMap(({ from, to }) => {
    if (to.startsWith("..")) return [`${from} imports ${to}, outside src/`];
    const source = layerOf(from), target = layerOf(to);
    if (source === target) return [];
    const allowed = allowedImports[source];
    if (allowed === undefined) return [`${from}: layer "${source}" is not in the import table`];
    return allowed.includes(target) ? [] : [`${from} imports ${to} (${source} may not import ${target})`];
  });
}

describe("src/ import rules", () => {
  it("every import points down the data's path", () => {
    const arrows = importArrows(srcRoot);
    expect(arrows.length).toBeGreaterThan(50);
    expect(brokenArrows(arrows)).toEqual([]);
  });

  it("catches a storage module that imports ingest", () => {
    expect(brokenArrows([{ from: "storage/store.ts", to: "ingest/ingest-service.ts" }])).toEqual([
      "storage/store.ts imports ingest/ingest-service.ts (storage may not import ingest)",
    ]);
  });

  it("catches a query module that imports http, and anything that imports bench", () => {
    expect(brokenArrows([{ from: "query/schemas.ts", to: "http/server.ts" }])).toHaveLength(1);
    expect(brokenArrows([{ from: "cli.ts", to: "../bench/suite/main.ts" }])).toHaveLength(1);
  });

  it("finds dynamic and bare imports too", () => {
    expect(relativeImports(`const m = await import("../bench/suite/main.js");`)).toEqual(["../bench/suite/main.js"]);
    expect(relativeImports(`import "../ingest/event-fields.js";`)).toEqual(["../ingest/event-fields.js"]);
  });
});
