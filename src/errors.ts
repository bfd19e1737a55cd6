/**
 * The error catalog (SPEC §1): one stable code → HTTP status, used by every
 * handler. Anything not in the catalog is logged and answered 500 without
 * internals (Fastify lib/errors.js, Hono HTTPException). It sits at the root
 * of src/ because http, ingest and query all answer with it, and none of them
 * may import another's module for it.
 */
export const errorStatus = {
  invalid_json: "400 Bad Request",
  invalid_request: "400 Bad Request",
  unauthorized: "401 Unauthorized",
  not_found: "404 Not Found",
  method_not_allowed: "405 Method Not Allowed",
  batch_too_large: "413 Payload Too Large",
  payload_too_large: "413 Payload Too Large",
  rate_limited: "429 Too Many Requests",
  internal_error: "500 Internal Server Error",
  overloaded: "503 Service Unavailable",
  unavailable: "503 Service Unavailable",
} as const;

export type ErrorCode = keyof typeof errorStatus;

export interface ServiceError {
  code: ErrorCode;
  message: string;
}

/** A service's answer: JSON text (the body of a 200), or the error it is. */
export type ServiceReply<Body = string> = { ok: true; body: Body } | { ok: false; error: ServiceError };

export function serviceError(code: ErrorCode, message: string): ServiceError {
  return { code, message };
}

export function errorBody(error: ServiceError): string {
  return JSON.stringify({ ok: false, error: { code: error.code, message: error.message } });
}

/** The end of an exhaustive switch: a new variant does not compile until it is handled (a programmer error if reached). */
export function assertNever(value: never): never {
  throw new Error(`unhandled variant: ${JSON.stringify(value)}`);
}
