// The component's one export, `berm:program/tools@1.0.0`: the build's entry re-exports it
// after importing the program's module. A ToolError (or any error) becomes the WIT
// `tool-error` the model sees; componentize-js lowers a thrown `{payload}` as `err`.
import { theProgram } from "./index.ts";

export const tools = {
  async call(tool: string, argumentsJson: string): Promise<string> {
    try {
      return await theProgram().call(tool, argumentsJson);
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e);
      throw { payload: { message } };
    }
  },
};
