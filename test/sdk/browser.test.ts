/**
 * The browser snippet as a page loads it: GET /sdk.js from the real ingest
 * listener, imported by a page of another origin in headless Chromium, sending
 * to the real server (or through a fault proxy in front of it). Whether an
 * event arrived, with which properties, and only once, is read from trend and
 * funnel queries; each test's events carry a token of their own in `$url`.
 *
 * The browser part needs Chromium at /usr/bin/chromium and skips loudly
 * without it; the /sdk.js answer itself is checked everywhere.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server as HttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { chromium, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { aroundToday, elapsedUntil, send, sendJson, trendData, uniqueName } from "../helpers/http.js";
import { startFaultProxy } from "../helpers/proxy.js";
import { removeDataDir, repoRoot, startServer, type ServerHandle } from "../helpers/server.js";

const chromiumPath = "/usr/bin/chromium";
const hasChromium = existsSync(chromiumPath);
if (!hasChromium) console.warn(`\n!!! SKIPPING the browser snippet suite: no Chromium at ${chromiumPath} (apt-get install chromium) !!!\n`);

const packageVersion = JSON.parse(readFileSync(join(repoRoot, "package.json"), "utf8")).version;

let server: ServerHandle;
beforeAll(async () => {
  server = await startServer({ workers: 2 });
});
afterAll(async () => {
  await server?.stop();
  if (server) removeDataDir(server.dataDir);
});

describe("GET /sdk.js on the ingest listener", () => {
  it("serves the snippet as cacheable JavaScript that any origin may load, gzipped when asked", async () => {
    const plain = await send(`${server.ingestUrl}/sdk.js`, { method: "GET" });
    expect(plain.status).toBe(200);
    expect(plain.headers["content-type"]).toBe("text/javascript; charset=utf-8");
    expect(plain.headers["cache-control"]).toMatch(/^public, max-age=\d+$/);
    expect(plain.headers["access-control-allow-origin"]).toBe("*");
    expect(plain.text).toContain("export const eventide");
    expect(plain.text).not.toContain("sourceMappingURL");
    const gzipped = await new Promise<Buffer>((resolve, reject) => {
      import("node:http").then(({ get }) =>
        get(`${server.ingestUrl}/sdk.js`, { headers: { "accept-encoding": "gzip, br" } }, (response) => {
          expect(response.headers["content-encoding"]).toBe("gzip");
          const chunks: Buffer[] = [];
          response.on("data", (chunk: Buffer) => chunks.push(chunk));
          response.on("end", () => resolve(Buffer.concat(chunks)));
        }).on("error", reject),
      );
    });
    expect(gunzipSync(gzipped).toString("utf8")).toBe(plain.text);
    const posted = await send(`${server.ingestUrl}/sdk.js`, { method: "POST", body: "" });
    expect(posted.status).toBe(405);
  });
});

/** A page server on another origin than the ingest listener, as a site embedding the snippet is. */
async function startPageServer(): Promise<{ url: string; pages: Map<string, string>; close(): Promise<void> }> {
  const pages = new Map<string, string>();
  const httpServer: HttpServer = createServer((request, response) => {
    const html = pages.get(new URL(request.url ?? "/", "http://page").pathname);
    response.writeHead(html === undefined ? 404 : 200, { "content-type": "text/html; charset=utf-8" });
    response.end(html ?? "not found");
  });
  await new Promise<void>((resolve) => httpServer.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(httpServer.address() as AddressInfo).port}`,
    pages,
    close: () =>
      new Promise((resolve) => {
        httpServer.closeAllConnections();
        httpServer.close(() => resolve());
      }),
  };
}

/** A page that imports the snippet from `sdkHost`, inits it with `options` and runs `script` (with `eventide` in scope). */
function snippetPage(sdkHost: string, options: Record<string, unknown>, script = ""): string {
  return `<!doctype html><html><head><title>snippet test</title></head><body><a href="/other.html">next</a>
<script type="module">
import { eventide } from ${JSON.stringify(`${sdkHost}/sdk.js`)};
eventide.init(${JSON.stringify({ apiKey: server.apiKey, host: sdkHost, ...options })});
window.eventide = eventide;
${script}
</script></body></html>`;
}

async function countWith(name: string, filters: unknown[]): Promise<number> {
  const [dateFrom, dateTo] = aroundToday();
  const data = await trendData(server, server.token, { event: name, dateFrom, dateTo, filters });
  return data.reduce((sum, bucket) => sum + bucket.count, 0);
}

/** Waits until the page's snippet has nothing left to send. */
async function drained(page: Page): Promise<{ queued: number; accepted: number; refused: number; dropped: number; retries: number }> {
  await page.waitForFunction(() => (globalThis as any).eventide?.stats().queued === 0, undefined, { timeout: 30_000, polling: 50 });
  return page.evaluate(() => (globalThis as any).eventide.stats());
}

describe.skipIf(!hasChromium)("the browser snippet in headless Chromium", () => {
  let context: BrowserContext;
  let userDataDir: string;
  let site: Awaited<ReturnType<typeof startPageServer>>;

  beforeAll(async () => {
    site = await startPageServer();
    site.pages.set("/other.html", "<!doctype html><title>elsewhere</title><p>elsewhere</p>");
    userDataDir = mkdtempSync(join(tmpdir(), "eventide-chromium-"));
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: chromiumPath,
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    });
  }, 120_000);
  afterAll(async () => {
    await context?.close();
    await site?.close();
    if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
  });

  it("sends a page view and custom events with the documented properties; events before identify keep the anonymous id", async () => {
    const token = uniqueName("props");
    const name = uniqueName("clicked");
    const identified = uniqueName("identified");
    site.pages.set(
      "/props.html",
      snippetPage(server.ingestUrl, { flushIntervalMs: 50 }, `eventide.capture(${JSON.stringify(name)}, { button: "buy" }); eventide.identify("user-42"); eventide.capture(${JSON.stringify(identified)});`),
    );
    const page = await context.newPage();
    try {
      await page.goto(`${site.url}/props.html?run=${token}`);
      const stats = await drained(page);
      expect(stats).toMatchObject({ accepted: 3, refused: 0, dropped: 0 });
      const run = { property: "$url", op: "contains", value: token };
      expect(await countWith("$pageview", [run])).toBe(1);
      const expected: Array<[string, string, string?]> = [
        ["$path", "eq", "/props.html"],
        ["$url", "eq", `${site.url}/props.html?run=${token}`],
        ["$referrer", "eq", "$direct"],
        ["$lib", "eq", "eventide-js"],
        ["$lib_version", "eq", packageVersion],
        ["$screen_width", "gt", "0"],
        ["$screen_height", "gt", "0"],
        ["button", "eq", "buy"],
      ];
      for (const [property, op, value] of expected) expect(await countWith(name, [run, { property, op, value }]), `${property} ${op} ${value}`).toBe(1);
      // A funnel joins events by distinctId: the click (anonymous) and the later event (user-42) are two people.
      const [dateFrom, dateTo] = aroundToday();
      const funnel = await sendJson(`${server.queryUrl}/api/v1/query/funnel`, { steps: [name, identified], dateFrom, dateTo }, { token: server.token });
      expect(funnel.body.steps.map((step: { count: number }) => step.count)).toEqual([1, 0]);
      expect(await page.evaluate(() => (globalThis as any).eventide.distinctId())).toBe("user-42");
    } finally {
      await page.close();
    }
  });

  for (const transport of ["fetch keepalive", "sendBeacon"] as const) {
    it(`delivers an event captured just before the page navigates away (${transport}), once, even when the next page sends it again`, async () => {
      const token = uniqueName("leave");
      const name = uniqueName("leaving");
      // No timer can send it: only the unload path can.
      const options = { flushIntervalMs: 600_000, capturePageview: false };
      site.pages.set(`/leave-${token}.html`, snippetPage(server.ingestUrl, options, `eventide.capture(${JSON.stringify(name)}); location.href = "/other.html";`));
      site.pages.set(`/back-${token}.html`, snippetPage(server.ingestUrl, options));
      const page = await context.newPage();
      try {
        // Browsers without keepalive fall back to sendBeacon.
        if (transport === "sendBeacon") await page.addInitScript(() => delete (Request.prototype as any).keepalive);
        await page.goto(`${site.url}/leave-${token}.html`);
        await page.waitForURL(`${site.url}/other.html`);
        await elapsedUntil(async () => (await countWith(name, [])) === 1, 30_000, 100);
        // The next page of the site finds the event in localStorage (its answer was never read) and sends it again: acknowledged, not stored again.
        await page.goto(`${site.url}/back-${token}.html`);
        const stats = await drained(page);
        expect(stats.accepted).toBeGreaterThanOrEqual(1);
        expect(await countWith(name, [])).toBe(1);
      } finally {
        await page.close();
      }
    });
  }

  it("retries a 503 with a lost answer and a 503 refusal: each event is stored once", async () => {
    const proxy = await startFaultProxy(server.ingestUrl, (index) => (index === 0 ? "lose-answer" : index === 1 ? "refuse" : "forward"));
    const name = uniqueName("retried");
    site.pages.set("/retry.html", snippetPage(proxy.url, { flushAt: 3, capturePageview: false }, `for (let i = 0; i < 3; i++) eventide.capture(${JSON.stringify(name)}, { i });`));
    const page = await context.newPage();
    try {
      await page.goto(`${site.url}/retry.html`);
      const stats = await drained(page);
      expect(stats).toMatchObject({ accepted: 3, refused: 0, retries: 2 });
      expect(proxy.batchRequests()).toBe(3);
      for (const i of ["0", "1", "2"]) expect(await countWith(name, [{ property: "i", op: "eq", value: i }])).toBe(1);
    } finally {
      await page.close();
      await proxy.close();
    }
  });

  it("keeps events while offline and delivers each once when the network returns", async () => {
    const name = uniqueName("offline");
    site.pages.set("/offline.html", snippetPage(server.ingestUrl, { flushAt: 1, capturePageview: false, retryDelayMaxMs: 200 }));
    const page = await context.newPage();
    let offline = true;
    let refusedRequests = 0;
    await page.route(`${server.ingestUrl}/ingest/batch`, (route) => {
      if (!offline) return route.continue();
      refusedRequests++;
      return route.abort("internetdisconnected");
    });
    try {
      await page.goto(`${site.url}/offline.html`);
      await page.evaluate((eventName) => {
        for (let i = 0; i < 5; i++) (globalThis as any).eventide.capture(eventName, { i });
      }, name);
      await page.waitForFunction(() => (globalThis as any).eventide.stats().retries >= 3, undefined, { timeout: 30_000, polling: 50 });
      expect(await page.evaluate(() => (globalThis as any).eventide.stats().queued)).toBe(5);
      offline = false;
      const stats = await drained(page);
      expect(stats).toMatchObject({ accepted: 5, refused: 0, dropped: 0 });
      expect(refusedRequests).toBeGreaterThanOrEqual(3);
      for (const i of ["0", "1", "2", "3", "4"]) expect(await countWith(name, [{ property: "i", op: "eq", value: i }])).toBe(1);
    } finally {
      await page.close();
    }
  });

  it("counts events past a full queue as dropped rather than losing them silently", async () => {
    const name = uniqueName("full");
    site.pages.set("/full.html", snippetPage(server.ingestUrl, { queueEventsMax: 10, flushAt: 1000, flushIntervalMs: 600_000, capturePageview: false }));
    const page = await context.newPage();
    try {
      await page.goto(`${site.url}/full.html`);
      const stats = await page.evaluate((eventName) => {
        for (let i = 0; i < 15; i++) (globalThis as any).eventide.capture(eventName, { i });
        return (globalThis as any).eventide.stats();
      }, name);
      expect(stats).toMatchObject({ queued: 10, dropped: 5 });
      await page.evaluate(() => (globalThis as any).eventide.flush());
      expect((await drained(page)).accepted).toBe(10);
      expect(await countWith(name, [])).toBe(10);
    } finally {
      await page.close();
    }
  });
});
