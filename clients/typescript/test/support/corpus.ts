/** The cross-language binding corpus (tests/fixtures/binding_corpus.json). */
import { readFileSync } from "node:fs";

import { ROOT } from "./bot.js";

export interface Case {
  name: string;
  /** The raw JSON text of the arguments. */
  json: string;
  /** Their RFC 8785 text, as the server writes it. */
  canonical: string;
  sha256: string;
}

export const CORPUS = JSON.parse(
  readFileSync(`${ROOT}tests/fixtures/binding_corpus.json`, "utf8"),
) as { cases: Case[]; refused: { name: string; json: string }[] };
