/**
 * The dashboard's files as the query listener serves them, without a browser:
 * the page and its versioned assets with their headers (a policy that runs
 * only the page's own scripts, caching, nosniff), every library file present,
 * and nothing outside the allow-list reachable, however the path is spelled.
 */
import { request, type IncomingHttpHeaders } from "node:http";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { removeDataDir, startServer, type ServerHandle } from "../helpers/server.js";
import { send } from "../helpers/http.js";

/** A GET whose path goes out byte for byte: a URL string would have its dot segments resolved by the client. */
function rawGet(baseUrl: string, path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer; text: string }> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const outgoing = request({ host: hostname, port, path, method: "GET", headers, agent: false }, (response) => {
      const chunks: Buffer[] = [];
      response.on("data", (chunk: Buffer) => chunks.push(chunk));
      response.on("end", () => {
        const body = Buffer.concat(chunks);
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body, text: body.toString("utf8") });
      });
    });
    outgoing.on("error", reject);
    outgoing.end();
  });
}

describe("dashboard files on the query listener", () => {
  let server: ServerHandle;
  let page: string;
  let assetFolder: string;

  beforeAll(async () => {
    server = await startServer({ workers: 1 });
    page = await (await fetch(`${server.queryUrl}/`)).text();
    assetFolder = /src="(\/assets\/[0-9a-f]{16})\/app\.js"/.exec(page)![1];
  });

  afterAll(async () => {
    await server?.stop();
    if (server) removeDataDir(server.dataDir);
  });

  it("serves the page uncached, with a policy that allows only its own scripts and the import map's hash", async () => {
    const index = await fetch(`${server.queryUrl}/`);
    expect(index.status).toBe(200);
    expect(index.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(index.headers.get("cache-control")).toBe("no-cache");
    expect(index.headers.get("x-content-type-options")).toBe("nosniff");
    const policy = index.headers.get("content-security-policy")!;
    expect(policy).toMatch(/^default-src 'self'; script-src 'self' 'sha256-[A-Za-z0-9+/=]+'; style-src 'self';/);
    expect(policy).not.toMatch(/unsafe-inline|unsafe-eval|\*/);
    // The hash in the policy is the import map's, the page's only inline script.
    const importMap = /<script type="importmap">(.*?)<\/script>/.exec(page)![1];
    const { createHash } = await import("node:crypto");
    expect(policy).toContain(`'sha256-${createHash("sha256").update(importMap).digest("base64")}'`);
    expect(page.match(/<script/g)).toHaveLength(2);
  });

  it("serves every asset the page and its import map name, immutable, with its content type", async () => {
    const importMap = JSON.parse(/<script type="importmap">(.*?)<\/script>/.exec(page)![1]) as { imports: Record<string, string> };
    const named = [...page.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((match) => match[1]);
    const paths = [...new Set([...named, ...Object.values(importMap.imports), `${assetFolder}/trend.js`])];
    expect(paths.length).toBeGreaterThanOrEqual(8);
    for (const path of paths) {
      const asset = await fetch(`${server.queryUrl}${path}`);
      expect(asset.status, path).toBe(200);
      expect(asset.headers.get("content-type"), path).toMatch(path.endsWith(".css") ? /^text\/css; charset=utf-8$/ : /^text\/javascript; charset=utf-8$/);
      expect(asset.headers.get("cache-control"), path).toBe("public, max-age=31536000, immutable");
      expect(asset.headers.get("x-content-type-options"), path).toBe("nosniff");
      expect((await asset.arrayBuffer()).byteLength, path).toBeGreaterThan(100);
    }
  });

  it("sends assets gzipped to a client that takes gzip, and only then", async () => {
    const path = `${assetFolder}/uplot.mjs`;
    const plain = await rawGet(server.queryUrl, path);
    expect(plain.headers["content-encoding"]).toBeUndefined();
    const zipped = await rawGet(server.queryUrl, path, { "accept-encoding": "br, gzip, deflate" });
    expect(zipped.headers["content-encoding"]).toBe("gzip");
    expect(zipped.headers.vary).toBe("Accept-Encoding");
    expect(zipped.body.length).toBeLessThan(plain.body.length / 2);
    expect(gunzipSync(zipped.body).equals(plain.body)).toBe(true);
    const refused = await rawGet(server.queryUrl, path, { "accept-encoding": "gzip;q=0, identity" });
    expect(refused.headers["content-encoding"]).toBeUndefined();
    expect(refused.body.equals(plain.body)).toBe(true);
  });

  it("answers 404 for anything off the list, traversal spellings included, and keeps the API's own answers", async () => {
    const refused = [
      "/index.html",
      "/assets/app.js",
      `${assetFolder}/../../package.json`,
      `${assetFolder}/%2e%2e/%2e%2e/package.json`,
      `${assetFolder}/..%2f..%2fpackage.json`,
      "/src/dashboard/app.js",
      "/node_modules/preact/package.json",
      `/assets/0000000000000000/app.js`,
    ];
    for (const path of refused) {
      const answer = await rawGet(server.queryUrl, path);
      expect(answer.status, path).toBe(404);
      expect(JSON.parse(answer.text).error.code, path).toBe("not_found");
    }
    expect((await send(`${server.queryUrl}/`, { method: "POST" })).status).toBe(404);
    expect((await send(`${server.queryUrl}/api/v1/query/trend`, { method: "GET" })).status).toBe(405);
    // The page holds no data: the API still wants its token.
    expect((await send(`${server.queryUrl}/api/v1/query/trend`, { method: "POST", body: "{}" })).status).toBe(401);
  });
});
