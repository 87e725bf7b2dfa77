// The request/response types of the wire contract, generated from docs/openapi.json (itself
// generated from the server's pydantic models by `make openapi`).
//   npm run gen:types     writes src/generated/openapi.ts
//   npm run check:types   fails when src/generated/openapi.ts differs from what it would write
import { readFile, writeFile } from "node:fs/promises";
import openapiTS, { astToString } from "openapi-typescript";

const SPEC = new URL("../../../docs/openapi.json", import.meta.url);
const OUT = new URL("../src/generated/openapi.ts", import.meta.url);
const HEADER =
  "// Generated from docs/openapi.json by `npm run gen:types` (openapi-typescript). Do not edit:\n" +
  "// `npm run check:types` fails when this file and the contract drift apart.\n\n";

const spec = JSON.parse(await readFile(SPEC, "utf8"));
const text = HEADER + astToString(await openapiTS(spec, { defaultNonNullable: false }));

if (process.argv.includes("--check")) {
  const current = await readFile(OUT, "utf8").catch(() => "");
  if (current !== text) {
    console.error(
      "src/generated/openapi.ts is out of date with docs/openapi.json: run `npm run gen:types`",
    );
    process.exit(1);
  }
  console.log("src/generated/openapi.ts matches docs/openapi.json");
} else {
  await writeFile(OUT, text);
  console.log("wrote src/generated/openapi.ts");
}
