/**
 * Countersign's agent-side client: submit a pending tool call, wait for the decision, verify
 * signed callbacks, check that a decision is bound to the request still pending, and claim the
 * one execution an approval allows. The Vercel AI SDK adapter is `@countersign/client/ai-sdk`.
 */
export {
  argumentsSha256,
  assertIJson,
  canonicalJson,
  checkBinding,
  checkEdit,
  type PendingCall,
  sha256Hex,
} from "./binding.js";
export {
  type ClientOptions,
  CountersignClient,
  MAX_WAIT,
  type OutcomeReport,
  type SubmitOptions,
} from "./client.js";
export * from "./errors.js";
export * from "./types.js";
export {
  CallbackVerifier,
  type HeadersLike,
  type ReplayGuard,
  type VerifyOptions,
  verifyCallback,
} from "./verify.js";
export { wireJson } from "./wire.js";
