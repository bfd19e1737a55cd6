/**
 * The operating errors of the credential registry (STYLE rule 2): a taken name,
 * an unknown workspace or secret, a registry that stays locked or cannot be
 * read. They are values with stable codes, so the CLI prints them as
 * `{"error":"…"}` and the server can tell them from programmer errors.
 */

export type RegistryErrorCode =
  | "invalid_name"
  | "name_taken"
  | "workspace_not_found"
  | "unknown_api_key"
  | "unknown_token"
  | "registry_locked"
  | "registry_invalid";

export class RegistryError extends Error {
  readonly code: RegistryErrorCode;

  constructor(code: RegistryErrorCode, message: string) {
    super(message);
    this.name = "RegistryError";
    this.code = code;
  }
}

export function isRegistryError(error: unknown): error is RegistryError {
  return error instanceof RegistryError;
}
