/**
 * One agent process resuming a saved pause: `node resume-child.js` reads
 * `{sdk, baseUrl, token, saved, decision}` as JSON on stdin, resumes the saved run with the
 * decision through its own client, adapter, model and (guarded) tools, and prints
 * `{ran, results, text}`: the inputs its tool ran, the tool results its model read, its answer.
 */
import { text } from "node:stream/consumers";

import { AiSdkApprovals, PausedRun } from "../../src/ai-sdk.js";
import { type Approval, CountersignClient } from "../../src/index.js";
import { deployTools, scripted, sdkNamed, toolResults } from "./sdk.js";

interface Job {
  sdk: string;
  baseUrl: string;
  token: string;
  saved: string;
  decision: Approval;
}

const job = JSON.parse(await text(process.stdin)) as Job;
const sdk = sdkNamed(job.sdk);
const ran: object[] = [];
const approvals = new AiSdkApprovals(new CountersignClient(job.baseUrl, job.token), {
  requester: { email: "rita@example.com" },
});
const tools = approvals.guard(deployTools(sdk, ran));
const model = scripted(sdk, [{ text: `resumed in ${process.pid}` }]);
const done = await approvals.resume(PausedRun.fromJSON(job.saved), job.decision, (messages) =>
  sdk.generateText({ model, tools, messages }),
);
process.stdout.write(JSON.stringify({ ran, results: toolResults(model), text: done?.text }));
