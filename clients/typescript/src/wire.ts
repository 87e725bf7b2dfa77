/**
 * Request bodies as JSON text the server reads back as the same numbers.
 *
 * The server keeps integers within ±(2^53 − 1) (I-JSON) and refuses integer literals beyond,
 * while a double such as 1e16 is fine. `JSON.stringify(1e16)` writes `10000000000000000`, an
 * integer literal, so a double past the safe range is written here with `.0` (the same double
 * to any parser) and hashes on the server exactly as it does here.
 */
import { assertIJson } from "./binding.js";

export function wireJson(value: unknown): string {
  assertIJson(value);
  return write(value);
}

function write(value: unknown): string {
  if (typeof value === "number") {
    const text = JSON.stringify(value);
    const unsafe = Number.isInteger(value) && !Number.isSafeInteger(value);
    return unsafe && !/[.e]/i.test(text) ? `${text}.0` : text;
  }
  if (Array.isArray(value)) return `[${value.map(write).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const members = Object.entries(value)
      .filter(([, item]) => item !== undefined)
      .map(([key, item]) => `${JSON.stringify(key)}:${write(item)}`);
    return `{${members.join(",")}}`;
  }
  return JSON.stringify(value);
}
