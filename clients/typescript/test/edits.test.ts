/**
 * A reviewer's edit, on the client: the shared wording case (tests/fixtures/recall_text.json,
 * which the Python adapters' test reads too) and the check that an edit holds.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";

import { recallText } from "../src/ai-sdk.js";
import { type Approval, BindingMismatch, checkEdit } from "../src/index.js";
import { ROOT } from "./support/bot.js";

const CASE = JSON.parse(readFileSync(`${ROOT}tests/fixtures/recall_text.json`, "utf8")) as {
  tool: string;
  decision: Approval;
  text: string;
};

function copy(): Approval {
  return structuredClone(CASE.decision);
}

describe("approved with an edit", () => {
  test("the model is told what the Python adapters tell it, word for word", () => {
    assert.equal(recallText(CASE.decision, CASE.tool), CASE.text);
  });

  test("an edit that hashes and patches as it says holds", () => {
    assert.deepEqual(checkEdit(CASE.decision)?.arguments, CASE.decision.edit?.arguments);
    assert.equal(checkEdit({ ...copy(), edit: null }), null);
    assert.equal(checkEdit({ ...copy(), status: "denied" }), null);
  });

  const tamperings: [string, (d: Approval) => void, string][] = [
    ["arguments not what is hashed", (d) => ((d.edit!.arguments as any).canary = 6), "edit.arguments_sha256"],
    ["another change than shown", (d) => ((d.edit!.patch[0] as any).value = "9.9.9"), "edit.patch"],
    ["an add, not a replace", (d) => ((d.edit!.patch[0] as any).op = "add"), "edit.patch"],
    ["a path that is not there", (d) => ((d.edit!.patch[0] as any).path = "/nowhere"), "edit.patch"],
    ["no change at all", (d) => (d.arguments_sha256 = d.edit!.arguments_sha256), "edit.arguments_sha256"],
  ];
  for (const [what, tamper, field] of tamperings) {
    test(`an edit that does not hold is refused: ${what}`, () => {
      const decision = copy();
      tamper(decision);
      assert.throws(
        () => checkEdit(decision),
        (error: unknown) => error instanceof BindingMismatch && error.field === field,
      );
    });
  }
});
