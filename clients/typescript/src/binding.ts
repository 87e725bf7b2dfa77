/**
 * `arguments_sha256`: SHA-256 of the arguments in RFC 8785 (JCS) canonical form, as the server
 * computes it, and the check that a decision is bound to the exact request still pending.
 *
 * JSON numbers are IEEE-754 doubles on both sides, so a JavaScript value hashes as the server
 * hashes the same JSON text: `1e16` is written `10000000000000000`, `-0` is `0`, `1.0` is `1`.
 * What RFC 8785 cannot write is refused with {@link NotCanonical} (the server answers those
 * with a 422): NaN, the infinities, lone surrogates, and anything that is not plain JSON.
 */
import { createHash } from "node:crypto";
import canonicalize from "canonicalize";

import { BindingMismatch, NotCanonical } from "./errors.js";
import type { Approval, JsonObject } from "./types.js";

/** What the agent session itself holds about the call it paused on. */
export interface PendingCall {
  approvalId: string;
  requestId: string;
  sessionId: string;
  callId: string;
  arguments: JsonObject;
}

/** Throws NotCanonical naming the first part of `value` that is not I-JSON. */
export function assertIJson(value: unknown, path = ""): void {
  if (value === null || typeof value === "boolean") return;
  switch (typeof value) {
    case "number":
      if (!Number.isFinite(value)) throw new NotCanonical(path, `${value} is not a JSON number`);
      return;
    case "string":
      if (hasLoneSurrogate(value)) throw new NotCanonical(path, "a lone surrogate is not text");
      return;
    case "object":
      if (Array.isArray(value)) {
        value.forEach((item, index) => assertIJson(item, path ? `${path}.${index}` : `${index}`));
        return;
      }
      if (!isPlainObject(value)) {
        throw new NotCanonical(path, `a ${value.constructor?.name ?? "non-plain"} object is not JSON`);
      }
      for (const [key, item] of Object.entries(value)) {
        if (hasLoneSurrogate(key)) throw new NotCanonical(path, "a key holds a lone surrogate");
        assertIJson(item, path ? `${path}.${key}` : key);
      }
      return;
    default:
      throw new NotCanonical(path, `a ${typeof value} is not JSON`);
  }
}

/** The RFC 8785 text of `value`; NotCanonical outside I-JSON. */
export function canonicalJson(value: unknown): string {
  assertIJson(value);
  const text = canonicalize(value);
  if (text === undefined) throw new NotCanonical("", "no JSON text");
  return text;
}

export function sha256Hex(data: string | Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

/** The hash every decision echoes: SHA-256 (hex) of the RFC 8785 UTF-8 bytes of `args`. */
export function argumentsSha256(args: unknown): string {
  return sha256Hex(Buffer.from(canonicalJson(args), "utf8"));
}

/** `decision` if every echoed field matches `pending`; throws BindingMismatch. */
export function checkBinding<T extends Approval>(decision: T, pending: PendingCall): T {
  const checks: [string, string, string][] = [
    ["approval_id", pending.approvalId, decision.approval_id],
    ["request_id", pending.requestId, decision.request_id],
    ["session_id", pending.sessionId, decision.session_id],
    ["tool.call_id", pending.callId, decision.tool?.call_id],
    ["arguments_sha256", argumentsSha256(pending.arguments), decision.arguments_sha256],
  ];
  for (const [field, expected, got] of checks) {
    if (expected !== got) throw new BindingMismatch(field, expected, got);
  }
  return decision;
}

/**
 * A reviewer's edit of an approved `decision`, once it holds: its arguments hash to its
 * `arguments_sha256`, which is not the requested one, and its patch (RFC 6902 `replace`
 * operations) takes the requested arguments to exactly those. `null` when the decision is not
 * approved or carries no edit; throws BindingMismatch otherwise.
 */
export function checkEdit(decision: Approval): NonNullable<Approval["edit"]> | null {
  const edit = decision.edit;
  if (edit === null || edit === undefined || decision.status !== "approved") return null;
  const hash = argumentsSha256(edit.arguments);
  if (hash !== edit.arguments_sha256) {
    throw new BindingMismatch("edit.arguments_sha256", hash, edit.arguments_sha256);
  }
  if (hash === decision.arguments_sha256) {
    throw new BindingMismatch("edit.arguments_sha256", "a change", edit.arguments_sha256);
  }
  const patched = applyReplaces(decision.tool.arguments, edit.patch);
  if (patched === null || argumentsSha256(patched) !== hash) {
    throw new BindingMismatch("edit.patch", hash, "another result");
  }
  return edit;
}

/** `args` with the patch's replace operations applied, each at a value that is there; `null`
 * for a patch that is not that. */
function applyReplaces(args: unknown, patch: readonly Record<string, unknown>[]): unknown {
  const out: unknown = JSON.parse(JSON.stringify(args));
  for (const op of patch) {
    const path = op["path"];
    if (op["op"] !== "replace" || typeof path !== "string" || !path.startsWith("/")) return null;
    const parts = path
      .split("/")
      .slice(1)
      .map((p) => p.replaceAll("~1", "/").replaceAll("~0", "~"));
    let node: unknown = out;
    for (const part of parts.slice(0, -1)) {
      node = step(node, part);
      if (node === undefined) return null;
    }
    const last = parts.at(-1) as string;
    if (Array.isArray(node) && /^\d+$/.test(last) && Number(last) < node.length) {
      node[Number(last)] = op["value"];
    } else if (node !== null && typeof node === "object" && !Array.isArray(node) && Object.hasOwn(node, last)) {
      (node as Record<string, unknown>)[last] = op["value"];
    } else {
      return null;
    }
  }
  return out;
}

function step(node: unknown, part: string): unknown {
  if (Array.isArray(node)) return /^\d+$/.test(part) ? node[Number(part)] : undefined;
  if (node !== null && typeof node === "object" && Object.hasOwn(node, part)) {
    return (node as Record<string, unknown>)[part];
  }
  return undefined;
}

function isPlainObject(value: object): boolean {
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function hasLoneSurrogate(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code >= 0xd800 && code <= 0xdbff) {
      const next = text.charCodeAt(i + 1);
      if (!(next >= 0xdc00 && next <= 0xdfff)) return true;
      i++;
    } else if (code >= 0xdc00 && code <= 0xdfff) {
      return true;
    }
  }
  return false;
}
