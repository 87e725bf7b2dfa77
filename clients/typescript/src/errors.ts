/**
 * The client's error tree (the Python client's, plus the execution claim's conflicts).
 *
 * CountersignClientError
 * ├── ApiError                 a 4xx/5xx answer: .status, .code, .message, .fields, .error
 * │   ├── BadRequest           400 malformed JSON
 * │   ├── Unauthorized         401 wrong or missing agent token
 * │   ├── NotFound             404 unknown approval (or another agent's)
 * │   ├── Conflict             409 same ids with other content / already settled
 * │   │   ├── AlreadyClaimed   another idempotency key claimed the execution: .claim
 * │   │   ├── NotApproved      the approval is not approved: .approvalStatus
 * │   │   ├── DecisionLapsed   now > valid_until: not executed, ask again: .validUntil
 * │   │   ├── NotTheseArguments  not the arguments approved to run: .argumentsSha256
 * │   │   ├── CalledAgain      its edit runs as the call again .calledAgainAs
 * │   │   ├── NotClaimed       an outcome for a key that holds no claim
 * │   │   └── OutcomeAlreadyReported   another outcome was stored before
 * │   ├── PayloadTooLarge      413
 * │   ├── UnsupportedMediaType 415
 * │   └── InvalidRequest       422 schema errors, each field named in .fields
 * ├── NotCanonical             a value outside I-JSON: it cannot be hashed or sent exactly
 * ├── SignatureError           a callback whose Countersign-Signature does not verify
 * │   └── DuplicateDelivery    a valid callback already seen (same Idempotency-Key): ack, skip
 * └── BindingMismatch          a decision that is not for the request pending in this session
 */
import type { ClaimHeld, FieldProblem } from "./types.js";

export class CountersignClientError extends Error {
  override name = "CountersignClientError";
}

export class ApiError extends CountersignClientError {
  override name = "ApiError";
  /** The answer's `error` object as sent (extra fields such as `claim` included). */
  readonly error: Record<string, unknown>;

  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly fields: FieldProblem[],
    error: Record<string, unknown> = {},
  ) {
    super(`HTTP ${status} ${code}: ${message}`);
    this.error = error;
  }

  /** The server's message, without the status and code prefix. */
  get detail(): string {
    return typeof this.error["message"] === "string" ? this.error["message"] : this.message;
  }
}

export class BadRequest extends ApiError {
  override name = "BadRequest";
}
export class Unauthorized extends ApiError {
  override name = "Unauthorized";
}
export class NotFound extends ApiError {
  override name = "NotFound";
}
export class Conflict extends ApiError {
  override name = "Conflict";
}
export class PayloadTooLarge extends ApiError {
  override name = "PayloadTooLarge";
}
export class UnsupportedMediaType extends ApiError {
  override name = "UnsupportedMediaType";
}
export class InvalidRequest extends ApiError {
  override name = "InvalidRequest";
}

export class AlreadyClaimed extends Conflict {
  override name = "AlreadyClaimed";
  /** The claim that won: `{claim_id, claimed_at}`. */
  get claim(): ClaimHeld | undefined {
    const claim = this.error["claim"];
    return claim && typeof claim === "object" ? (claim as ClaimHeld) : undefined;
  }
}
export class NotApproved extends Conflict {
  override name = "NotApproved";
  get approvalStatus(): string | undefined {
    const status = this.error["status"];
    return typeof status === "string" ? status : undefined;
  }
}
export class DecisionLapsed extends Conflict {
  override name = "DecisionLapsed";
  get validUntil(): string | undefined {
    const until = this.error["valid_until"];
    return typeof until === "string" ? until : undefined;
  }
}
/** The claim named other arguments than the approval lets run (after an edit: the edited ones). */
export class NotTheseArguments extends Conflict {
  override name = "NotTheseArguments";
  /** The hash of the arguments that may run. */
  get argumentsSha256(): string | undefined {
    const hash = this.error["arguments_sha256"];
    return typeof hash === "string" ? hash : undefined;
  }
}
/** Approved with edits, and called again with exactly those: that call runs them, not this. */
export class CalledAgain extends Conflict {
  override name = "CalledAgain";
  get calledAgainAs(): string | undefined {
    const id = this.error["called_again_as"];
    return typeof id === "string" ? id : undefined;
  }
}
export class NotClaimed extends Conflict {
  override name = "NotClaimed";
}
export class OutcomeAlreadyReported extends Conflict {
  override name = "OutcomeAlreadyReported";
}

export class NotCanonical extends CountersignClientError {
  override name = "NotCanonical";
  constructor(
    readonly path: string,
    why: string,
  ) {
    super(`${path || "(value)"}: ${why}`);
  }
}

export class SignatureError extends CountersignClientError {
  override name = "SignatureError";
}

/** Valid, but this Idempotency-Key was delivered before: answer 2xx and do nothing. */
export class DuplicateDelivery extends SignatureError {
  override name = "DuplicateDelivery";
}

/** An echoed field of the decision differs from the request still pending. */
export class BindingMismatch extends CountersignClientError {
  override name = "BindingMismatch";
  constructor(
    readonly field: string,
    readonly expected: unknown,
    readonly got: unknown,
  ) {
    super(
      `decision refused: ${field} is ${JSON.stringify(got)}, ` +
        `the pending request has ${JSON.stringify(expected)}`,
    );
  }
}

const BY_STATUS: Record<number, typeof ApiError> = {
  400: BadRequest,
  401: Unauthorized,
  404: NotFound,
  409: Conflict,
  413: PayloadTooLarge,
  415: UnsupportedMediaType,
  422: InvalidRequest,
};

const CONFLICTS: Record<string, typeof ApiError> = {
  already_claimed: AlreadyClaimed,
  not_approved: NotApproved,
  decision_lapsed: DecisionLapsed,
  not_these_arguments: NotTheseArguments,
  called_again: CalledAgain,
  not_claimed: NotClaimed,
  outcome_already_reported: OutcomeAlreadyReported,
};

/** The error for an answer of `status` with `body` (the parsed JSON, or the text). */
export function fromResponse(status: number, body: unknown): ApiError {
  const error =
    body && typeof body === "object" && "error" in body && body.error && typeof body.error === "object"
      ? (body.error as Record<string, unknown>)
      : {};
  const code = typeof error["code"] === "string" ? error["code"] : "error";
  const message =
    typeof error["message"] === "string" ? error["message"] : typeof body === "string" ? body : "";
  const fields = Array.isArray(error["fields"]) ? (error["fields"] as FieldProblem[]) : [];
  const cls = (status === 409 ? CONFLICTS[code] : undefined) ?? BY_STATUS[status] ?? ApiError;
  return new cls(status, code, message, fields, error);
}
