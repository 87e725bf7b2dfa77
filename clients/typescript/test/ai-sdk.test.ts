/**
 * The Vercel AI SDK adapter end to end: the SDK's own `generateText` and `MockLanguageModelV3`
 * (no LLM), a tool with `needsApproval` wrapped by `guard`, the real bot and the Slack stand-in.
 * Every scenario runs on `ai` 7 (the current major) and on `ai` 6 (installed as the `ai6`
 * alias).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";

import type { ModelMessage } from "ai";

import {
  AiSdkApprovals,
  NOT_EXECUTED,
  PausedRun,
  pendingToolApprovals,
} from "../src/ai-sdk.js";
import {
  type Approval,
  argumentsSha256,
  BindingMismatch,
  CallbackVerifier,
  CountersignClient,
  DuplicateDelivery,
  SignatureError,
} from "../src/index.js";
import { Bot, EDITABLE_TOOL, LAPSING_TOOL } from "./support/bot.js";
import { deployTools, scripted, type Sdk, SDKS, toolResults } from "./support/sdk.js";

const REQUESTER = { slack_user_id: "U0REQ", email: "rita@example.com", name: "Rita" };
const ARGS = { service: "api", version: "1.2.3", replicas: 1e16 };
const OTHER = { service: "web", version: "2.0", replicas: 1 };
const REASON = "too risky on a Friday";

let bot: Bot;
before(async () => {
  bot = await Bot.start();
});
after(async () => {
  await bot?.stop();
});

/** The requester's click is refused (four eyes), then the approver decides. */
async function decide(callId: string, action: "approve" | "deny" = "approve") {
  const approvalId = await bot.card(callId);
  const refused = (await bot.ephemerals("requester")).length;
  await bot.click("requester", approvalId, action, REASON);
  const texts = await bot.waitEphemeral("requester", refused + 1);
  assert.match(texts.at(-1)!, /you requested this call/);
  assert.equal(await bot.click("approver", approvalId, action, REASON), 200);
  return approvalId;
}

/** The first turn: the model calls deploy, the SDK stops on the approval request. */
async function pause(
  sdk: Sdk,
  model: ReturnType<typeof scripted>,
  tools: ReturnType<typeof deployTools>,
  options: object = {},
) {
  const messages: ModelMessage[] = [{ role: "user", content: "Deploy api 1.2.3" }];
  const first = await sdk.generateText({ model, tools, messages, ...options });
  assert.ok(first.content.some((part) => part.type === "tool-approval-request"));
  messages.push(...first.response.messages);
  return messages;
}

const CHILD = fileURLToPath(new URL("./support/resume-child.js", import.meta.url));

interface ChildRun {
  ran: object[];
  results: Record<string, any>[];
  text?: string;
}

/** Resume a saved pause in a node process of its own (test/support/resume-child.ts). */
async function resumeInChild(job: object): Promise<ChildRun> {
  const child = spawn(process.execPath, [CHILD], { stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const closed = new Promise<number | null>((resolve) => child.once("close", resolve));
  child.stdin.end(JSON.stringify(job));
  assert.equal(await closed, 0, stderr);
  return JSON.parse(stdout) as ChildRun;
}

for (const sdk of SDKS) {
  describe(`Vercel AI SDK (${sdk.label})`, () => {
    const cs = () => new CountersignClient(bot.baseUrl, bot.agentToken);
    const session = `ai-sdk-${sdk.label}`;

    test("an eligible approver's click runs the original arguments, once", async () => {
      const callId = `call_${sdk.label}_approve`;
      const ran: object[] = [];
      const model = scripted(sdk, [{ calls: [[callId, ARGS]] }, { text: "Deployed." }]);
      const client = cs();
      const adapter = new AiSdkApprovals(client, { requester: REQUESTER });
      const tools = adapter.guard(deployTools(sdk, ran));
      const paused = await adapter.submit(await pause(sdk, model, tools), {
        sessionId: session,
        summary: "Deploy api 1.2.3",
      });
      const [approvalId, pending] = [...paused.pending][0]!;
      assert.equal(pending.callId, callId);
      assert.deepEqual(pending.arguments, ARGS);
      assert.deepEqual(ran, []);
      const waiting = client.wait(approvalId, 20);
      await decide(callId);
      const decision = await waiting;
      assert.equal(decision.status, "approved");
      const done = await adapter.resume(paused, decision, (messages) =>
        sdk.generateText({ model, tools, messages }),
      );
      assert.equal(done?.text, "Deployed.");
      assert.deepEqual(ran, [ARGS]);
      const [result] = toolResults(model);
      assert.equal(result?.["toolCallId"], callId);
      assert.equal(result?.["output"]?.value, "deployed api 1.2.3");
      // claimed right before it ran, and its outcome reported for the reviewer's card
      const after = await client.get(approvalId);
      assert.match(after.execution?.claim_id ?? "", /^exc_/);
      assert.deepEqual(
        { status: after.execution?.outcome?.status, detail: after.execution?.outcome?.detail },
        // the result itself stays with the agent: the card and the audit get no text of it
        { status: "ok", detail: "" },
      );
      // the decision is consumed: binding it again is refused, nothing runs twice
      assert.throws(() => adapter.bind(paused, decision), BindingMismatch);
      assert.equal(ran.length, 1);
    });

    test("approved only with an edit: refused with the exact arguments; the call again runs once as edited", async () => {
      const [callId, againId] = [`call_${sdk.label}_edit`, `call_${sdk.label}_edit2`];
      const edited = { ...ARGS, version: "1.2.4" };
      const ran: object[] = [];
      const model = scripted(sdk, [
        { calls: [[callId, ARGS]], tool: EDITABLE_TOOL },
        { calls: [[againId, edited]], tool: EDITABLE_TOOL },
        { text: "Deployed 1.2.4, as the reviewer changed it." },
      ]);
      const client = cs();
      const adapter = new AiSdkApprovals(client, { requester: REQUESTER });
      const tools = adapter.guard(deployTools(sdk, ran, { name: EDITABLE_TOOL }));
      const sessionId = `${session}-edit`;
      const paused = await adapter.submit(await pause(sdk, model, tools), { sessionId });
      const [approvalId] = [...paused.pending.keys()];
      const waiting = client.wait(approvalId!, 20);
      assert.equal(await bot.card(callId), approvalId);
      assert.deepEqual(await bot.edit("approver", approvalId!, { version: "1.2.4" }), {
        status: 200,
        answer: "",
      });
      const decision = await waiting;
      assert.equal(decision.status, "approved");
      assert.deepEqual(decision.edit?.arguments, edited);
      const again = await adapter.resume(paused, decision, (messages) =>
        sdk.generateText({ model, tools, messages }),
      );
      assert.deepEqual(ran, []); // the SDK would run the input it recorded: refused
      const [refused] = toolResults(model);
      assert.equal(refused?.["output"]?.type, "execution-denied");
      const reason = String(refused?.["output"]?.reason);
      assert.match(reason, /only with changed arguments/);
      assert.ok(reason.includes('{"replicas":10000000000000000,"service":"api","version":"1.2.4"}'));
      // the model called again with exactly the edited arguments: approved at once, no card
      assert.ok(again !== null);
      // every step's messages: ai 7 keeps them (the denied call's result first) in
      // responseMessages, its response being the last step's; ai 6's response holds them all
      const steps = (again as { responseMessages?: ModelMessage[] }).responseMessages;
      const messages = [...paused.messages, ...(steps ?? again.response.messages)];
      const paused2 = await adapter.submit(messages, { sessionId });
      const [approvalId2, pending2] = [...paused2.pending][0]!;
      assert.equal(pending2.callId, againId);
      const decision2 = await client.wait(approvalId2, 10);
      assert.equal(decision2.status, "approved");
      assert.equal(decision2.edit_of, approvalId);
      const done = await adapter.resume(paused2, decision2, (m) =>
        sdk.generateText({ model, tools, messages: m }),
      );
      assert.equal(done?.text, "Deployed 1.2.4, as the reviewer changed it.");
      assert.deepEqual(ran, [edited]); // once, as edited
      const original = await client.get(approvalId!);
      assert.equal(original.execution, null);
      assert.equal(original.edit?.called_again_as, approvalId2);
      assert.match((await client.get(approvalId2)).execution?.claim_id ?? "", /^exc_/);
    });

    test("a deny never runs the tool and its reason reaches the model", async () => {
      const callId = `call_${sdk.label}_deny`;
      const ran: object[] = [];
      const model = scripted(sdk, [{ calls: [[callId, ARGS]] }, { text: "Not deploying." }]);
      const client = cs();
      const adapter = new AiSdkApprovals(client, { requester: REQUESTER });
      const tools = adapter.guard(deployTools(sdk, ran));
      const paused = await adapter.submit(await pause(sdk, model, tools), { sessionId: session });
      const [approvalId] = [...paused.pending.keys()];
      const waiting = client.wait(approvalId!, 20);
      await decide(callId, "deny");
      const decision = await waiting;
      assert.equal(decision.status, "denied");
      const done = await adapter.resume(paused, decision, (messages) =>
        sdk.generateText({ model, tools, messages }),
      );
      assert.equal(done?.text, "Not deploying.");
      assert.deepEqual(ran, []);
      const [result] = toolResults(model);
      assert.equal(result?.["output"]?.type, "execution-denied");
      assert.ok(String(result?.["output"]?.reason).includes(REASON));
      assert.ok(String(result?.["output"]?.reason).endsWith(NOT_EXECUTED));
    });

    test("a tampered decision, or a tampered record of the call, is refused", async () => {
      const callId = `call_${sdk.label}_tamper`;
      const ran: object[] = [];
      const model = scripted(sdk, [{ calls: [[callId, ARGS]] }, { text: "Deployed." }]);
      const client = cs();
      const adapter = new AiSdkApprovals(client, { requester: REQUESTER, callbackUrl: bot.callbackUrl });
      const tools = adapter.guard(deployTools(sdk, ran));
      const paused = await adapter.submit(await pause(sdk, model, tools), { sessionId: session });
      const [approvalId] = [...paused.pending.keys()];
      await decide(callId);
      const received = await bot.callbackFor(approvalId!);
      // a body changed in transit does not verify
      const forged = Buffer.from(received.body.toString("utf8").replace('"approved"', '"denied"'));
      assert.throws(() => new CallbackVerifier(bot.callbackSecret).verify(forged, received.headers), SignatureError);
      const decision = new CallbackVerifier(bot.callbackSecret).verify(received.body, received.headers);
      const tampered: [string, Approval][] = [
        ["approval_id", { ...decision, approval_id: "apr_ffffffffffffffffffffffff" }],
        ["request_id", { ...decision, request_id: "another-request" }],
        ["session_id", { ...decision, session_id: "another-session" }],
        ["tool.call_id", { ...decision, tool: { ...decision.tool, call_id: "call_other" } }],
        ["arguments_sha256", { ...decision, arguments_sha256: argumentsSha256(OTHER) }],
        ["tool.arguments", { ...decision, tool: { ...decision.tool, arguments: OTHER } }],
        ["tool.name", { ...decision, tool: { ...decision.tool, name: "drop_database" } }],
        ["resume.approved", { ...decision, status: "approved", resume: { ...decision.resume, approved: false } }],
      ];
      const before = JSON.stringify(paused);
      for (const [field, forgedDecision] of tampered) {
        assert.throws(
          () => adapter.bind(paused, forgedDecision),
          (error: unknown) => error instanceof BindingMismatch && error.field === field,
          field,
        );
      }
      // the stored conversation edited to run other arguments under this approval
      const edited = PausedRun.fromJSON(before.replace('"version":"1.2.3"', '"version":"6.6.6"'));
      assert.throws(
        () => adapter.bind(edited, decision),
        (error: unknown) => error instanceof BindingMismatch && error.field === "arguments_sha256",
      );
      assert.equal(JSON.stringify(paused), before); // nothing applied
      const done = await adapter.resume(paused, decision, (messages) =>
        sdk.generateText({ model, tools, messages }),
      );
      assert.equal(done?.text, "Deployed.");
      assert.deepEqual(ran, [ARGS]);
    });

    test("a restart between pause and decision still resumes", async () => {
      const callId = `call_${sdk.label}_restart`;
      const beforeRestart = scripted(sdk, [{ calls: [[callId, ARGS]] }]);
      const adapter = new AiSdkApprovals(cs(), { requester: REQUESTER, callbackUrl: bot.callbackUrl });
      const paused = await adapter.submit(await pause(sdk, beforeRestart, deployTools(sdk, [])), {
        sessionId: session,
      });
      const saved = JSON.stringify(paused); // what the agent persisted
      const [approvalId] = [...paused.pending.keys()];
      await bot.card(callId);
      await bot.restart(); // the bot goes down and comes back while the call waits

      await decide(callId);
      // the agent too starts afresh: a new client, adapter, model and tools, the saved run
      const ran: object[] = [];
      const afresh = new AiSdkApprovals(cs(), { requester: REQUESTER });
      const tools = afresh.guard(deployTools(sdk, ran));
      const model = scripted(sdk, [{ text: "Deployed after the restart." }]);
      const verifier = new CallbackVerifier(bot.callbackSecret);
      const received = await bot.callbackFor(approvalId!);
      const decision = verifier.verify(received.body, received.headers);
      const restored = PausedRun.fromJSON(saved);
      assert.equal(pendingToolApprovals(restored.messages).length, 1);
      const done = await afresh.resume(
        restored,
        decision,
        (messages) => sdk.generateText({ model, tools, messages }),
      );
      assert.equal(done?.text, "Deployed after the restart.");
      assert.deepEqual(ran, [ARGS]);
      assert.throws(() => verifier.verify(received.body, received.headers), DuplicateDelivery);
    });

    test("two calls in one step run on once both are decided", async () => {
      const [a, b] = [`call_${sdk.label}_two_a`, `call_${sdk.label}_two_b`];
      const ran: object[] = [];
      const model = scripted(sdk, [{ calls: [[a, ARGS], [b, OTHER]] }, { text: "One of two." }]);
      const client = cs();
      const adapter = new AiSdkApprovals(client, { requester: REQUESTER });
      const tools = adapter.guard(deployTools(sdk, ran));
      const paused = await adapter.submit(await pause(sdk, model, tools), { sessionId: session });
      const byCall = new Map([...paused.pending].map(([id, call]) => [call.callId, id]));
      const run = (messages: ModelMessage[]) => sdk.generateText({ model, tools, messages });
      let waiting = client.wait(byCall.get(a)!, 20);
      await decide(a, "deny");
      assert.equal(await adapter.resume(paused, await waiting, run), null);
      assert.deepEqual(ran, []); // the run waits for the whole step to be decided
      waiting = client.wait(byCall.get(b)!, 20);
      await decide(b);
      const done = await adapter.resume(paused, await waiting, run);
      assert.equal(done?.text, "One of two.");
      assert.deepEqual(ran, [OTHER]);
      const outputs = toolResults(model).map((r) => [r["toolCallId"], r["output"]?.type]);
      assert.deepEqual(outputs.sort(), [[a, "execution-denied"], [b, "text"]].sort());
    });

    test("two processes resuming the same pause: the tool runs exactly once", async () => {
      const callId = `call_${sdk.label}_twice`;
      const adapter = new AiSdkApprovals(cs(), { requester: REQUESTER });
      const first = scripted(sdk, [{ calls: [[callId, ARGS]] }]);
      const paused = await adapter.submit(await pause(sdk, first, adapter.guard(deployTools(sdk, []))), {
        sessionId: session,
      });
      const saved = JSON.stringify(paused);
      const [approvalId] = [...paused.pending.keys()];
      const waiting = cs().wait(approvalId!, 20);
      await decide(callId);
      const decision = await waiting;
      // two agent processes (say, a redelivered callback taken by another replica) each load
      // the saved run and resume it with the decision, at the same time
      const job = { sdk: sdk.label, baseUrl: bot.baseUrl, token: bot.agentToken, saved, decision };
      const runs = await Promise.all([resumeInChild(job), resumeInChild(job)]);
      const ran = runs.flatMap((r) => r.ran);
      assert.deepEqual(ran, [ARGS]); // once, in all
      const [winner, loser] = runs[0]!.ran.length === 1 ? [runs[0]!, runs[1]!] : [runs[1]!, runs[0]!];
      assert.equal(winner.results[0]?.["output"]?.value, "deployed api 1.2.3");
      const refused = loser.results[0]?.["output"];
      assert.equal(refused?.type, "error-text");
      const execution = (await cs().get(approvalId!)).execution;
      const claim = `(claim ${execution?.claim_id} at ${execution?.claimed_at})`;
      assert.ok(String(refused?.value).startsWith(`Another run already claimed this approved call ${claim}`));
      assert.ok(String(refused?.value).endsWith(NOT_EXECUTED));
      assert.match(loser.text ?? "", /^resumed in \d+$/); // the model went on, told why
      assert.equal(execution?.outcome?.status, "ok");
    });

    test("a resume after valid_for runs nothing, and the model reads that the approval lapsed", async () => {
      const callId = `call_${sdk.label}_lapsed`;
      const ran: object[] = [];
      const client = cs();
      const adapter = new AiSdkApprovals(client, { requester: REQUESTER });
      const tools = adapter.guard(deployTools(sdk, ran, { name: LAPSING_TOOL }));
      const model = scripted(sdk, [
        { calls: [[callId, ARGS]], tool: LAPSING_TOOL },
        { text: "The approval lapsed." },
      ]);
      const paused = await adapter.submit(await pause(sdk, model, tools), { sessionId: session });
      const [approvalId] = [...paused.pending.keys()];
      const waiting = client.wait(approvalId!, 20);
      await decide(callId);
      const decision = await waiting;
      assert.equal(decision.status, "approved");
      assert.ok(decision.valid_until); // decided_at + 1 s for this tool (tests/support/ts_bot.py)
      await bot.advance(2); // the bot's clock: past valid_until
      const done = await adapter.resume(paused, decision, (messages) =>
        sdk.generateText({ model, tools, messages }),
      );
      assert.equal(done?.text, "The approval lapsed.");
      assert.deepEqual(ran, []);
      const [result] = toolResults(model);
      assert.equal(result?.["output"]?.type, "error-text");
      assert.ok(String(result?.["output"]?.value).startsWith(`The approval lapsed at ${decision.valid_until}`));
      assert.match(String(result?.["output"]?.value), /not executed\. Ask again/);
      assert.equal((await client.get(approvalId!)).execution, null);
    });

    test("a tool that throws reports an error outcome; a call approved around the adapter never runs", async () => {
      const [failing, bypass] = [`call_${sdk.label}_fails`, `call_${sdk.label}_bypass`];
      const ran: object[] = [];
      const client = cs();
      const adapter = new AiSdkApprovals(client, { requester: REQUESTER });
      const tools = adapter.guard(deployTools(sdk, ran, { fail: "registry unreachable" }));
      const model = scripted(sdk, [
        { calls: [[failing, ARGS]] },
        { text: "It failed." },
        { calls: [[bypass, OTHER]] },
        { text: "Not run." },
      ]);
      const paused = await adapter.submit(await pause(sdk, model, tools), { sessionId: session });
      const [approvalId] = [...paused.pending.keys()];
      const waiting = client.wait(approvalId!, 20);
      await decide(failing);
      const done = await adapter.resume(paused, await waiting, (messages) =>
        sdk.generateText({ model, tools, messages }),
      );
      assert.equal(done?.text, "It failed.");
      assert.deepEqual(ran, [ARGS]);
      // ai 6 hands the model the error's message, ai 7 its String()
      assert.match(String(toolResults(model)[0]?.["output"]?.value), /registry unreachable$/);
      const outcome = (await client.get(approvalId!)).execution?.outcome;
      // the error's type only: its message may hold what only the agent should see
      assert.deepEqual([outcome?.status, outcome?.detail], ["error", "raised Error"]);

      // the SDK's own approval response, written without a Countersign decision
      const messages = await pause(sdk, model, tools);
      const [request] = pendingToolApprovals(messages);
      messages.push({
        role: "tool",
        content: [{ type: "tool-approval-response", approvalId: request!.sdkApprovalId, approved: true }],
      });
      assert.equal((await sdk.generateText({ model, tools, messages })).text, "Not run.");
      assert.deepEqual(ran, [ARGS]); // the bypassed call did not run
      const refused = toolResults(model).find((r) => r["toolCallId"] === bypass)?.["output"];
      assert.equal(refused?.type, "error-text");
      assert.match(String(refused?.value), /^No Countersign decision was bound for this call/);
    });
  });
}

describe("Vercel AI SDK (ai7): toolApproval, and tools left unguarded", () => {
  const sdk = SDKS[0]!;
  test("a user-approval rule pauses and resumes the same way", async () => {
    const callId = "call_ai7_tool_approval";
    const ran: object[] = [];
    const toolApproval = { toolApproval: { deploy: "user-approval" as const } };
    const model = scripted(sdk, [{ calls: [[callId, ARGS]] }, { text: "Deployed." }]);
    const client = new CountersignClient(bot.baseUrl, bot.agentToken);
    const adapter = new AiSdkApprovals(client, { requester: REQUESTER });
    const tools = adapter.guard(deployTools(sdk, ran, { needsApproval: false }));
    const paused = await adapter.submit(await pause(sdk, model, tools, toolApproval), {
      sessionId: "ai-sdk-ai7-tool-approval",
    });
    const [approvalId] = [...paused.pending.keys()];
    const waiting = client.wait(approvalId!, 20);
    await decide(callId);
    const done = await adapter.resume(paused, await waiting, (messages) =>
      sdk.generateText({ model, tools, messages, ...toolApproval }),
    );
    assert.equal(done?.text, "Deployed.");
    assert.deepEqual(ran, [ARGS]);
    assert.equal((await client.get(approvalId!)).execution?.outcome?.status, "ok");
  });

  test("a streaming tool (an async generator) is claimed before its first yield", async () => {
    const callId = "call_ai7_streaming";
    const client = new CountersignClient(bot.baseUrl, bot.agentToken);
    const adapter = new AiSdkApprovals(client, { requester: REQUESTER });
    const seen: string[] = [];
    const tools = adapter.guard({
      deploy: sdk.tool({
        description: "Deploy a service, reporting progress",
        inputSchema: sdk.jsonSchema<{ service: string; version: string; replicas: number }>({
          type: "object",
          properties: { service: { type: "string" }, version: { type: "string" }, replicas: { type: "number" } },
        }),
        needsApproval: true,
        async *execute(input) {
          // by the time the tool body runs, its claim is on the server
          seen.push((await client.get(approvalId)).execution?.claim_id ?? "unclaimed");
          yield "rolling out";
          yield `deployed ${input.service}`;
        },
      }),
    });
    const model = scripted(sdk, [{ calls: [[callId, ARGS]] }, { text: "Deployed." }]);
    const paused = await adapter.submit(await pause(sdk, model, tools), { sessionId: "ai-sdk-ai7-streaming" });
    const approvalId = [...paused.pending.keys()][0]!;
    const waiting = client.wait(approvalId, 20);
    await decide(callId);
    const done = await adapter.resume(paused, await waiting, (messages) =>
      sdk.generateText({ model, tools, messages }),
    );
    assert.equal(done?.text, "Deployed.");
    assert.match(seen[0] ?? "", /^exc_/);
    assert.equal(toolResults(model)[0]?.["output"]?.value, "deployed api");
    const outcome = (await client.get(approvalId)).execution?.outcome;
    assert.deepEqual([outcome?.status, outcome?.detail], ["ok", ""]);
  });

  test("tools not wrapped by guard run unclaimed, and resume warns about it", async () => {
    const callId = "call_ai7_unguarded";
    const ran: object[] = [];
    const tools = deployTools(sdk, ran); // not guarded: nothing claims the execution
    const model = scripted(sdk, [{ calls: [[callId, ARGS]] }, { text: "Deployed." }]);
    const client = new CountersignClient(bot.baseUrl, bot.agentToken);
    const adapter = new AiSdkApprovals(client, { requester: REQUESTER });
    const paused = await adapter.submit(await pause(sdk, model, tools), { sessionId: "ai-sdk-ai7-unguarded" });
    const [approvalId] = [...paused.pending.keys()];
    const waiting = client.wait(approvalId!, 20);
    await decide(callId);
    const warned = new Promise<Error>((resolve) => process.once("warning", resolve));
    await adapter.resume(paused, await waiting, (messages) => sdk.generateText({ model, tools, messages }));
    assert.deepEqual(ran, [ARGS]);
    const warning = (await warned) as Error & { code?: string };
    assert.equal(warning.code, "COUNTERSIGN_UNCLAIMED");
    assert.match(warning.message, new RegExp(`${approvalId} was not claimed`));
    assert.equal((await client.get(approvalId!)).execution, null);
  });
});
