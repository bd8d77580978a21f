// What a berm host call's `err(error)` becomes in JavaScript: componentize-js throws the WIT
// error record as a `payload`; the wrappers rethrow it as a BermError with its message.

/** A host call that did not succeed: `code` is the WIT `error-code` (`denied`, `not-found`, …). */
export class BermError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "BermError";
  }
}

/** Runs `f`, turning a WIT `error` it throws into a BermError. */
export function hostCall<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    const payload = (e as { payload?: { code?: string; message?: string } })?.payload;
    if (payload && typeof payload.message === "string") throw new BermError(String(payload.code), payload.message);
    throw e;
  }
}
