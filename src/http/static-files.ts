/**
 * The dashboard's files, served by the query listener beside /api: a fixed
 * allow-list read into memory once at start, so a request path is only ever a
 * key into a map and never reaches the file system (no traversal to guard).
 *
 * Every asset lives under /assets/<version>/, where the version is a hash of
 * all the served bytes: assets are cached for good (immutable) and a new
 * release changes every URL at once, so the relative imports between the
 * app's modules stay consistent. The page itself (/) is never cached. The
 * browser resolves the libraries' bare imports ("preact") through an import
 * map inlined in the page, allowed by the Content-Security-Policy through its
 * hash: the policy lets the page run nothing but its own files.
 */
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { gzipSync } from "node:zlib";
import { dirname, join, resolve } from "node:path";

export interface StaticAsset {
  /** Header name and value pairs, Content-Type first. */
  headers: Array<[string, string]>;
  body: Buffer;
}

export interface StaticFiles {
  /** The asset served at a request path (query string already removed), gzipped when the client takes gzip and it pays. */
  find(path: string, acceptEncoding: string): StaticAsset | undefined;
  version: string;
}

/** Both forms of a file, compressed once at start. */
interface StaticEntry {
  plain: StaticAsset;
  gzip: StaticAsset | undefined;
}

/** Front-end modules, as they sit in the source tree (plain ES modules: there is no build step). */
const appFiles = ["app.js", "api.js", "state.js", "widgets.js", "chart.js", "trend.js", "funnel.js", "retention.js", "live.js", "style.css"];

/** Library files, from their npm packages' dist folders: served name → [package, file inside it]. */
const libraryFiles: Record<string, [string, string]> = {
  "preact.mjs": ["preact", "dist/preact.module.js"],
  "preact-hooks.mjs": ["preact", "hooks/dist/hooks.module.js"],
  "htm.mjs": ["htm", "dist/htm.module.js"],
  "uplot.mjs": ["uplot", "dist/uPlot.esm.js"],
  "uplot.css": ["uplot", "dist/uPlot.min.css"],
};

/** The bare specifiers the modules import, mapped to served names. */
const importMapNames: Record<string, string> = {
  preact: "preact.mjs",
  "preact/hooks": "preact-hooks.mjs",
  htm: "htm.mjs",
  uplot: "uplot.mjs",
};

const contentTypes: Record<string, string> = {
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".html": "text/html; charset=utf-8",
};

/** The front-end source folder: src/dashboard, whether this module runs from src/ or from its build in dist/src/. */
function dashboardFolder(): string {
  const fromSource = resolve(import.meta.dirname, "..", "dashboard");
  const fromBuild = resolve(import.meta.dirname, "..", "..", "..", "src", "dashboard");
  const folder = existsSync(join(fromSource, "index.html")) ? fromSource : fromBuild;
  if (!existsSync(join(folder, "index.html"))) throw new Error(`dashboard files not found in ${fromBuild}`);
  return folder;
}

/** A package's folder: up from its main entry to its package.json (a package's exports may hide both). */
function packageFolder(require: NodeJS.Require, name: string): string {
  let folder = dirname(require.resolve(name));
  while (!existsSync(join(folder, "package.json")) || JSON.parse(readFileSync(join(folder, "package.json"), "utf8")).name !== name) {
    const parent = dirname(folder);
    if (parent === folder) throw new Error(`package ${name} not found`);
    folder = parent;
  }
  return folder;
}

function contentType(name: string): string {
  const type = contentTypes[name.slice(name.lastIndexOf("."))];
  if (type === undefined) throw new Error(`no content type for ${name}`);
  return type;
}

const commonHeaders: Array<[string, string]> = [
  ["X-Content-Type-Options", "nosniff"],
  ["Referrer-Policy", "no-referrer"],
];

/** Accept-Encoding names gzip without refusing it by q=0. */
function takesGzip(acceptEncoding: string): boolean {
  return acceptEncoding.split(",").some((part) => {
    const [coding, ...parameters] = part.toLowerCase().split(";");
    return coding.trim() === "gzip" && !parameters.some((parameter) => /^\s*q\s*=\s*0(\.0*)?\s*$/.test(parameter));
  });
}

export function loadStaticFiles(): StaticFiles {
  const folder = dashboardFolder();
  const require = createRequire(import.meta.url);
  const sources = new Map<string, Buffer>();
  for (const name of appFiles) sources.set(name, readFileSync(join(folder, name)));
  for (const [name, [library, file]] of Object.entries(libraryFiles)) sources.set(name, readFileSync(join(packageFolder(require, library), file)));

  const hash = createHash("sha256");
  for (const [name, body] of sources) hash.update(name).update(body);
  const version = hash.digest("hex").slice(0, 16);
  const assetPath = (name: string) => `/assets/${version}/${name}`;

  const importMap = JSON.stringify({ imports: Object.fromEntries(Object.entries(importMapNames).map(([specifier, name]) => [specifier, assetPath(name)])) });
  const importMapHash = createHash("sha256").update(importMap).digest("base64");
  // Every module is announced up front, so the browser fetches them in one round instead of one per import level.
  const preloads = [...sources.keys()].filter((name) => name.endsWith("js")).map((name) => `<link rel="modulepreload" href="${assetPath(name)}">`).join("\n");
  const page = readFileSync(join(folder, "index.html"), "utf8")
    .replace("{{importMap}}", importMap)
    .replace("{{modulePreloads}}", preloads)
    .replaceAll("{{assets}}", `/assets/${version}`);
  // Inline styles are not allowed: uPlot and Preact set element.style through the DOM, which the policy does not govern.
  const policy = [
    "default-src 'self'",
    `script-src 'self' 'sha256-${importMapHash}'`,
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
    "object-src 'none'",
  ].join("; ");

  const assets = new Map<string, StaticEntry>();
  const add = (path: string, plain: StaticAsset) => {
    const compressed = gzipSync(plain.body, { level: 9 });
    const pays = compressed.length < plain.body.length * 0.9;
    const gzip = pays ? { headers: [...plain.headers, ["Content-Encoding", "gzip"], ["Vary", "Accept-Encoding"]] as Array<[string, string]>, body: compressed } : undefined;
    assets.set(path, { plain: pays ? { headers: [...plain.headers, ["Vary", "Accept-Encoding"]], body: plain.body } : plain, gzip });
  };
  for (const [name, body] of sources) {
    add(assetPath(name), {
      headers: [["Content-Type", contentType(name)], ["Cache-Control", "public, max-age=31536000, immutable"], ...commonHeaders],
      body,
    });
  }
  add("/", {
    headers: [
      ["Content-Type", contentType("index.html")],
      ["Cache-Control", "no-cache"],
      ["Content-Security-Policy", policy],
      ["X-Frame-Options", "DENY"],
      ...commonHeaders,
    ],
    body: Buffer.from(page, "utf8"),
  });
  return {
    find(path, acceptEncoding) {
      const entry = assets.get(path);
      if (entry === undefined) return undefined;
      return entry.gzip !== undefined && takesGzip(acceptEncoding) ? entry.gzip : entry.plain;
    },
    version,
  };
}
