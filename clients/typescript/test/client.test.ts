/** The client against the real bot on loopback (tests/support/ts_bot.py). */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";

import {
  AlreadyClaimed,
  argumentsSha256,
  CallbackVerifier,
  Conflict,
  CountersignClient,
  DecisionLapsed,
  DuplicateDelivery,
  InvalidRequest,
  NotApproved,
  NotClaimed,
  NotFound,
  OutcomeAlreadyReported,
  SignatureError,
  Unauthorized,
  type JsonObject,
} from "../src/index.js";
import { CORPUS } from "./support/corpus.js";
import { Bot, LAPSING_TOOL } from "./support/bot.js";

const REQUESTER = { slack_user_id: "U0REQ", email: "rita@example.com", name: "Rita" };
const ARGS = { service: "api", version: "1.2.3" };

let bot: Bot;
let cs: CountersignClient;

before(async () => {
  bot = await Bot.start();
  cs = new CountersignClient(bot.baseUrl, bot.agentToken);
});
after(async () => {
  await bot?.stop();
});

function call(callId: string, args: JsonObject = ARGS, extra: object = {}) {
  return {
    requestId: `req-${callId}`,
    sessionId: "ts-session",
    tool: "deploy",
    callId,
    arguments: args,
    requester: REQUESTER,
    summary: "Deploy api 1.2.3",
    ...extra,
  };
}

/** The requester's click is refused (four eyes), then the approver decides. */
async function decide(callId: string, action: "approve" | "deny" = "approve", reason = "no") {
  const approvalId = await bot.card(callId);
  const refused = (await bot.ephemerals("requester")).length;
  await bot.click("requester", approvalId, action, reason);
  const texts = await bot.waitEphemeral("requester", refused + 1);
  assert.match(texts.at(-1)!, /you requested this call/);
  assert.equal(await bot.click("approver", approvalId, action, reason), 200);
  return approvalId;
}

describe("submit, get, wait, cancel", () => {
  test("submit is idempotent and the server binds the hash the client computes", async () => {
    const first = await cs.submit(call("call_ts_1"));
    assert.equal(first.status, "pending");
    assert.equal(first.arguments_sha256, argumentsSha256(ARGS));
    const again = await cs.submit(call("call_ts_1"));
    assert.equal(again.approval_id, first.approval_id);
    await assert.rejects(cs.submit(call("call_ts_1", { ...ARGS, version: "9" })), Conflict);
    assert.equal((await cs.get(first.approval_id)).request_id, "req-call_ts_1");
  });

  test("wait returns the decision once the approver clicks", async () => {
    const approval = await cs.submit(call("call_ts_2"));
    const waiting = cs.wait(approval.approval_id, 20);
    await decide("call_ts_2");
    const decision = await waiting;
    assert.equal(decision.status, "approved");
    assert.equal(decision.decided_by[0]?.slack_user_id, "U0APP");
  });

  test("wait returns a still-pending approval when its time is up", async () => {
    const approval = await cs.submit(call("call_ts_3"));
    assert.equal((await cs.wait(approval.approval_id, 0.3)).status, "pending");
    const cancelled = await cs.cancel(approval.approval_id, "changed my mind");
    assert.equal(cancelled.status, "cancelled");
  });

  test("wait survives a restart of the bot while it long-polls", async () => {
    const approval = await cs.submit(call("call_ts_4"));
    const polls: string[] = [];
    const counting: typeof fetch = async (input, init) => {
      try {
        const response = await fetch(input, init);
        polls.push(String(response.status));
        return response;
      } catch (error) {
        polls.push("cut");
        throw error;
      }
    };
    const polling = new CountersignClient(bot.baseUrl, bot.agentToken, { fetch: counting });
    const waiting = polling.wait(approval.approval_id, 30);
    await bot.card("call_ts_4");
    await bot.restart();
    await decide("call_ts_4", "deny", "not during the freeze");
    const decision = await waiting;
    // the poll in flight at the restart ended without the decision; another one brought it
    assert.ok(polls.length >= 2, String(polls));
    assert.equal(decision.status, "denied");
    assert.match(decision.reason ?? "", /not during the freeze/);
  });

  test("errors come back as the error tree", async () => {
    await assert.rejects(new CountersignClient(bot.baseUrl, "wrong-token").get("apr_0123456789abcdef01234567"), Unauthorized);
    const mine = await cs.submit(call("call_ts_5"));
    const other = new CountersignClient(bot.baseUrl, bot.otherAgentToken);
    await assert.rejects(other.get(mine.approval_id), NotFound);
    await assert.rejects(
      cs.submit(call("call_ts_6", ARGS, { summary: "x".repeat(2001) })),
      (error: unknown) =>
        error instanceof InvalidRequest && error.fields.some((f) => f.field === "summary"),
    );
  });
});

describe("signed callbacks from the bot", () => {
  test("verify, and a redelivery or a changed body is refused", async () => {
    const approval = await cs.submit(call("call_ts_7", ARGS, { callbackUrl: bot.callbackUrl }));
    await decide("call_ts_7");
    const received = await bot.callbackFor(approval.approval_id);
    const verifier = new CallbackVerifier(bot.callbackSecret);
    const decision = verifier.verify(received.body, received.headers);
    assert.equal(decision.status, "approved");
    assert.equal(decision.arguments_sha256, argumentsSha256(decision.tool.arguments));
    assert.throws(() => verifier.verify(received.body, received.headers), DuplicateDelivery);
    const changed = Buffer.from(received.body.toString("utf8").replace('"approved"', '"denied"'));
    assert.throws(() => new CallbackVerifier(bot.callbackSecret).verify(changed, received.headers), SignatureError);
  });
});

describe("the binding corpus, hashed by the server", () => {
  test("every case submitted gets the stored hash, and its arguments read back hash the same", async () => {
    for (const [index, c] of CORPUS.cases.entries()) {
      const args = JSON.parse(c.json) as JsonObject;
      const approval = await cs.submit(call(`call_corpus_${index}`, args));
      assert.equal(approval.arguments_sha256, c.sha256, c.name);
      assert.equal(argumentsSha256(approval.tool.arguments), c.sha256, c.name);
      assert.equal(argumentsSha256(args), c.sha256, c.name);
    }
  });
});

describe("single-use execution claims", () => {
  test("one key claims the execution; a retry with it gets the same claim, another key is refused", async () => {
    const approval = await cs.submit(call("call_ts_claim_1"));
    await assert.rejects(cs.claim(approval.approval_id, randomUUID()), NotApproved);
    const waiting = cs.wait(approval.approval_id, 20);
    await decide("call_ts_claim_1");
    assert.equal((await waiting).status, "approved");
    const key = randomUUID();
    const claimed = await cs.claim(approval.approval_id, key);
    assert.match(claimed.execution?.claim_id ?? "", /^exc_/);
    assert.ok(claimed.valid_until);
    const retried = await cs.claim(approval.approval_id, key);
    assert.equal(retried.execution?.claim_id, claimed.execution?.claim_id);
    await assert.rejects(
      cs.claim(approval.approval_id, randomUUID()),
      (error: unknown) =>
        error instanceof AlreadyClaimed && error.claim?.claim_id === claimed.execution?.claim_id,
    );
  });

  test("the outcome is reported once for the claim's key", async () => {
    const approval = await cs.submit(call("call_ts_claim_2"));
    const waiting = cs.wait(approval.approval_id, 20);
    await decide("call_ts_claim_2");
    await waiting;
    const key = randomUUID();
    await assert.rejects(
      cs.reportOutcome(approval.approval_id, { idempotencyKey: key, status: "ok" }),
      NotClaimed,
    );
    await cs.claim(approval.approval_id, key);
    const report = { idempotencyKey: key, status: "ok" as const, detail: "deployed" };
    const done = await cs.reportOutcome(approval.approval_id, report);
    assert.equal(done.execution?.outcome?.status, "ok");
    assert.equal((await cs.reportOutcome(approval.approval_id, report)).execution?.outcome?.detail, "deployed");
    await assert.rejects(
      cs.reportOutcome(approval.approval_id, { ...report, status: "error" }),
      OutcomeAlreadyReported,
    );
  });

  test("a claim after valid_until is refused as lapsed, and nothing is claimed", async () => {
    const approval = await cs.submit(call("call_ts_claim_3", ARGS, { tool: LAPSING_TOOL }));
    const waiting = cs.wait(approval.approval_id, 20);
    await decide("call_ts_claim_3");
    const decision = await waiting;
    assert.ok(decision.valid_until); // decided_at + 1 s for this tool
    await bot.advance(2); // the bot's clock
    await assert.rejects(
      cs.claim(approval.approval_id, randomUUID()),
      (error: unknown) =>
        error instanceof DecisionLapsed &&
        Date.parse(error.validUntil ?? "") === Date.parse(decision.valid_until ?? ""),
    );
    assert.equal((await cs.get(approval.approval_id)).execution, null);
  });
});
