// What the Node end-to-end tests share: a TCP port on 127.0.0.1 that is free right now,
// for bermd's Streamable HTTP listener.

import { createServer } from "node:net";

export function freePort() {
  return new Promise((ok) => {
    const server = createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => ok(port));
    });
  });
}
