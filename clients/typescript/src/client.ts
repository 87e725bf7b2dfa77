/** An HTTP client for wire contract v1 (global `fetch`, Node ≥ 20). */
import { setTimeout as sleep } from "node:timers/promises";

import { fromResponse } from "./errors.js";
import type {
  Approval,
  ApprovalRequest,
  ClaimRequest,
  Framework,
  JsonObject,
  OutcomeRequest,
  Requester,
} from "./types.js";
import { isSettled } from "./types.js";
import { wireJson } from "./wire.js";

/** The server's long-poll cap per request, in seconds. */
export const MAX_WAIT = 60;

export interface ClientOptions {
  /** Per-request timeout in milliseconds (10 000); a long-poll adds its wait to it. */
  timeoutMs?: number;
  fetch?: typeof fetch;
}

export interface SubmitOptions {
  requestId: string;
  sessionId: string;
  tool: string;
  callId: string;
  arguments: JsonObject;
  requester: Requester;
  summary?: string;
  context?: JsonObject;
  callbackUrl?: string;
  /** Seconds until the request expires (the server's default otherwise). */
  expiresIn?: number;
  framework?: Framework;
}

export interface OutcomeReport {
  /** The claim's idempotency key. */
  idempotencyKey: string;
  status: "ok" | "error";
  /** At most 500 characters. */
  detail?: string;
}

/** `new CountersignClient(baseUrl, agentToken)`, then `submit`, `wait`, `claim`, …. */
export class CountersignClient {
  private readonly base: string;
  private readonly timeoutMs: number;
  private readonly fetch: typeof fetch;

  constructor(
    baseUrl: string,
    private readonly token: string,
    options: ClientOptions = {},
  ) {
    this.base = baseUrl.replace(/\/+$/, "");
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.fetch = options.fetch ?? globalThis.fetch;
  }

  /**
   * Hand a pending tool call to Countersign. Idempotent: the same ids and content return the
   * same approval; the same ids with other content throw Conflict.
   */
  async submit(options: SubmitOptions): Promise<Approval> {
    const requester = Object.fromEntries(
      Object.entries(options.requester).filter(([, v]) => v !== null && v !== undefined),
    ) as ApprovalRequest["requester"];
    const body: ApprovalRequest = {
      request_id: options.requestId,
      session_id: options.sessionId,
      tool: { name: options.tool, call_id: options.callId, arguments: options.arguments },
      requester,
      summary: options.summary ?? "",
      context: options.context ?? {},
      framework: options.framework ?? "generic",
      ...(options.callbackUrl !== undefined && { callback_url: options.callbackUrl }),
      ...(options.expiresIn !== undefined && { expires_in: options.expiresIn }),
    };
    return this.call("POST", "/v1/approvals", body);
  }

  async get(approvalId: string): Promise<Approval> {
    return this.call("GET", `/v1/approvals/${encodeURIComponent(approvalId)}`);
  }

  /**
   * Long-poll until the approval settles or `timeoutSeconds` pass (then it is returned still
   * pending). A dropped connection, a server restart or a gateway's 502/503/504 is retried,
   * with a growing pause, until the deadline.
   */
  async wait(approvalId: string, timeoutSeconds: number): Promise<Approval> {
    const deadline = performance.now() + timeoutSeconds * 1000;
    let pause = 200;
    for (;;) {
      const remaining = (deadline - performance.now()) / 1000;
      // fractions count: truncating 0.9 s to 0 would return at once, still pending
      const wait = Math.max(0, Math.min(MAX_WAIT, remaining));
      let approval: Approval;
      try {
        approval = await this.call(
          "GET",
          `/v1/approvals/${encodeURIComponent(approvalId)}?wait=${wait.toFixed(3)}`,
          undefined,
          wait * 1000 + this.timeoutMs,
        );
      } catch (error) {
        if (!retryable(error) || performance.now() + pause >= deadline) throw error;
        await sleep(pause);
        pause = Math.min(pause * 2, 5000);
        continue;
      }
      pause = 200;
      if (isSettled(approval) || performance.now() >= deadline || wait <= 0) return approval;
    }
  }

  async cancel(approvalId: string, reason?: string): Promise<Approval> {
    return this.call(
      "POST",
      `/v1/approvals/${encodeURIComponent(approvalId)}/cancel`,
      reason ? { reason } : undefined,
    );
  }

  /**
   * Claim the one execution an approved approval allows, before running the tool. The same
   * `idempotencyKey` again returns the same execution (a retry after a lost answer is safe);
   * throws AlreadyClaimed (another key won), NotApproved, DecisionLapsed (past
   * `valid_until`: do not run, ask again), NotTheseArguments (`argumentsSha256` is not the
   * hash of what may run: after an edit, a claim must name the edited one) or CalledAgain.
   */
  async claim(approvalId: string, idempotencyKey: string, argumentsSha256?: string): Promise<Approval> {
    const body: ClaimRequest = {
      idempotency_key: idempotencyKey,
      ...(argumentsSha256 !== undefined && { arguments_sha256: argumentsSha256 }),
    };
    return this.call("POST", `/v1/approvals/${encodeURIComponent(approvalId)}/execution`, body);
  }

  /**
   * Report what happened after running the claimed execution. The same report again is fine;
   * a different one throws OutcomeAlreadyReported; a key without a claim throws NotClaimed.
   */
  async reportOutcome(approvalId: string, report: OutcomeReport): Promise<Approval> {
    const body: OutcomeRequest = {
      idempotency_key: report.idempotencyKey,
      status: report.status,
      ...(report.detail !== undefined && { detail: report.detail }),
    };
    return this.call("POST", `/v1/approvals/${encodeURIComponent(approvalId)}/outcome`, body);
  }

  private async call(
    method: string,
    path: string,
    body?: unknown,
    timeoutMs: number = this.timeoutMs,
  ): Promise<Approval> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}` };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await this.fetch(this.base + path, {
      method,
      headers,
      ...(body !== undefined && { body: wireJson(body) }),
      signal: AbortSignal.timeout(Math.ceil(timeoutMs)),
    });
    const text = await response.text();
    const json = (response.headers.get("content-type") ?? "").startsWith("application/json");
    const parsed: unknown = json && text ? JSON.parse(text) : text;
    if (response.status >= 400) throw fromResponse(response.status, parsed);
    return parsed as Approval;
  }
}

/** A dropped connection, a timeout, or a gateway's 502/503/504: worth asking again. */
export function retryable(error: unknown): boolean {
  if (error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError")) {
    return true; // no answer in time: the long-poll is asked again
  }
  if (error instanceof TypeError) return true; // fetch's "fetch failed": refused, reset, closed
  const status = (error as { status?: unknown } | null)?.status;
  return status === 502 || status === 503 || status === 504;
}
