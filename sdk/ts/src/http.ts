// HTTP through bermd's egress (`berm:program/http`, grant `net=HOST`): only granted hosts,
// never private addresses. `secret(NAME)` puts `{{secret:NAME}}` in a header or the body;
// bermd fills it in only toward the host the secret is bound to (`berm secret`).
import { fetch as hostFetch } from "berm:program/http@1.0.0";
import { hostCall } from "./host-error.ts";

export { BermError } from "./host-error.ts";

/** A request's options, as `fetch` takes them. */
export interface RequestInit {
  method?: string;
  headers?: Record<string, string>;
  body?: string | Uint8Array;
}

/** The whole answer. */
export interface Response {
  status: number;
  ok: boolean;
  headers: [string, string][];
  body: Uint8Array;
  header(name: string): string | undefined;
  text(): string;
  json<T = unknown>(): T;
}

/** The placeholder bermd replaces with secret `name` toward its bound host only. */
export function secret(name: string): string {
  return `{{secret:${name}}}`;
}

/** Sends a request and waits for the whole answer; a refused host throws a BermError (`denied`). */
export function fetch(url: string, init: RequestInit = {}): Response {
  const body = typeof init.body === "string" ? new TextEncoder().encode(init.body) : (init.body ?? new Uint8Array());
  const r = hostCall(() =>
    hostFetch({ method: init.method ?? "GET", url, headers: Object.entries(init.headers ?? {}), body }),
  );
  return {
    status: r.status,
    ok: r.status >= 200 && r.status < 300,
    headers: r.headers,
    body: r.body,
    header: (name) => r.headers.find(([k]) => k.toLowerCase() === name.toLowerCase())?.[1],
    text: () => new TextDecoder().decode(r.body),
    json: <T,>() => JSON.parse(new TextDecoder().decode(r.body)) as T,
  };
}
