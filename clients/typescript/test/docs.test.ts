/** docs/typescript.md's runnable example, run as written against the bot: a click by someone
 * without the role is refused, the approver's decides, and the example claims the execution and
 * reports its outcome. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { CountersignClient } from "../src/index.js";
import { Bot, ROOT } from "./support/bot.js";

const DEV_URL = "http://localhost:3000";
const DEV_TOKEN = "dev-sales-bot-token-change-me";
const MARKER = "clients/typescript/test/docs.test.ts runs it";

/** The ```js block right after the marker naming this test. */
function example(): string {
  const text = readFileSync(`${ROOT}docs/typescript.md`, "utf8");
  const at = text.indexOf(MARKER);
  assert.ok(at >= 0, "docs/typescript.md has no example marked for this test");
  const match = /```js\n([\s\S]*?)\n```/.exec(text.slice(at));
  assert.ok(match?.[1], "no ```js block after the marker");
  return match[1];
}

let bot: Bot;
before(async () => {
  bot = await Bot.start();
});
after(async () => {
  await bot?.stop();
});

test("the example in docs/typescript.md submits, waits, claims and reports the outcome", async () => {
  const source = example();
  assert.ok(source.includes(DEV_URL) && source.includes(DEV_TOKEN));
  // inside the package, so `@countersign/client` resolves to this build (a self-reference)
  const file = fileURLToPath(new URL("../docs-example.mjs", import.meta.url));
  writeFileSync(file, source.replace(DEV_URL, bot.baseUrl).replace(DEV_TOKEN, bot.agentToken));
  const child = spawn(process.execPath, [file], { stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));

  const approvalId = await bot.card("call_deploy_1");
  // someone without the role the policy requires is refused; the approver decides
  await bot.click("outsider", approvalId);
  assert.equal((await bot.waitEphemeral("outsider")).length, 1);
  assert.equal(await bot.click("approver", approvalId), 200);
  assert.equal(await exited, 0, stderr);
  assert.match(stdout, new RegExp(`waiting for a decision on ${approvalId}`));
  assert.match(stdout, /approved by Alma Approver: deploying api 1\.2\.3/);
  assert.match(stdout, /outcome reported: ok/);
  const execution = (await new CountersignClient(bot.baseUrl, bot.agentToken).get(approvalId)).execution;
  assert.deepEqual(
    [execution?.outcome?.status, execution?.outcome?.detail],
    ["ok", "deployed api 1.2.3"],
  );
});
