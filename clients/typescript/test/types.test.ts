/** The generated wire types match docs/openapi.json (the `npm run check:types` drift check). */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

test("src/generated/openapi.ts is what docs/openapi.json generates", () => {
  const script = fileURLToPath(new URL("../../scripts/gen-types.mjs", import.meta.url));
  const run = spawnSync(process.execPath, [script, "--check"], { encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stdout, /matches docs\/openapi\.json/);
});
