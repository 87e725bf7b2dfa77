/** RFC 8785 and the binding, against the cross-language corpus the server's test reads too. */
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  argumentsSha256,
  BindingMismatch,
  canonicalJson,
  checkBinding,
  NotCanonical,
  type Approval,
  type PendingCall,
  wireJson,
} from "../src/index.js";
import { CORPUS } from "./support/corpus.js";

describe("the binding corpus, hashed by the TypeScript client", () => {
  for (const c of CORPUS.cases) {
    test(c.name, () => {
      const value: unknown = JSON.parse(c.json);
      assert.equal(canonicalJson(value), c.canonical);
      assert.equal(argumentsSha256(value), c.sha256);
      // what the client sends reads back as the same value, so it hashes the same again
      assert.equal(argumentsSha256(JSON.parse(wireJson(value))), c.sha256);
    });
  }
  for (const c of CORPUS.refused) {
    test(`refused: ${c.name}`, () => {
      assert.throws(() => argumentsSha256(JSON.parse(c.json)), NotCanonical);
      assert.throws(() => wireJson(JSON.parse(c.json)), NotCanonical);
    });
  }
});

describe("values outside I-JSON", () => {
  test("are refused with the path of the offending part", () => {
    for (const [value, path] of [
      [{ a: [1, NaN] }, "a.1"],
      [{ a: { b: Infinity } }, "a.b"],
      [{ when: new Date(0) }, "when"],
      [{ big: 1n }, "big"],
      [{ gone: undefined }, "gone"],
      [{ f: () => 1 }, "f"],
    ] as const) {
      assert.throws(
        () => argumentsSha256(value),
        (error: unknown) => error instanceof NotCanonical && error.path === path,
      );
    }
  });
});

describe("the request body", () => {
  test("writes a double past 2^53 so that the server reads a double, not a refused integer", () => {
    assert.equal(wireJson({ n: 1e16, m: -1e20, k: 1e21, s: 9007199254740991 }),
      '{"n":10000000000000000.0,"m":-100000000000000000000.0,"k":1e+21,"s":9007199254740991}');
  });
  test("writes -0 as 0, the way RFC 8785 does", () => {
    assert.equal(wireJson([-0, 0.5]), "[0,0.5]");
  });
});

describe("checkBinding", () => {
  const pending: PendingCall = {
    approvalId: "apr_0123456789abcdef01234567",
    requestId: "req-1",
    sessionId: "session-1",
    callId: "call-1",
    arguments: { amount: 500, to: "ACME" },
  };
  const decision = {
    approval_id: pending.approvalId,
    request_id: pending.requestId,
    session_id: pending.sessionId,
    tool: { name: "pay", call_id: pending.callId, arguments: pending.arguments },
    arguments_sha256: argumentsSha256(pending.arguments),
    status: "approved",
  } as unknown as Approval;

  test("returns a decision whose every echoed field matches", () => {
    assert.equal(checkBinding(decision, pending), decision);
  });

  for (const [field, change] of [
    ["approval_id", { approval_id: "apr_ffffffffffffffffffffffff" }],
    ["request_id", { request_id: "req-2" }],
    ["session_id", { session_id: "session-2" }],
    ["tool.call_id", { tool: { name: "pay", call_id: "call-2", arguments: {} } }],
    ["arguments_sha256", { arguments_sha256: argumentsSha256({ amount: 5000, to: "ACME" }) }],
  ] as const) {
    test(`refuses a decision with another ${field}`, () => {
      assert.throws(
        () => checkBinding({ ...decision, ...change } as Approval, pending),
        (error: unknown) => error instanceof BindingMismatch && error.field === field,
      );
    });
  }
});
