// The program's own keyspace (`berm:program/kv`, grant `kv`): text or JSON by key. Importing
// this module is what puts the kv import in the component (and in `berm inspect`).
import * as host from "berm:program/kv@1.0.0";
import { hostCall } from "./host-error.ts";

export { BermError } from "./host-error.ts";

const utf8 = new TextEncoder();
const text = new TextDecoder();

/** The bytes under `key`, or undefined. */
export function getBytes(key: string): Uint8Array | undefined {
  return hostCall(() => host.get(key)) ?? undefined;
}

/** The text under `key`, or undefined. */
export function get(key: string): string | undefined {
  const bytes = getBytes(key);
  return bytes === undefined ? undefined : text.decode(bytes);
}

/** The JSON value under `key`, or undefined. */
export function getJson<T = unknown>(key: string): T | undefined {
  const value = get(key);
  return value === undefined ? undefined : (JSON.parse(value) as T);
}

/** Stores text, bytes, or (any other value) its JSON under `key`. */
export function set(key: string, value: string | Uint8Array | unknown): void {
  const bytes =
    value instanceof Uint8Array ? value : utf8.encode(typeof value === "string" ? value : JSON.stringify(value));
  hostCall(() => host.put(key, bytes));
}

/** Removes `key`; whether it was there. */
export function remove(key: string): boolean {
  return hostCall(() => host.delete(key));
}

/** The keys that start with `prefix`, sorted. */
export function list(prefix = ""): string[] {
  return hostCall(() => host.list(prefix));
}
