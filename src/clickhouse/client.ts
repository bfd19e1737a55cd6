/**
 * ClickHouse over its HTTP interface, with Node's fetch: one statement per
 * request, the body (rows to insert) streamed as is. 18.16 has no query
 * parameters, so every text that reaches SQL goes through sqlString, which
 * writes each byte outside printable ASCII, the quote and the backslash as an
 * escape: no name or value can end the literal it sits in.
 */
import type { ClickHouseSettings } from "../config/config.js";

export class ClickHouseError extends Error {
  constructor(
    message: string,
    /** undefined: the server was not reached (refused, reset, timed out). */
    readonly status: number | undefined,
  ) {
    super(message);
  }
}

const hexDigits = "0123456789abcdef";

/** A ClickHouse string literal holding exactly `text` (as UTF-8). */
export function sqlString(text: string): string {
  const bytes = Buffer.from(text, "utf8");
  let out = "'";
  for (const byte of bytes) {
    // Printable ASCII but the quote and the backslash is written as itself; everything else as \xHH.
    if (byte >= 0x20 && byte < 0x7f && byte !== 0x27 && byte !== 0x5c) out += String.fromCharCode(byte);
    else out += `\\x${hexDigits[byte >> 4]}${hexDigits[byte & 15]}`;
  }
  return `${out}'`;
}

/** A ClickHouse array literal of strings. */
export function sqlStrings(texts: readonly string[]): string {
  return `[${texts.map(sqlString).join(",")}]`;
}

/** A database or table name: only the characters an identifier needs no quoting for are accepted. */
export function sqlIdentifier(name: string): string {
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) throw new Error(`not a plain ClickHouse identifier: ${JSON.stringify(name)}`);
  return name;
}

/** A SELECT's text at most (ClickHouse's max_query_size): a bucket table of clickhouseBucketSlotsMax entries fits. */
const selectBytesMax = 16 * 1024 * 1024;

export class ClickHouseClient {
  constructor(
    private readonly baseUrl: string,
    private readonly user: string,
    private readonly password: string,
    private readonly timeoutMs: number,
  ) {}

  static of(settings: ClickHouseSettings, timeoutMs: number, baseUrl = settings.url): ClickHouseClient {
    return new ClickHouseClient(baseUrl, settings.user, settings.password, timeoutMs);
  }

  /** Runs a statement; `body` is sent after it (INSERT … FORMAT …). Resolves to the answer's text. */
  async run(sql: string, body?: string | Uint8Array | FormData, settings: Record<string, string | number> = {}): Promise<string> {
    const url = new URL(this.baseUrl);
    // A SELECT travels as the body (sql empty): a trend's bucket table is longer than a URL may be.
    if (sql !== "") url.searchParams.set("query", sql);
    for (const [name, value] of Object.entries(settings)) url.searchParams.set(name, String(value));
    let response: Response;
    try {
      response = await fetch(url, {
        method: "POST",
        headers: { "X-ClickHouse-User": this.user, "X-ClickHouse-Key": this.password },
        body: body ?? "",
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (error) {
      throw new ClickHouseError(`ClickHouse at ${url.origin} unreachable: ${(error as Error).message}`, undefined);
    }
    const text = await response.text().catch((error: unknown) => {
      throw new ClickHouseError(`ClickHouse at ${url.origin}: answer cut off: ${(error as Error).message}`, undefined);
    });
    if (!response.ok) throw new ClickHouseError(`ClickHouse at ${url.origin} answered ${response.status}: ${text.trim().slice(0, 500)}`, response.status);
    return text;
  }

  /** Runs a SELECT and parses its JSONCompact answer into rows of values. */
  async rows(sql: string): Promise<unknown[][]> {
    const text = await this.run("", `${sql} FORMAT JSONCompact`, { output_format_json_quote_64bit_integers: 0, max_query_size: selectBytesMax });
    return (JSON.parse(text) as { data: unknown[][] }).data;
  }

  /**
   * rows() of a SELECT that reads `table`, a temporary table of one String
   * column holding `values`, sent as ClickHouse's external data: a long list
   * as literals would count each against max_ast_elements (50 000).
   */
  async rowsWith(sql: string, table: { name: string; column: string; values: Iterable<string> }): Promise<unknown[][]> {
    const lines: string[] = [];
    for (const value of table.values) lines.push(value.replace(/\\/g, "\\\\").replace(/\t/g, "\\t").replace(/\n/g, "\\n"));
    const form = new FormData();
    form.append(sqlIdentifier(table.name), new Blob([lines.length === 0 ? "" : `${lines.join("\n")}\n`]), table.name);
    const text = await this.run(`${sql} FORMAT JSONCompact`, form, { output_format_json_quote_64bit_integers: 0, [`${table.name}_structure`]: `${sqlIdentifier(table.column)} String` });
    return (JSON.parse(text) as { data: unknown[][] }).data;
  }
}
