/**
 * The real bot for the node tests: tests/support/ts_bot.py (the bot on loopback with the Slack
 * stand-in and PostgreSQL) spawned through the checkout's `.venv/bin/python`, and its control
 * API: the reviewer's clicks, the refusals shown, the callbacks received, a restart, the clock.
 */
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";

/** The tool whose approvals may be claimed only for 1 s after their decision (`valid_for`). */
export const LAPSING_TOOL = "deploy_lapsing";
/** Reviewers may edit the version of a call of this tool (tests/support/ts_bot.py). */
export const EDITABLE_TOOL = "deploy_editable";

/** The repository root (this file is compiled to clients/typescript/dist/test/support/). */
export const ROOT = fileURLToPath(new URL("../../../../../", import.meta.url));

export type Reviewer = "requester" | "approver" | "outsider";

export interface Received {
  body: Buffer;
  headers: Record<string, string>;
}

export class Bot {
  private constructor(
    private readonly child: ChildProcessWithoutNullStreams,
    private readonly info: Record<string, string>,
    private readonly log: string[],
  ) {}

  get baseUrl(): string {
    return this.info["base_url"]!;
  }
  get agentToken(): string {
    return this.info["agent_token"]!;
  }
  get otherAgentToken(): string {
    return this.info["other_agent_token"]!;
  }
  get callbackSecret(): string {
    return this.info["callback_secret"]!;
  }
  /** A callback URL on the bot's allow-list: the agent receiver the control API reads. */
  get callbackUrl(): string {
    return this.info["callback_url"]!;
  }

  static async start(): Promise<Bot> {
    const python = process.env["COUNTERSIGN_PYTHON"] ?? `${ROOT}.venv/bin/python`;
    if (!existsSync(python)) throw new Error(`${python} not found: run make install first`);
    const child = spawn(python, ["-m", "tests.support.ts_bot"], { cwd: ROOT, stdio: "pipe" });
    const log: string[] = [];
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => log.push(chunk));
    const lines = createInterface({ input: child.stdout });
    const first = await new Promise<string>((resolve, reject) => {
      lines.once("line", resolve);
      child.once("exit", (code) =>
        reject(new Error(`the bot launcher exited (${code}) before serving:\n${log.join("")}`)),
      );
    });
    return new Bot(child, JSON.parse(first) as Record<string, string>, log);
  }

  /** Close the launcher's stdin and wait for it to shut the bot and its database down. */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null) return;
    const exited = new Promise((resolve) => this.child.once("exit", resolve));
    this.child.stdin.end();
    await exited;
  }

  /** What the launcher logged (for a failing test's message). */
  get output(): string {
    return this.log.join("");
  }

  private async control(method: string, path: string, body?: unknown): Promise<any> {
    const response = await fetch(this.info["control_url"] + path, {
      method,
      ...(body !== undefined && { body: JSON.stringify(body) }),
    });
    const text = await response.text();
    if (!response.ok) throw new Error(`control ${path}: ${response.status} ${text}`);
    return JSON.parse(text);
  }

  /** The approval id of the card for tool call `callId` (waits for it to be posted). */
  async card(callId: string): Promise<string> {
    return (await this.control("POST", "/card", { call_id: callId })).approval_id;
  }

  /** A Slack-signed click; a deny submits its modal with `reason`. The HTTP status. */
  async click(
    user: Reviewer,
    approvalId: string,
    action: "approve" | "deny" = "approve",
    reason = "not now",
  ): Promise<number> {
    const body = { user, approval_id: approvalId, action, reason };
    return (await this.control("POST", "/click", body)).status;
  }

  /** Edit & approve from the card, `changes` typed over the form's values. The HTTP status and
   * the form's answer ("" when accepted). */
  async edit(
    user: Reviewer,
    approvalId: string,
    changes: Record<string, string>,
  ): Promise<{ status: number; answer: string }> {
    return this.control("POST", "/edit", { user, approval_id: approvalId, changes });
  }

  async ephemerals(user: Reviewer): Promise<string[]> {
    return (await this.control("GET", `/ephemerals?user=${user}`)).texts;
  }

  /** Wait for `user`'s `count`-th refusal; all of them. */
  async waitEphemeral(user: Reviewer, count = 1): Promise<string[]> {
    return this.until(async () => {
      const texts = await this.ephemerals(user);
      return texts.length >= count ? texts : undefined;
    }, `${count} ephemeral(s) for ${user}`);
  }

  /** The signed callbacks delivered so far, byte for byte. */
  async callbacks(): Promise<Received[]> {
    const { callbacks } = await this.control("GET", "/callbacks");
    return (callbacks as Record<string, string>[]).map((c) => ({
      body: Buffer.from(c["body_base64"]!, "base64"),
      headers: { "Countersign-Signature": c["signature"]!, "Idempotency-Key": c["idempotency_key"]! },
    }));
  }

  /** Wait for the callback about `approvalId`. */
  async callbackFor(approvalId: string): Promise<Received> {
    return this.until(async () => {
      const all = await this.callbacks();
      return all.find((c) => c.headers["Idempotency-Key"] === approvalId);
    }, `the callback for ${approvalId}`);
  }

  /** The bot process stops and starts again on its port (its database kept). */
  async restart(): Promise<void> {
    await this.control("POST", "/restart");
  }

  /** Move the bot's clock `seconds` forward (a fake clock: nothing sleeps). */
  async advance(seconds: number): Promise<void> {
    await this.control("POST", "/advance", { seconds });
  }

  private async until<T>(check: () => Promise<T | undefined>, what: string): Promise<T> {
    for (let tries = 0; tries < 500; tries++) {
      const found = await check();
      if (found !== undefined) return found;
      await sleep(20);
    }
    throw new Error(`timed out waiting for ${what}`);
  }
}
