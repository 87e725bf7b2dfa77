/**
 * The Vercel AI SDK pieces the adapter's tests drive: both majors (`ai` 7, and 6 installed as
 * the `ai6` alias), a scripted `MockLanguageModelV3` (no LLM), a deploy tool that records what
 * it ran, and the tool results the model was prompted with.
 */
import type * as Ai from "ai";
import type * as AiTest from "ai/test";

export interface Sdk {
  label: string;
  generateText: typeof Ai.generateText;
  tool: typeof Ai.tool;
  jsonSchema: typeof Ai.jsonSchema;
  MockLanguageModelV3: typeof AiTest.MockLanguageModelV3;
}

export const SDKS: Sdk[] = [
  { label: "ai7", ...(await import("ai")), ...(await import("ai/test")) },
  {
    label: "ai6",
    ...((await import("ai6")) as unknown as typeof Ai),
    ...((await import("ai6/test")) as unknown as typeof AiTest),
  },
];

export function sdkNamed(label: string): Sdk {
  const sdk = SDKS.find((s) => s.label === label);
  if (sdk === undefined) throw new Error(`no SDK ${label}`);
  return sdk;
}

const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** A model turn: tool calls (of `tool`, "deploy" unless named), or a text answer. */
export type Turn = { calls: [string, object][]; tool?: string } | { text: string };

/** A model that plays `turns` in order, one per call, and records what it was prompted. */
export function scripted(sdk: Sdk, turns: Turn[]) {
  const queue = [...turns];
  return new sdk.MockLanguageModelV3({
    doGenerate: async () => {
      const turn = queue.shift();
      if (turn === undefined) throw new Error("the script has no more turns");
      if ("text" in turn) {
        return {
          content: [{ type: "text" as const, text: turn.text }],
          finishReason: { unified: "stop" as const, raw: undefined },
          usage: USAGE,
          warnings: [],
        };
      }
      return {
        content: turn.calls.map(([toolCallId, input]) => ({
          type: "tool-call" as const,
          toolCallId,
          toolName: turn.tool ?? "deploy",
          input: JSON.stringify(input),
        })),
        finishReason: { unified: "tool-calls" as const, raw: undefined },
        usage: USAGE,
        warnings: [],
      };
    },
  });
}

export interface DeployOptions {
  /** The tool's name ("deploy"). */
  name?: string;
  needsApproval?: boolean;
  /** Throw this instead of deploying. */
  fail?: string;
}

/** `{[name]: a deploy tool}` that pushes each input it runs to `ran`. */
export function deployTools(sdk: Sdk, ran: object[], options: DeployOptions = {}) {
  const { name = "deploy", needsApproval = true, fail } = options;
  const deploy = sdk.tool({
    description: "Deploy a service",
    inputSchema: sdk.jsonSchema<{ service: string; version: string; replicas: number }>({
      type: "object",
      properties: {
        service: { type: "string" },
        version: { type: "string" },
        replicas: { type: "number" },
      },
      required: ["service", "version", "replicas"],
    }),
    ...(needsApproval && { needsApproval }),
    execute: async (input) => {
      ran.push(input);
      if (fail !== undefined) throw new Error(fail);
      return `deployed ${input.service} ${input.version}`;
    },
  });
  return { [name]: deploy } as Record<string, typeof deploy>;
}

/** The tool results the model read in its latest prompt. */
export function toolResults(model: { doGenerateCalls: { prompt: unknown[] }[] }): Record<string, any>[] {
  const prompt = model.doGenerateCalls.at(-1)?.prompt ?? [];
  return (prompt as { role: string; content: Record<string, any>[] }[])
    .filter((m) => m.role === "tool")
    .flatMap((m) => m.content)
    .filter((p) => p["type"] === "tool-result");
}
