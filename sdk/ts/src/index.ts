// berm programs in TypeScript/JavaScript, written the way the MCP TypeScript SDK writes tools:
// a name, a zod (or JSON Schema) input, an async handler. `berm-build` (../build.mjs) bundles
// the program, reads the tools registered here to write berm's manifest, and builds one
// WebAssembly component exporting `berm:program/tools@1.0.0` (docs/components.md).
import * as z from "zod";

export { z };

/** A tool's MCP annotations (the hints a client shows; berm serves them as given). */
export interface ToolAnnotations {
  title?: string;
  readOnlyHint?: boolean;
  destructiveHint?: boolean;
  idempotentHint?: boolean;
  openWorldHint?: boolean;
}

/** A JSON Schema written by hand (an object whose `type` is "object"). */
export type JsonSchema = { type: "object"; [key: string]: unknown };

/** What a tool takes or gives: a zod shape (as the MCP SDK takes), a zod object, or a JSON Schema. */
export type Schema = z.ZodRawShape | z.ZodType | JsonSchema;

/** How a tool is described: the MCP SDK's `registerTool` config. */
export interface ToolConfig<I extends Schema = Schema> {
  title?: string;
  description?: string;
  inputSchema?: I;
  outputSchema?: Schema;
  annotations?: ToolAnnotations;
}

/** A content block as MCP writes it; berm returns the text blocks' text. */
export interface TextContent {
  type: "text";
  text: string;
}

/** What a handler may return: a CallToolResult as in the MCP SDK, a string, or any JSON value. */
export type ToolResult =
  | string
  | { content: TextContent[]; structuredContent?: unknown; isError?: boolean }
  | unknown;

type Args<I> = I extends z.ZodRawShape
  ? z.infer<z.ZodObject<I>>
  : I extends z.ZodType
    ? z.infer<I>
    : Record<string, unknown>;

/** A tool's handler: called with the parsed arguments. */
export type Handler<I> = (args: Args<I>) => ToolResult | Promise<ToolResult>;

/** A failure the model should see (MCP's `isError` result) rather than a host error. */
export class ToolError extends Error {}

interface Registered {
  name: string;
  config: ToolConfig;
  input: z.ZodType | undefined;
  handler: (args: unknown) => unknown;
}

/** The program's description, for people and models (the manifest's `description` and `usage`). */
export interface ProgramInfo {
  name: string;
  description?: string;
  usage?: string;
  /** Programs this one calls by name (needs `call=` grants). */
  calls?: string[];
}

const TOOL_NAME = /^[a-z0-9][a-z0-9_-]{0,63}$/;

function isZod(value: unknown): value is z.ZodType {
  return typeof value === "object" && value !== null && "_zod" in value;
}

function isJsonSchema(value: unknown): value is JsonSchema {
  return typeof value === "object" && value !== null && !isZod(value) && (value as JsonSchema).type === "object";
}

function asZod(schema: Schema | undefined): z.ZodType | undefined {
  if (schema === undefined || isJsonSchema(schema)) return undefined;
  return isZod(schema) ? schema : z.object(schema as z.ZodRawShape);
}

function jsonSchema(schema: Schema | undefined): Record<string, unknown> {
  if (schema === undefined) return { type: "object", properties: {}, additionalProperties: false };
  if (isJsonSchema(schema)) return schema;
  const out = z.toJSONSchema(asZod(schema) as z.ZodType, { io: "input" }) as Record<string, unknown>;
  delete out.$schema;
  return out;
}

/**
 * One berm program: register its tools, as with the MCP SDK's `McpServer`. The build finds
 * the program a module creates; there is no transport to connect, berm serves it.
 */
export class Program {
  readonly info: ProgramInfo;
  readonly #tools = new Map<string, Registered>();

  constructor(info: ProgramInfo) {
    this.info = info;
    const slot = globalThis as { [PROGRAM]?: Program };
    if (slot[PROGRAM] !== undefined) throw new Error("a berm program creates one Program");
    slot[PROGRAM] = this;
  }

  /** Registers a tool, as `McpServer.registerTool` does. */
  registerTool<I extends Schema>(name: string, config: ToolConfig<I>, handler: Handler<I>): this {
    if (!TOOL_NAME.test(name)) {
      throw new Error(`tool name \`${name}\` is not valid: use 1-64 of a-z, 0-9, \`_\`, \`-\`, starting with a letter or digit`);
    }
    if (this.#tools.has(name)) throw new Error(`tool \`${name}\` is registered twice`);
    this.#tools.set(name, { name, config, input: asZod(config.inputSchema), handler: handler as (args: unknown) => unknown });
    return this;
  }

  /** The manifest JSON (ABI 1's `berm.manifest` section) for the tools registered so far. */
  manifest(): object {
    const tools = [...this.#tools.values()].map(({ name, config }) => {
      const annotations = { ...(config.annotations ?? {}), ...(config.title ? { title: config.title } : {}) };
      return {
        name,
        description: config.description ?? "",
        input_schema: jsonSchema(config.inputSchema),
        ...(config.outputSchema ? { output_schema: jsonSchema(config.outputSchema) } : {}),
        ...(Object.keys(annotations).length ? { annotations } : {}),
      };
    });
    return {
      abi: 1,
      description: this.info.description ?? "",
      usage: this.info.usage ?? "",
      calls: this.info.calls ?? [],
      tools,
    };
  }

  /** Runs one tool: what the component's `tools.call` export does. */
  async call(tool: string, argumentsJson: string): Promise<string> {
    const registered = this.#tools.get(tool);
    if (registered === undefined) throw new ToolError(`no tool \`${tool}\` in ${this.info.name}`);
    let args: unknown = JSON.parse(argumentsJson);
    if (registered.input !== undefined) {
      const parsed = registered.input.safeParse(args);
      if (!parsed.success) throw new ToolError(`invalid arguments: ${z.prettifyError(parsed.error)}`);
      args = parsed.data;
    }
    return resultText(await registered.handler(args), registered.config.outputSchema !== undefined);
  }
}

function resultText(result: unknown, structured: boolean): string {
  if (typeof result === "string") return result;
  if (typeof result === "object" && result !== null && Array.isArray((result as { content?: unknown }).content)) {
    const r = result as { content: TextContent[]; structuredContent?: unknown; isError?: boolean };
    const text = r.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
    if (r.isError) throw new ToolError(text);
    if (structured && r.structuredContent !== undefined) return JSON.stringify(r.structuredContent);
    return text;
  }
  return JSON.stringify(result ?? null);
}

/** Where the one Program of a bundle is found (by the build and by the export). */
export const PROGRAM = Symbol.for("berm.program");

/** The program the bundle created. */
export function theProgram(): Program {
  const program = (globalThis as { [PROGRAM]?: Program })[PROGRAM];
  if (program === undefined) throw new Error("the program's module created no `new Program(...)`");
  return program;
}
