/**
 * The Vercel AI SDK's tool approvals (`ai` 6.x and 7.x): a tool with `needsApproval` (or, in 7,
 * `toolApproval: {tool: "user-approval"}`) ends the step with a `tool-approval-request`; this
 * adapter hands each one to Countersign, and turns the decision into the
 * `tool-approval-response` the SDK resumes from.
 *
 * Everything is read from the conversation's messages (`ModelMessage[]`, the history plus the
 * result's `response.messages`), which is what an agent persists anyway. A {@link PausedRun}
 * is those messages and, per approval id, the call Countersign holds for it: save it with
 * `JSON.stringify(paused)` and rebuild it with {@link PausedRun.fromJSON} after a restart.
 * A decision is applied only when every echoed field matches a call still pending both in that
 * record and in the messages; the SDK then runs the input its own tool-call part holds, never
 * the decision's copy.
 *
 * The SDK runs an approved tool itself, on the approval response, inside `generateText` or
 * `streamText`. The tools given to it are wrapped with {@link AiSdkApprovals.guard}: right
 * before the tool's own `execute`, the wrapper claims the one execution the approval allows
 * (an idempotency key of this attempt's own), runs the tool only if the claim is granted, and
 * reports the outcome after. A claim refused — another run holds it, the decision lapsed —
 * becomes a tool error the model reads; the tool does not run. Only type declarations are
 * taken from `ai`: nothing here runs its code.
 */
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";

import type { ModelMessage } from "ai";

import { argumentsSha256, canonicalJson, checkBinding, checkEdit, type PendingCall } from "./binding.js";
import { type CountersignClient, retryable } from "./client.js";
import {
  AlreadyClaimed,
  BindingMismatch,
  CalledAgain,
  DecisionLapsed,
  NotApproved,
  NotTheseArguments,
} from "./errors.js";
import type { Approval, JsonObject, JsonValue, Requester } from "./types.js";
import { isApproved, isSettled } from "./types.js";

/** What every adapter tells the model when a call is not approved. */
export const NOT_EXECUTED = "The tool call was not executed; do not retry it unchanged.";

/** One tool call the conversation is paused on, as its messages hold it. */
export interface PendingToolApproval {
  /** The SDK's approval id (`tool-approval-request.approvalId`). */
  sdkApprovalId: string;
  toolCallId: string;
  toolName: string;
  input: unknown;
}

/** A Countersign approval for one of the SDK's approval requests. */
export interface PendingApproval extends PendingCall {
  sdkApprovalId: string;
  toolName: string;
}

/** The conversation paused on approvals, and the calls Countersign holds, by approval id. */
export class PausedRun {
  constructor(
    readonly sessionId: string,
    readonly messages: ModelMessage[],
    readonly pending: Map<string, PendingApproval> = new Map(),
  ) {}

  /** Everything needed to resume in another process (`JSON.stringify(paused)`). */
  toJSON(): { session_id: string; messages: ModelMessage[]; pending: PendingApproval[] } {
    return { session_id: this.sessionId, messages: this.messages, pending: [...this.pending.values()] };
  }

  static fromJSON(text: string): PausedRun {
    const data = JSON.parse(text) as ReturnType<PausedRun["toJSON"]>;
    return new PausedRun(
      data.session_id,
      data.messages,
      new Map(data.pending.map((call) => [call.approvalId, call])),
    );
  }
}

/** Why a guarded tool did not run (`ToolNotExecuted.reason`). */
export type NotExecutedReason =
  | "already_claimed" // another run (another idempotency key) holds the execution
  | "decision_lapsed" // the approval's valid_until passed before the claim
  | "not_approved" // the server holds the approval as anything but approved
  | "not_these_arguments" // the approval lets other arguments run (a reviewer's edit)
  | "called_again" // approved with edits and called again: that call runs them
  | "not_bound" // the SDK has an approval for the call that this adapter did not bind
  | "input_changed" // the SDK's input differs from the arguments that were approved
  | "already_run" // this attempt ran it already
  | "claim_failed"; // the claim could not be made (Countersign unreachable, …)

/**
 * Thrown by a guarded tool instead of running it. The SDK turns it into the call's tool error:
 * its message is what the model reads.
 */
export class ToolNotExecuted extends Error {
  override name = "ToolNotExecuted";
  constructor(
    readonly reason: NotExecutedReason,
    message: string,
    readonly approvalId?: string,
    options?: { cause: unknown },
  ) {
    super(message, options);
  }

  /** The message alone: `ai` 7 hands the model `String(error)`, `ai` 6 the message. */
  override toString(): string {
    return this.message;
  }
}

/** What a guarded tool reports after it ran (`detail`, at most 500 characters). */
export interface OutcomeInfo {
  approvalId: string;
  toolName: string;
  input: unknown;
  status: "ok" | "error";
  /** The tool's result (ok) or what it threw (error). */
  result: unknown;
}

/** The reason for anything but an approval, ending with the instruction not to retry. */
export function denialText(decision: Pick<Approval, "reason" | "status">): string {
  const reason = (decision.reason ?? "").trim() || `The approval request was ${decision.status}.`;
  return reason.includes(NOT_EXECUTED) ? reason : `${reason} ${NOT_EXECUTED}`;
}

/** Characters of a reviewer's note passed on to the model. */
export const EDIT_NOTE_LIMIT = 500;

/**
 * A reviewer's changes as the model reads them: `/amount 5000 → 500`, each value as JSON, and
 * their note, quoted (human text, cut). The same words as the Python adapters'
 * (tests/fixtures/recall_text.json holds one case both check).
 */
export function editChanges(decision: Approval): string {
  const edit = decision.edit;
  if (edit === null || edit === undefined) return "";
  const changes = edit.patch.map((op) => {
    const before = valueAt(decision.tool.arguments, String(op["path"] ?? ""));
    return `${String(op["path"])} ${asJson(before)} → ${asJson(op["value"] ?? null)}`;
  });
  let text = changes.join("; ") || "none";
  if (edit.note) text += `. Reviewer's note: ${asJson(Array.from(edit.note).slice(0, EDIT_NOTE_LIMIT).join(""))}`;
  return text;
}

/**
 * What the model is told when a reviewer approved the call only with changed arguments: not
 * executed, what was changed, and the exact arguments to call again with (their RFC 8785 text:
 * the bytes that hash to the edit's hash).
 */
export function recallText(decision: Approval, tool: string): string {
  const edit = decision.edit;
  if (edit === null || edit === undefined) throw new Error(`${decision.approval_id} has no edit`);
  const who = edit.by.name || edit.by.slack_user_id;
  return (
    `Not executed: a reviewer (${who}) approved this call in Countersign only with changed ` +
    `arguments. Changed: ${editChanges(decision)}. To run it, call ${tool} again with ` +
    `exactly these arguments, nothing added, removed or changed: ${canonicalJson(edit.arguments)}. ` +
    "Any other arguments need a new approval; do not retry the original ones."
  );
}

function valueAt(args: unknown, pointer: string): unknown {
  let node: unknown = args;
  for (const part of pointer.split("/").slice(1)) {
    const key = part.replaceAll("~1", "/").replaceAll("~0", "~");
    if (Array.isArray(node) && /^\d+$/.test(key) && Number(key) < node.length) node = node[Number(key)];
    else if (node !== null && typeof node === "object" && !Array.isArray(node)) {
      node = Object.hasOwn(node, key) ? (node as Record<string, unknown>)[key] : null;
    } else return null;
  }
  return node;
}

/** A value as Python's `json.dumps(value, ensure_ascii=False)` writes the scalars an edit holds. */
function asJson(value: unknown): string {
  return JSON.stringify(value ?? null);
}

/**
 * The approval requests of `messages` that no `tool-approval-response` answers yet (automatic
 * approvals and denials are answered already), with the tool call each one is for.
 */
export function pendingToolApprovals(messages: readonly ModelMessage[]): PendingToolApproval[] {
  const calls = new Map<string, { toolName: string; input: unknown }>();
  const requests: { approvalId: string; toolCallId: string }[] = [];
  const answered = new Set<string>();
  for (const message of messages) {
    if (typeof message.content === "string") continue;
    for (const part of message.content as readonly { type: string }[]) {
      const p = part as Record<string, unknown>;
      if (p["type"] === "tool-call") {
        calls.set(String(p["toolCallId"]), { toolName: String(p["toolName"]), input: p["input"] });
      } else if (p["type"] === "tool-approval-request" && p["isAutomatic"] !== true) {
        requests.push({ approvalId: String(p["approvalId"]), toolCallId: String(p["toolCallId"]) });
      } else if (p["type"] === "tool-approval-response") {
        answered.add(String(p["approvalId"]));
      }
    }
  }
  const pending: PendingToolApproval[] = [];
  for (const request of requests) {
    if (answered.has(request.approvalId)) continue;
    const call = calls.get(request.toolCallId);
    if (call === undefined) {
      throw new Error(`approval ${request.approvalId}: no tool call ${request.toolCallId} in the messages`);
    }
    pending.push({ sdkApprovalId: request.approvalId, toolCallId: request.toolCallId, ...call });
  }
  return pending;
}

export interface AiSdkApprovalsOptions {
  requester: Requester;
  callbackUrl?: string;
  expiresIn?: number;
  context?: JsonObject;
  /**
   * The outcome's `detail` for the reviewer's card and the audit (cut to 500 characters). By
   * default none for `ok` and the type of what it threw for `error` (`raised TypeError`): no
   * text of the result or the error leaves the agent unless this says so.
   */
  outcomeDetail?: (outcome: OutcomeInfo) => string;
  /**
   * Called when the outcome could not be reported (the tool ran; its result still reaches the
   * model). By default a process warning.
   */
  onReportError?: (error: unknown, approvalId: string) => void;
}

/** An approval bound in this process: the one attempt to run it, with its own key. */
interface Authorization {
  sdkApprovalId: string;
  approvalId: string;
  toolName: string;
  argumentsSha256: string;
  idempotencyKey: string;
  state: "bound" | "claiming" | "running" | "done";
  /** A guarded tool tried to claim it. */
  tried: boolean;
}

type Execute = (this: unknown, input: unknown, options: ExecuteOptions) => unknown;
interface ExecuteOptions {
  toolCallId: string;
  messages?: ModelMessage[];
}

const CLAIM_TRIES = 3;

/**
 * `submit` a conversation's approval requests; `resume` it with a decision bound to one; give
 * the SDK the tools {@link guard} wraps, so that an approved call runs at most once.
 */
export class AiSdkApprovals {
  /** Approved calls bound here and not yet run, by the SDK's approval id. */
  private readonly authorized = new Map<string, Authorization>();

  constructor(
    private readonly client: CountersignClient,
    private readonly options: AiSdkApprovalsOptions,
  ) {}

  /**
   * The same tools, each `execute` wrapped: a call the SDK runs on an approval (a
   * `tool-approval-request` for it in the messages) runs only once this adapter has bound
   * the Countersign decision for it ({@link bind} or {@link resume}), its input still hashes to
   * the approved arguments, and the claim of its one execution is granted; then the outcome is
   * reported. Anything else throws {@link ToolNotExecuted}, which the SDK hands the model as
   * the call's tool error. Calls that needed no approval run as before. Pass the wrapped tools
   * to every `generateText`/`streamText` of the conversation.
   */
  guard<T extends Record<string, object>>(tools: T): T {
    const guarded: Record<string, object> = {};
    for (const [name, tool] of Object.entries(tools)) {
      const execute = (tool as { execute?: unknown }).execute;
      guarded[name] =
        typeof execute === "function"
          ? { ...tool, execute: this.wrap(name, tool, execute as Execute) }
          : tool;
    }
    return guarded as T;
  }

  /**
   * Hand every pending approval request of `messages` to Countersign; the paused run to
   * persist. The request id is the SDK's approval id, minted per request: a model that
   * reuses a tool call id gets a new decision, never an old one.
   */
  async submit(
    messages: ModelMessage[],
    { sessionId, summary = "" }: { sessionId: string; summary?: string },
  ): Promise<PausedRun> {
    const paused = new PausedRun(sessionId, messages);
    for (const request of pendingToolApprovals(messages)) {
      const args = asArguments(request.input);
      const approval = await this.client.submit({
        requestId: request.sdkApprovalId,
        sessionId,
        tool: request.toolName,
        callId: request.toolCallId,
        arguments: args,
        requester: this.options.requester,
        summary,
        framework: "generic",
        ...(this.options.context !== undefined && { context: this.options.context }),
        ...(this.options.callbackUrl !== undefined && { callbackUrl: this.options.callbackUrl }),
        ...(this.options.expiresIn !== undefined && { expiresIn: this.options.expiresIn }),
      });
      const pending: PendingApproval = {
        approvalId: approval.approval_id,
        requestId: request.sdkApprovalId,
        sessionId,
        callId: request.toolCallId,
        arguments: args,
        sdkApprovalId: request.sdkApprovalId,
        toolName: request.toolName,
      };
      checkBinding(approval, pending); // the server bound exactly what the SDK will run
      paused.pending.set(approval.approval_id, pending);
    }
    return paused;
  }

  /**
   * Answer the SDK's approval request with `decision`: a `tool-approval-response` appended to
   * `paused.messages` (approved, or denied with the reason the model will read). Throws
   * BindingMismatch when any echoed field differs from a call pending in `paused`; nothing is
   * applied then. A bound decision is consumed.
   */
  bind(paused: PausedRun, decision: Approval): void {
    if (!isSettled(decision)) throw new Error(`${decision.approval_id} is still pending`);
    const pending = boundCall(paused, decision);
    // approved only with a reviewer's edit: the SDK would run the input it recorded, so the
    // call is refused, and the model reads the exact arguments approved, to call again with
    // (that call is approved at once: docs/edits.md); an edit that does not hold is refused
    const edited = checkEdit(decision) !== null;
    const runs = isApproved(decision) && !edited;
    paused.pending.delete(decision.approval_id);
    if (runs) {
      // a key of this attempt's own: another process (or another copy of the saved run) binding
      // the same decision claims with its own key, and the server grants only one of them
      this.authorized.set(pending.sdkApprovalId, {
        sdkApprovalId: pending.sdkApprovalId,
        approvalId: decision.approval_id,
        toolName: pending.toolName,
        argumentsSha256: argumentsSha256(pending.arguments),
        idempotencyKey: randomUUID(),
        state: "bound",
        tried: false,
      });
    }
    const response = {
      type: "tool-approval-response" as const,
      approvalId: pending.sdkApprovalId,
      approved: runs,
      ...(!runs && {
        reason: edited ? recallText(decision, pending.toolName) : denialText(decision),
      }),
    };
    const last = paused.messages.at(-1);
    if (
      last?.role === "tool" &&
      last.content.every((part) => part.type === "tool-approval-response")
    ) {
      last.content.push(response);
    } else {
      paused.messages.push({ role: "tool", content: [response] });
    }
  }

  /**
   * {@link bind} `decision`; once every call of the pause is decided, `run` the conversation
   * on (e.g. `messages => generateText({model, tools: approvals.guard(tools), messages})`) and
   * return its result (`null` while others still wait). The SDK runs the approved calls first
   * thing; the guarded tools claim each one right before it runs.
   */
  async resume<T>(
    paused: PausedRun,
    decision: Approval,
    run: (messages: ModelMessage[]) => Promise<T>,
  ): Promise<T | null> {
    this.bind(paused, decision);
    if (paused.pending.size > 0) return null;
    const result = await run(paused.messages);
    for (const id of approvedIn(paused.messages)) {
      const auth = this.authorized.get(id);
      if (auth?.state === "bound" && !auth.tried) {
        process.emitWarning(
          `approval ${auth.approvalId} was not claimed during the run: give generateText the ` +
            "tools AiSdkApprovals.guard wraps, or the SDK runs approved calls unclaimed",
          { code: "COUNTERSIGN_UNCLAIMED" },
        );
      }
    }
    return result;
  }

  /** `execute` of tool `name`, claiming the execution of an approved call before it runs. */
  private wrap(name: string, tool: object, execute: Execute): Execute {
    const before = (input: unknown, options: ExecuteOptions): Authorization | null => {
      const requested = approvalRequestsFor(options.messages ?? [], options.toolCallId);
      if (requested.length === 0) return null; // no approval was asked: not ours to claim
      // the latest request for this call that this adapter bound (a model may reuse call ids)
      const auth = requested
        .map((id) => this.authorized.get(id))
        .reverse()
        .find((found) => found !== undefined);
      if (auth === undefined) {
        throw new ToolNotExecuted(
          "not_bound",
          `No Countersign decision was bound for this call in this run. ${NOT_EXECUTED}`,
        );
      }
      if (auth.toolName !== name || argumentsSha256(asArguments(input)) !== auth.argumentsSha256) {
        throw new ToolNotExecuted(
          "input_changed",
          `The call differs from the one that was approved. ${NOT_EXECUTED}`,
          auth.approvalId,
        );
      }
      if (auth.state !== "bound") {
        throw new ToolNotExecuted(
          "already_run",
          `This approved call already ran in this run. ${NOT_EXECUTED}`,
          auth.approvalId,
        );
      }
      return auth;
    };
    const adapter = this;
    if (isAsyncGeneratorFunction(execute)) {
      // a streaming tool: the SDK reads its yields as it goes, the claim comes first
      return async function* (input: unknown, options: ExecuteOptions) {
        const auth = before(input, options);
        if (auth !== null) await adapter.claim(auth);
        let last: unknown;
        try {
          for await (const value of execute.call(tool, input, options) as AsyncIterable<unknown>) {
            last = value;
            yield value;
          }
        } catch (error) {
          if (auth !== null) await adapter.report(auth, input, "error", error);
          throw error;
        }
        if (auth !== null) await adapter.report(auth, input, "ok", last);
      };
    }
    return async (input: unknown, options: ExecuteOptions) => {
      const auth = before(input, options);
      if (auth === null) return execute.call(tool, input, options);
      await this.claim(auth);
      let result: unknown;
      try {
        result = await drain(execute.call(tool, input, options));
      } catch (error) {
        await this.report(auth, input, "error", error);
        throw error;
      }
      await this.report(auth, input, "ok", result);
      return result;
    };
  }

  /**
   * Claim `auth`'s execution (its key again after a lost answer); ToolNotExecuted if not. When
   * Countersign could not be reached the call stays bound with the same key: running the step
   * again in this process retries the very same claim, never a second one.
   */
  private async claim(auth: Authorization): Promise<void> {
    auth.state = "claiming";
    auth.tried = true;
    try {
      await withRetries(() => this.client.claim(auth.approvalId, auth.idempotencyKey));
    } catch (error) {
      if (retryable(error)) auth.state = "bound";
      else this.forget(auth);
      throw notExecuted(error, auth.approvalId);
    }
    auth.state = "running";
  }

  /** Report what the run did; a failure to report does not hide the result from the model. */
  private async report(
    auth: Authorization,
    input: unknown,
    status: "ok" | "error",
    result: unknown,
  ): Promise<void> {
    const { approvalId, toolName, idempotencyKey } = auth;
    try {
      const describe = this.options.outcomeDetail ?? defaultDetail;
      const detail = cut(describe({ approvalId, toolName, input, status, result }), 500);
      await withRetries(() =>
        this.client.reportOutcome(approvalId, { idempotencyKey, status, detail }),
      );
    } catch (error) {
      if (this.options.onReportError) this.options.onReportError(error, approvalId);
      else {
        process.emitWarning(`the outcome of ${approvalId} was not reported: ${String(error)}`, {
          code: "COUNTERSIGN_OUTCOME_NOT_REPORTED",
        });
      }
    } finally {
      this.forget(auth);
    }
  }

  private forget(auth: Authorization): void {
    auth.state = "done";
    // a fresh bind of the same call (another copy of the saved run) is an attempt of its own
    if (this.authorized.get(auth.sdkApprovalId) === auth) this.authorized.delete(auth.sdkApprovalId);
  }
}

/** The SDK approval ids `messages` answer with an approval. */
function approvedIn(messages: readonly ModelMessage[]): string[] {
  const ids: string[] = [];
  for (const message of messages) {
    if (typeof message.content === "string") continue;
    for (const part of message.content as readonly Record<string, unknown>[]) {
      if (part["type"] === "tool-approval-response" && part["approved"] === true) {
        ids.push(String(part["approvalId"]));
      }
    }
  }
  return ids;
}

/** The SDK approval ids of the (non-automatic) approval requests for `toolCallId`, in order. */
function approvalRequestsFor(messages: readonly ModelMessage[], toolCallId: string): string[] {
  const ids: string[] = [];
  for (const message of messages) {
    if (typeof message.content === "string") continue;
    for (const part of message.content as readonly Record<string, unknown>[]) {
      if (
        part["type"] === "tool-approval-request" &&
        part["toolCallId"] === toolCallId &&
        part["isAutomatic"] !== true
      ) {
        ids.push(String(part["approvalId"]));
      }
    }
  }
  return ids;
}

/** What the model reads when the claim was refused (or could not be made). */
function notExecuted(error: unknown, approvalId: string): ToolNotExecuted {
  const options = { cause: error };
  if (error instanceof AlreadyClaimed) {
    const claim = error.claim;
    const held = claim ? ` (claim ${claim.claim_id} at ${claim.claimed_at})` : "";
    return new ToolNotExecuted(
      "already_claimed",
      `Another run already claimed this approved call${held}: it was not executed here. ${NOT_EXECUTED}`,
      approvalId,
      options,
    );
  }
  if (error instanceof DecisionLapsed) {
    const until = error.validUntil ? ` at ${error.validUntil}` : "";
    return new ToolNotExecuted(
      "decision_lapsed",
      `The approval lapsed${until}, before the call ran: it was not executed. ` +
        "Ask again: call the tool anew for a fresh decision if it is still needed.",
      approvalId,
      options,
    );
  }
  if (error instanceof NotTheseArguments || error instanceof CalledAgain) {
    const called = error instanceof CalledAgain;
    return new ToolNotExecuted(
      called ? "called_again" : "not_these_arguments",
      "A reviewer approved this call only with changed arguments" +
        (called ? ", and it was called again with them; that call runs them, not this one. " : ". ") +
        NOT_EXECUTED,
      approvalId,
      options,
    );
  }
  if (error instanceof NotApproved) {
    return new ToolNotExecuted(
      "not_approved",
      `The approval is ${error.approvalStatus ?? "not approved"}. ${NOT_EXECUTED}`,
      approvalId,
      options,
    );
  }
  return new ToolNotExecuted(
    "claim_failed",
    `The execution could not be claimed (${error instanceof Error ? error.message : String(error)}): ` +
      `the call was not executed. ${NOT_EXECUTED}`,
    approvalId,
    options,
  );
}

/** `call`, again (up to three tries) after a dropped connection or a gateway's 502/503/504. */
async function withRetries<T>(call: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (error) {
      if (attempt >= CLAIM_TRIES || !retryable(error)) throw error;
      await sleep(200 * attempt);
    }
  }
}

function isAsyncGeneratorFunction(f: unknown): boolean {
  return Object.prototype.toString.call(f) === "[object AsyncGeneratorFunction]";
}

/** A result, awaited; an async iterable (a plain function's stream) read to its last value. */
async function drain(result: unknown): Promise<unknown> {
  if (result !== null && typeof result === "object" && Symbol.asyncIterator in result) {
    let last: unknown;
    for await (const value of result as AsyncIterable<unknown>) last = value;
    return last;
  }
  return await result;
}

/** By default nothing of the tool's result or error text: it goes to the Slack card and the
 * audit, and may hold what only the agent should see. `outcomeDetail` opts in to more. */
function defaultDetail({ status, result }: OutcomeInfo): string {
  if (status !== "error") return "";
  const name = result instanceof Error ? result.name : typeof result;
  return `raised ${name}`;
}

/** At most `max` characters (code points: never half a surrogate pair). */
function cut(text: string, max: number): string {
  const chars = Array.from(text);
  return chars.length <= max ? text : `${chars.slice(0, max - 1).join("")}…`;
}

/** The arguments of a tool input: the object itself, else `{"raw": input}`. */
function asArguments(input: unknown): JsonObject {
  if (input !== null && typeof input === "object" && !Array.isArray(input)) {
    return input as JsonObject;
  }
  return { raw: (input ?? null) as JsonValue };
}

/** The pending call `decision` is for; BindingMismatch naming the first field that differs
 * (checkBinding's, then the messages' own record of the call, and the decision's echoes). */
function boundCall(paused: PausedRun, decision: Approval): PendingApproval {
  const pending = paused.pending.get(decision.approval_id);
  if (pending === undefined) {
    throw new BindingMismatch("approval_id", [...paused.pending.keys()], decision.approval_id);
  }
  checkBinding(decision, pending);
  const open = pendingToolApprovals(paused.messages).filter(
    (request) => request.sdkApprovalId === pending.sdkApprovalId,
  );
  if (open.length !== 1) {
    throw new BindingMismatch("request_id", "one open tool-approval-request", open.length);
  }
  const [request] = open as [PendingToolApproval];
  const hash = argumentsSha256(pending.arguments);
  const resume = (decision.resume ?? {}) as Record<string, unknown>;
  const checks: [string, unknown, unknown][] = [
    ["tool.call_id", pending.callId, request.toolCallId],
    ["arguments_sha256", hash, argumentsSha256(asArguments(request.input))],
    ["tool.name", request.toolName, decision.tool.name],
    ["tool.arguments", hash, argumentsSha256(decision.tool.arguments ?? {})],
    ["resume.approved", isApproved(decision), resume["approved"] ?? isApproved(decision)],
  ];
  for (const [field, expected, got] of checks) {
    if (expected !== got) throw new BindingMismatch(field, expected, got);
  }
  return pending;
}
