// The e2e tests' authorization server (oauth-issuer.mjs) as a process of its own, for the
// tests not written in JavaScript (test_python_oauth.py):
//   node oauth-issuer-serve.mjs PORT RESOURCE
// prints `ready <issuer URL>` once it listens, and serves until stdin closes or it is killed.

import { startIssuer } from "./oauth-issuer.mjs";

const [port, resource] = process.argv.slice(2);
if (!port || !resource) {
  console.error("usage: node oauth-issuer-serve.mjs PORT RESOURCE");
  process.exit(2);
}
const issuer = await startIssuer({ port: Number(port), resources: [resource] });
console.log(`ready ${issuer.url}`);
process.stdin.resume();
process.stdin.on("end", async () => {
  await issuer.close();
  process.exit(0);
});
