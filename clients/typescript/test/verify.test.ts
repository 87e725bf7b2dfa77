/** Signed callbacks: constant-time HMAC over "<t>.<raw body>", 5 minutes' tolerance, replays
 * refused by Idempotency-Key. (The bot's own callbacks are verified in client.test.ts.) */
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { describe, test } from "node:test";

import {
  CallbackVerifier,
  DuplicateDelivery,
  SignatureError,
  verifyCallback,
} from "../src/index.js";

const SECRET = "agent-callback-secret";
const NOW = 1_800_000_000_000; // ms
const BODY = Buffer.from(
  JSON.stringify({ approval_id: "apr_0123456789abcdef01234567", status: "approved", reason: "é" }),
);

function signed(body: Buffer, t = NOW / 1000, secret = SECRET): Record<string, string> {
  const v1 = createHmac("sha256", secret).update(`${t}.`).update(body).digest("hex");
  return { "Countersign-Signature": `t=${t},v1=${v1}`, "Idempotency-Key": "apr_0123456789abcdef01234567" };
}

const verifier = () => new CallbackVerifier(SECRET, { now: () => NOW });

describe("verifyCallback", () => {
  test("returns the decision of a body signed with the agent's secret", () => {
    assert.equal(verifier().verify(BODY, signed(BODY)).status, "approved");
  });

  test("reads headers from a fetch Headers object and from node:http's lower-cased record", () => {
    const headers = signed(BODY);
    assert.equal(verifier().verify(BODY, new Headers(headers)).reason, "é");
    const lower = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
    assert.equal(verifier().verify(BODY.toString("utf8"), lower).reason, "é");
  });

  test("refuses a body changed after signing, another secret, and a malformed header", () => {
    const v = verifier();
    const tampered = Buffer.from(BODY.toString().replace("approved", "denied"));
    assert.throws(() => v.verify(tampered, signed(BODY)), /does not match/);
    assert.throws(() => v.verify(BODY, signed(BODY, NOW / 1000, "other")), /does not match/);
    for (const header of ["", "t=1", "v1=00", "t=x,v1=00", "t=1800000000,v1=zz", "garbage"]) {
      assert.throws(
        () => v.verify(BODY, { ...signed(BODY), "Countersign-Signature": header }),
        SignatureError,
      );
    }
  });

  test("refuses a timestamp more than 5 minutes away, either way", () => {
    const v = verifier();
    assert.throws(() => v.verify(BODY, signed(BODY, NOW / 1000 - 301)), /tolerance/);
    assert.throws(() => v.verify(BODY, signed(BODY, NOW / 1000 + 301)), /tolerance/);
    assert.equal(v.verify(BODY, signed(BODY, NOW / 1000 - 300)).status, "approved");
  });

  test("refuses a replay of a delivered Idempotency-Key, and a key naming another approval", () => {
    const v = verifier();
    v.verify(BODY, signed(BODY));
    assert.throws(() => v.verify(BODY, signed(BODY)), DuplicateDelivery);
    assert.throws(
      () => verifier().verify(BODY, { ...signed(BODY), "Idempotency-Key": "apr_ffffffffffffffffffffffff" }),
      /Idempotency-Key/,
    );
  });

  test("keeps its seen keys where the caller says (a Set here)", () => {
    const seen = new Set<string>();
    const options = { secret: SECRET, seen, now: () => NOW };
    verifyCallback(BODY, signed(BODY), options);
    assert.deepEqual([...seen], ["apr_0123456789abcdef01234567"]);
    assert.throws(() => verifyCallback(BODY, signed(BODY), options), DuplicateDelivery);
  });
});
