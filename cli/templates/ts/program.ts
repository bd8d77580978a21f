// {{name}}: a berm program in TypeScript. Tools are written as the MCP TypeScript SDK writes
// them; `npm run build` makes {{name}}.wasm, a WebAssembly component with berm's manifest.
import { Program, z } from "@berm/sdk";
// Host calls, each needing its grant at deploy: "@berm/sdk/kv" (kv), "@berm/sdk/http"
// (net=HOST), "@berm/sdk/log" (log). Only the modules imported here reach the component.

const program = new Program({
  name: "{{name}}",
  description: "What this program is, for people and models.",
  usage: "When a model should reach for it.",
});

program.registerTool(
  "hello",
  {
    description: "Greet someone by name.",
    inputSchema: { name: z.string().describe("who to greet") },
    annotations: { readOnlyHint: true, idempotentHint: true },
  },
  async ({ name }) => `hello, ${name}`,
);
