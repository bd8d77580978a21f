// web-ts: a test program in TypeScript for `@berm/sdk/http` (tests/e2e/test_components.py).
// It fetches a URL through bermd's egress, with the bound token toward its host when asked:
// only the hosts its `net=` grants are reached, and the token goes only to its bound host.
// Built by scripts/build-components.sh into target/components/web-ts.wasm.
import { Program, ToolError, z } from "@berm/sdk";
import { BermError, fetch, secret } from "@berm/sdk/http";

const program = new Program({
  name: "web-ts",
  description: "Fetches web pages from the granted hosts (a test program for @berm/sdk/http).",
  usage: "Needs `net=HOST` for each host, and `secret:TOKEN=HOST` to send the token.",
});

program.registerTool(
  "get",
  {
    description: "GET a URL and return its status and body.",
    inputSchema: {
      url: z.string().describe("the page"),
      authorized: z.boolean().default(false).describe("send the bound TOKEN as a bearer token"),
    },
    outputSchema: { status: z.number().int(), body: z.string() },
  },
  async ({ url, authorized }) => {
    const headers: Record<string, string> = authorized ? { authorization: `Bearer ${secret("TOKEN")}` } : {};
    try {
      const page = fetch(url, { headers });
      return { status: page.status, body: page.text() };
    } catch (e) {
      // A refused host call carries its code (`denied`, …): the model reads both.
      if (e instanceof BermError) throw new ToolError(`${url}: ${e.message} (${e.code})`);
      throw e;
    }
  },
);
