/**
 * Verifies Countersign's signed callbacks: HMAC-SHA256 over `"<t>.<raw body>"` compared in
 * constant time, a timestamp tolerance (5 minutes) against replays of old bodies, and refusal
 * of an Idempotency-Key seen before (the server delivers at least once).
 */
import { createHmac, timingSafeEqual } from "node:crypto";

import { DuplicateDelivery, SignatureError } from "./errors.js";
import type { Approval } from "./types.js";

/** Headers as `fetch` (a `Headers`) or `node:http` (an object of strings) hands them over. */
export type HeadersLike =
  | { get(name: string): string | null }
  | Record<string, string | string[] | undefined>;

/** Where the Idempotency-Keys of verified callbacks are remembered (a `Set` will do). */
export interface ReplayGuard {
  has(key: string): boolean;
  add(key: string): unknown;
}

export interface VerifyOptions {
  secret: string | Uint8Array;
  /** The keys delivered before; a key found here is a DuplicateDelivery. */
  seen: ReplayGuard;
  /** Seconds a signature's timestamp may be away from now (300). */
  toleranceSeconds?: number;
  /** Milliseconds since the epoch (Date.now). */
  now?: () => number;
}

const SIGNATURE = /^[0-9a-f]{64}$/;

/**
 * The decision in `body` (the raw bytes as received, before any JSON parsing); throws
 * SignatureError, or DuplicateDelivery (answer it 2xx and do nothing).
 */
export function verifyCallback(
  body: string | Uint8Array,
  headers: HeadersLike,
  options: VerifyOptions,
): Approval {
  const raw = typeof body === "string" ? Buffer.from(body, "utf8") : Buffer.from(body);
  const { timestamp, signature } = parseSignature(header(headers, "countersign-signature"));
  const now = (options.now ?? Date.now)() / 1000;
  if (Math.abs(now - timestamp) > (options.toleranceSeconds ?? 300)) {
    throw new SignatureError("Countersign-Signature timestamp outside the tolerance");
  }
  const expected = createHmac("sha256", options.secret)
    .update(`${timestamp}.`)
    .update(raw)
    .digest("hex");
  // both are 64 hex digits here (checked above), so the comparison takes the same time
  if (!timingSafeEqual(Buffer.from(expected, "ascii"), Buffer.from(signature, "ascii"))) {
    throw new SignatureError("Countersign-Signature does not match the body");
  }
  let decision: Approval;
  try {
    decision = JSON.parse(raw.toString("utf8")) as Approval;
  } catch {
    throw new SignatureError("a signed body that is not JSON");
  }
  const key = header(headers, "idempotency-key");
  if (!decision || typeof decision !== "object" || key !== decision.approval_id) {
    throw new SignatureError("Idempotency-Key does not name the approval in the body");
  }
  if (options.seen.has(key)) throw new DuplicateDelivery(`${key} was delivered before`);
  options.seen.add(key);
  return decision;
}

/** {@link verifyCallback} with the seen keys kept in memory (the latest `remember` of them). */
export class CallbackVerifier {
  private readonly seen: BoundedSet;

  constructor(
    private readonly secret: string | Uint8Array,
    private readonly options: { toleranceSeconds?: number; remember?: number; now?: () => number } = {},
  ) {
    this.seen = new BoundedSet(options.remember ?? 10_000);
  }

  verify(body: string | Uint8Array, headers: HeadersLike): Approval {
    return verifyCallback(body, headers, {
      secret: this.secret,
      seen: this.seen,
      ...(this.options.toleranceSeconds !== undefined && {
        toleranceSeconds: this.options.toleranceSeconds,
      }),
      ...(this.options.now !== undefined && { now: this.options.now }),
    });
  }
}

class BoundedSet implements ReplayGuard {
  private readonly keys = new Set<string>();
  constructor(private readonly limit: number) {}

  has(key: string): boolean {
    return this.keys.has(key);
  }

  add(key: string): void {
    this.keys.add(key);
    for (const oldest of this.keys) {
      if (this.keys.size <= this.limit) break;
      this.keys.delete(oldest);
    }
  }
}

function header(headers: HeadersLike, name: string): string {
  if (typeof headers.get === "function") {
    return (headers as { get(name: string): string | null }).get(name) ?? "";
  }
  for (const [key, value] of Object.entries(headers as Record<string, unknown>)) {
    if (key.toLowerCase() === name) return Array.isArray(value) ? String(value[0]) : String(value ?? "");
  }
  return "";
}

function parseSignature(value: string): { timestamp: number; signature: string } {
  const fields = new Map<string, string>();
  for (const part of value.split(",")) {
    const at = part.indexOf("=");
    if (at < 0) throw new SignatureError("missing or malformed Countersign-Signature");
    fields.set(part.slice(0, at).trim(), part.slice(at + 1).trim());
  }
  const t = fields.get("t") ?? "";
  const signature = fields.get("v1") ?? "";
  if (!/^\d{1,12}$/.test(t) || !SIGNATURE.test(signature)) {
    throw new SignatureError("missing or malformed Countersign-Signature");
  }
  return { timestamp: Number(t), signature };
}
