/**
 * GET /sdk.js on the ingest listener: the browser snippet (src/sdk/browser.ts,
 * as compiled next to this module), read once at start and kept with its
 * gzip form, so a page load costs the server one write.
 */
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";
import type { HttpResponse } from "uWebSockets.js";
import { limits } from "../config/limits.js";

export interface SdkAsset {
  /** Writes the whole answer; call inside res.cork. */
  write(res: HttpResponse, acceptEncoding: string, closeConnection: boolean): void;
}

export function loadSdkAsset(): SdkAsset {
  // The source map comment would send browsers to a path the listener does not serve.
  const text = readFileSync(new URL("../sdk/browser.js", import.meta.url), "utf8").replace(/\n\/\/# sourceMappingURL=.*\s*$/, "\n");
  const plain = Buffer.from(text, "utf8");
  const gzip = gzipSync(plain, { level: 9 });
  const headers: Array<[string, string]> = [
    ["Content-Type", "text/javascript; charset=utf-8"],
    ["Cache-Control", `public, max-age=${limits.sdkCacheSeconds}`],
    ["Access-Control-Allow-Origin", "*"],
    ["Vary", "Accept-Encoding"],
  ];
  return {
    write(res, acceptEncoding, closeConnection) {
      const gzipped = /\bgzip\b/i.test(acceptEncoding);
      res.writeStatus("200 OK");
      for (const [name, value] of headers) res.writeHeader(name, value);
      if (gzipped) res.writeHeader("Content-Encoding", "gzip");
      res.end(gzipped ? gzip : plain, closeConnection);
    },
  };
}
