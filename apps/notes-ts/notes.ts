// notes, written again in TypeScript: a model's notebook in the program's own keyspace (`kv`),
// with tools written as the MCP TypeScript SDK writes them. Built by scripts/build-apps.sh
// with sdk/ts/build.mjs into one WebAssembly component.
import { Program, ToolError, z } from "@berm/sdk";
import * as kv from "@berm/sdk/kv";

const program = new Program({
  name: "notes-ts",
  description:
    "Keeps short notes that outlive the conversation: add, list, search and delete them. Each note has a numeric id and a title; the text is searched case-insensitively.",
  usage:
    "Reach for notes to remember something for later (a decision, a command that worked, a file to come back to) and to look it up again. Needs the `kv` grant.",
});

interface Note {
  id: number;
  title: string;
  text: string;
}

const NEXT_ID = "meta/next_id";
const PREFIX = "note/";
// Zero-padded so that keys sort by id.
const key = (id: number) => `${PREFIX}${String(id).padStart(16, "0")}`;
const all = (): Note[] => kv.list(PREFIX).map((k) => kv.getJson<Note>(k)).filter((n): n is Note => n !== undefined);

// Module state lives only as long as one call: every call runs in a fresh instance, so this
// reads 1 on every call (the `calls` tool shows it; the tests check it).
let calls = 0;

program.registerTool(
  "add",
  {
    description: "Add a note and return it with its id.",
    inputSchema: { title: z.string().describe("a short title"), text: z.string().describe("the note itself") },
  },
  async ({ title, text }) => {
    if (title.trim() === "") throw new ToolError("a note needs a non-empty title");
    const id = kv.getJson<number>(NEXT_ID) ?? 1;
    kv.set(key(id), { id, title, text });
    kv.set(NEXT_ID, id + 1);
    return { id, title };
  },
);

program.registerTool(
  "list",
  { description: "List every note (id and title), oldest first.", annotations: { readOnlyHint: true } },
  async () => all().map(({ id, title }) => ({ id, title })),
);

program.registerTool(
  "search",
  {
    description: "Find notes whose title or text contains the query (case-insensitive); returns them whole.",
    inputSchema: { query: z.string().describe("the text to look for") },
    annotations: { readOnlyHint: true },
  },
  async ({ query }) => {
    const needle = query.toLowerCase();
    return all().filter((n) => n.title.toLowerCase().includes(needle) || n.text.toLowerCase().includes(needle));
  },
);

program.registerTool(
  "delete",
  {
    description: "Delete a note by id; says whether it existed.",
    inputSchema: { id: z.number().int().min(1).describe("the note's id") },
    annotations: { destructiveHint: true, idempotentHint: true },
  },
  async ({ id }) => ({ deleted: kv.remove(key(id)) }),
);

program.registerTool(
  "calls",
  {
    description: "How many calls this instance has served (always 1: nothing survives a call).",
    annotations: { readOnlyHint: true },
  },
  async () => {
    calls += 1;
    return { calls };
  },
);
