// Lines in bermd's log (`berm:program/log`, grant `log`). `console.log` also reaches the log,
// through WASI stdout, with no grant.
import { write } from "berm:program/log@1.0.0";

export const error = (message: string): void => write("error", message);
export const warn = (message: string): void => write("warn", message);
export const info = (message: string): void => write("info", message);
export const debug = (message: string): void => write("debug", message);
