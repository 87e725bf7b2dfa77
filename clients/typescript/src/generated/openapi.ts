// Generated from docs/openapi.json by `npm run gen:types` (openapi-typescript). Do not edit:
// `npm run check:types` fails when this file and the contract drift apart.

export interface paths {
    "/v1/approvals": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Submit a tool call for a human decision (idempotent on session_id + request_id). */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["ApprovalRequest"];
                };
            };
            responses: {
                /** @description The same ids and the same content: the approval. */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ApprovalResource"];
                    };
                };
                /** @description Created: a card is on its way to the reviewers. */
                201: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ApprovalResource"];
                    };
                };
                /** @description Not JSON, or a key twice in one object (code malformed_json). */
                400: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description No bearer token, or not one of an agent's (code unauthorized). */
                401: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description Already settled, or the ids are bound to other content (never a silent rebind). */
                409: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description The body is over 65536 bytes (code too_large). */
                413: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description The body is not application/json (code unsupported_media_type). */
                415: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description A field is invalid, named in error.fields (code invalid_request, callback_not_allowed). */
                422: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/approvals/{approval_id}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The approval; with wait, long-poll until it is settled. */
        get: {
            parameters: {
                query?: {
                    /** @description Seconds to wait for the settlement. */
                    wait?: number;
                };
                header?: never;
                path: {
                    approval_id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The approval (still pending when wait ran out). */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ApprovalResource"];
                    };
                };
                /** @description No bearer token, or not one of an agent's (code unauthorized). */
                401: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description No approval with that id for this agent (code not_found). */
                404: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description A field is invalid, named in error.fields (code invalid_request, callback_not_allowed). */
                422: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/approvals/{approval_id}/cancel": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** The agent withdraws the request; the card says so. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    approval_id: string;
                };
                cookie?: never;
            };
            requestBody?: {
                content: {
                    "application/json": components["schemas"]["CancelRequest"];
                };
            };
            responses: {
                /** @description Cancelled. */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ApprovalResource"];
                    };
                };
                /** @description Not JSON, or a key twice in one object (code malformed_json). */
                400: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description No bearer token, or not one of an agent's (code unauthorized). */
                401: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description No approval with that id for this agent (code not_found). */
                404: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description Already settled, or the ids are bound to other content (never a silent rebind). */
                409: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description The body is over 65536 bytes (code too_large). */
                413: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description The body is not application/json (code unsupported_media_type). */
                415: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description A field is invalid, named in error.fields (code invalid_request, callback_not_allowed). */
                422: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/approvals/{approval_id}/execution": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Claim the one execution an approved call allows, before running it (within valid_until). The same idempotency_key again gets the same claim back. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    approval_id: string;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["ExecutionClaim"];
                };
            };
            responses: {
                /** @description Claimed: run the call, checking the bound fields. */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ApprovalResource"];
                    };
                };
                /** @description Not JSON, or a key twice in one object (code malformed_json). */
                400: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description No bearer token, or not one of an agent's (code unauthorized). */
                401: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description No approval with that id for this agent (code not_found). */
                404: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description Not executed: already_claimed (error.claim names the claim holding it), not_approved (error.status), decision_lapsed (error.valid_until: ask again) or not_these_arguments (error.arguments_sha256: the hash of what was approved to run; after an edit a claim must name it) or called_again (error.called_again_as: the edit runs as that approval). */
                409: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description The body is over 65536 bytes (code too_large). */
                413: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description The body is not application/json (code unsupported_media_type). */
                415: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description A field is invalid, named in error.fields (code invalid_request, callback_not_allowed). */
                422: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/approvals/{approval_id}/outcome": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Report what happened when the claimed call ran; the card shows it. Once; the same report again is answered as stored. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    approval_id: string;
                };
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["OutcomeReport"];
                };
            };
            responses: {
                /** @description Stored. */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ApprovalResource"];
                    };
                };
                /** @description Not JSON, or a key twice in one object (code malformed_json). */
                400: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description No bearer token, or not one of an agent's (code unauthorized). */
                401: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description No approval with that id for this agent (code not_found). */
                404: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description not_claimed (no claim with that idempotency_key) or outcome_already_reported (another outcome is stored). */
                409: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description The body is over 65536 bytes (code too_large). */
                413: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description The body is not application/json (code unsupported_media_type). */
                415: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description A field is invalid, named in error.fields (code invalid_request, callback_not_allowed). */
                422: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/approvals/{approval_id}/events": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The audit: creation, every click attempt, reminders, escalations, the settlement, the claim to run the call and its outcome. */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path: {
                    approval_id: string;
                };
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The events, oldest first. */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ApprovalEvents"];
                    };
                };
                /** @description No bearer token, or not one of an agent's (code unauthorized). */
                401: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description No approval with that id for this agent (code not_found). */
                404: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/turns": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The verdicts of one session. */
        get: {
            parameters: {
                query: {
                    session_id: string;
                };
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The session's verdicts. */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["TurnHistory"];
                    };
                };
                /** @description No bearer token, or not one of an agent's (code unauthorized). */
                401: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description A field is invalid, named in error.fields (code invalid_request, callback_not_allowed). */
                422: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        /** A lead-facing turn's tool call, for a verdict: allow, refuse, or escalate to an internal reviewer. */
        post: {
            parameters: {
                query?: never;
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody: {
                content: {
                    "application/json": components["schemas"]["TurnRequest"];
                };
            };
            responses: {
                /** @description The verdict (stored for the audit). */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["TurnVerdict"];
                    };
                };
                /** @description Not JSON, or a key twice in one object (code malformed_json). */
                400: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description No bearer token, or not one of an agent's (code unauthorized). */
                401: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description Already settled, or the ids are bound to other content (never a silent rebind). */
                409: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description The body is over 65536 bytes (code too_large). */
                413: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description The body is not application/json (code unsupported_media_type). */
                415: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
                /** @description A field is invalid, named in error.fields (code invalid_request, callback_not_allowed). */
                422: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/grants": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The agent's live standing grants (read only: people make and revoke them, in Slack or with countersign grants). */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description The live grants, newest first. */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["GrantList"];
                    };
                };
                /** @description No bearer token, or not one of an agent's (code unauthorized). */
                401: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": components["schemas"]["ErrorBody"];
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/openapi.json": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** This document. */
        get: {
            parameters: {
                query?: never;
                header?: never;
                path?: never;
                cookie?: never;
            };
            requestBody?: never;
            responses: {
                /** @description OpenAPI 3.1 */
                200: {
                    headers: {
                        [name: string]: unknown;
                    };
                    content: {
                        "application/json": Record<string, never>;
                    };
                };
            };
        };
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /**
         * ApprovalEvents
         * @description ``GET /v1/approvals/{approval_id}/events``, oldest first.
         */
        ApprovalEvents: {
            /** Approval Id */
            approval_id: string;
            /** Events */
            events: (components["schemas"]["CreatedEvent"] | components["schemas"]["AttemptEvent"] | components["schemas"]["TimerEvent"] | components["schemas"]["SettlementEvent"] | components["schemas"]["ExecutionEvent"] | components["schemas"]["OutcomeEvent"])[];
        };
        /**
         * ApprovalRequest
         * @description The body of ``POST /v1/approvals`` (wire contract v1). The agent comes from the token.
         */
        ApprovalRequest: {
            /** Request Id */
            request_id: string;
            /** Session Id */
            session_id: string;
            tool: components["schemas"]["ToolCall"];
            requester: components["schemas"]["Requester"];
            /**
             * Summary
             * @default
             */
            summary?: string;
            /** Context */
            context?: {
                [key: string]: components["schemas"]["JsonValue"];
            };
            /**
             * Callback Url
             * @default null
             */
            callback_url?: string | null;
            /**
             * Expires In
             * @default null
             */
            expires_in?: number | null;
            /**
             * Framework
             * @default generic
             * @enum {string}
             */
            framework?: "generic" | "maf" | "ag-ui" | "langgraph" | "openai-agents" | "claude-code" | "mcp";
        };
        /**
         * ApprovalResource
         * @description The body of every answer about an approval (and of the callback, without ``delivery``).
         */
        ApprovalResource: {
            /** Approval Id */
            approval_id: string;
            status: components["schemas"]["Status"];
            /**
             * Agent
             * @description The agent the bearer token belongs to.
             */
            agent: string;
            /** Request Id */
            request_id: string;
            /** Session Id */
            session_id: string;
            tool: components["schemas"]["ResourceTool"];
            /**
             * Arguments Sha256
             * @description SHA-256 (hex) of tool.arguments in RFC 8785 canonical form.
             */
            arguments_sha256: string;
            requester: components["schemas"]["ResourceRequester"];
            /** Summary */
            summary: string;
            /**
             * Framework
             * @enum {string}
             */
            framework: "generic" | "maf" | "ag-ui" | "langgraph" | "openai-agents" | "claude-code" | "mcp";
            required: components["schemas"]["ResourceRequired"];
            /**
             * Rule
             * @description The policy rule that matched.
             */
            rule: string;
            /**
             * Why
             * @description The conditions that made the rule match.
             */
            why: string;
            /** Decided By */
            decided_by: components["schemas"]["DecidedBy"][];
            /** @description A reviewer's edit of the arguments, null if none: once approved, only edit.arguments may run (tool.arguments and arguments_sha256 stay the requested ones). */
            edit: components["schemas"]["ResourceEdit"] | null;
            /**
             * Edit Of
             * @description A call again with exactly the edited arguments of another approval, approved at once on that edit (docs/edits.md): that approval's id. Null otherwise.
             */
            edit_of: string | null;
            /** @description Approved at once by a standing grant (docs/grants.md): which, and which use of it. Null otherwise. */
            grant: components["schemas"]["ResourceGrantUse"] | null;
            /** @description Approved at once by the policy: a rule that approves by itself (decide: approve), which decided_by (then empty) does not name. Null otherwise. */
            decided_by_policy: components["schemas"]["PolicyDecision"] | null;
            /** Reason */
            reason: string | null;
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /**
             * Expires At
             * Format: date-time
             */
            expires_at: string;
            /** Decided At */
            decided_at: string | null;
            /**
             * Valid Until
             * @description Approved: the last instant the call may be claimed to run (decided_at + the rule's valid_for); null otherwise.
             */
            valid_until: string | null;
            /** @description The claim to run the approved call, once made; null before. */
            execution: components["schemas"]["ResourceExecution"] | null;
            /** Policy Version */
            policy_version: string;
            /**
             * Resume
             * @description The decision in the agent framework's own shape; null while pending.
             */
            resume: {
                [key: string]: components["schemas"]["JsonValue"];
            } | null;
            /** @description The card in Slack: pending (error: why the last try failed), posted (channel, ts) or failed (its post dead-lettered; error says why). */
            card: components["schemas"]["CardState"];
            /** @description The callback to the agent: none (it long-polls), pending, delivered or dead_letter. */
            delivery: components["schemas"]["Delivery"];
        };
        /**
         * AttemptEvent
         * @description A click on the card, counted or not (``outcome`` says why).
         */
        AttemptEvent: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "attempt";
            /**
             * At
             * Format: date-time
             */
            at: string;
            /** Slack User Id */
            slack_user_id: string;
            /** Name */
            name: string | null;
            /**
             * Action
             * @enum {string}
             */
            action: "approve" | "deny";
            outcome: components["schemas"]["AttemptOutcome"];
            /** Detail */
            detail: string;
        };
        /**
         * AttemptOutcome
         * @description Why a click counted or not. Every click is stored with one of these.
         * @enum {string}
         */
        AttemptOutcome: "accepted" | "self" | "no_authority" | "lookup_failed" | "stale" | "expired" | "over_limit" | "outside_organisation" | "guest" | "duplicate" | "vote_dropped" | "edited" | "invalid_edit" | "invalid_grant" | "passkey_asked" | "edited_asking_passkey" | "passkey_refused";
        /** CancelRequest */
        CancelRequest: {
            /**
             * Reason
             * @default null
             */
            reason?: string | null;
        };
        /**
         * CardState
         * @description Where the approval's card stands in Slack, as the resource shows it: ``pending`` until
         *     it is posted (``error`` then says why the last try failed, if one did), ``posted`` (its
         *     ``channel`` and ``ts``), or ``failed`` when its post was dead-lettered (``error`` says why;
         *     ``countersign redrive`` posts it again).
         */
        CardState: {
            /**
             * Status
             * @default pending
             * @enum {string}
             */
            status?: "pending" | "posted" | "failed";
            /**
             * Channel
             * @default null
             */
            channel?: string | null;
            /**
             * Ts
             * @default null
             */
            ts?: string | null;
            /**
             * Error
             * @default null
             */
            error?: string | null;
        };
        /** ClaimHeld */
        ClaimHeld: {
            /** Claim Id */
            claim_id: string;
            /**
             * Claimed At
             * Format: date-time
             */
            claimed_at: string;
        };
        /** CreatedEvent */
        CreatedEvent: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "created";
            /**
             * At
             * Format: date-time
             */
            at: string;
            /** Rule */
            rule: string;
            required: components["schemas"]["Required"];
            /** Policy Version */
            policy_version: string;
        };
        /** DecidedBy */
        DecidedBy: {
            /** Slack User Id */
            slack_user_id: string;
            /** Name */
            name: string | null;
            /**
             * At
             * Format: date-time
             */
            at: string;
            /**
             * Passkey
             * @description On a rule with verify: passkey, the passkey that confirmed this approval (docs/step-up.md); absent otherwise.
             * @default null
             */
            passkey?: components["schemas"]["PasskeyVerified"];
            /**
             * Grant Id
             * @description The standing grant this decision was given by (present on a call a grant approved at once: the person is its granter).
             * @default null
             */
            grant_id?: string;
            /**
             * Arguments Sha256
             * @description The version of the arguments this decision was for (the requested ones' hash, or an edit's); absent on decisions recorded before edits existed.
             * @default null
             */
            arguments_sha256?: string;
        };
        /**
         * Delivery
         * @description State of the callback to the agent; ``none`` when the agent long-polls instead.
         */
        Delivery: {
            /**
             * Status
             * @default none
             * @enum {string}
             */
            status?: "none" | "pending" | "delivered" | "dead_letter";
            /**
             * Attempts
             * @default 0
             */
            attempts?: number;
            /**
             * Last Error
             * @default null
             */
            last_error?: string | null;
            /**
             * Delivered At
             * @default null
             */
            delivered_at?: string | null;
        };
        /** EditedBy */
        EditedBy: {
            /** Slack User Id */
            slack_user_id: string;
            /** Name */
            name: string | null;
        };
        /**
         * ErrorBody
         * @description Every 4xx of the agent API (and the rare logged 500).
         */
        ErrorBody: {
            error: components["schemas"]["Problem"];
        };
        /**
         * EvaluatedCheck
         * @description One guard check the verdict went through.
         */
        EvaluatedCheck: {
            /** Rule */
            rule: string;
            /**
             * Outcome
             * @enum {string}
             */
            outcome: "allow" | "refuse" | "escalate";
            /** Reason Code */
            reason_code: string;
            /** Detail */
            detail: string;
        };
        /**
         * ExecutionClaim
         * @description The body of ``POST /v1/approvals/{id}/execution``: claim the one run an approval allows
         *     (of the arguments whose SHA-256 is ``arguments_sha256``: needed once the call was edited,
         *     checked whenever given).
         */
        ExecutionClaim: {
            /** Idempotency Key */
            idempotency_key: string;
            /**
             * Arguments Sha256
             * @default null
             */
            arguments_sha256?: string | null;
        };
        /**
         * ExecutionEvent
         * @description The claim to run the approved call.
         */
        ExecutionEvent: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "execution";
            /**
             * At
             * Format: date-time
             */
            at: string;
            /** Claim Id */
            claim_id: string;
        };
        /** FieldProblem */
        FieldProblem: {
            /**
             * Field
             * @description The field's path, dot-separated, or (body).
             */
            field: string;
            /** Message */
            message: string;
        };
        /**
         * GrantAnswer
         * @description A standing grant (docs/grants.md): later calls that meet it are approved at once.
         */
        GrantAnswer: {
            /** Grant Id */
            grant_id: string;
            /**
             * Approval Id
             * @description The approval whose approval made the grant.
             */
            approval_id: string;
            /** Agent */
            agent: string;
            /**
             * Scope
             * @enum {string}
             */
            scope: "session" | "agent";
            /**
             * Session Id
             * @description The session a session grant is for; null for agent.
             */
            session_id: string | null;
            /** Tool Name */
            tool_name: string;
            /** Rule */
            rule: string;
            /**
             * Constraints
             * @description One per argument: a call with another set of arguments does not match.
             */
            constraints: {
                [key: string]: components["schemas"]["GrantConstraintAnswer"];
            };
            /** Uses */
            uses: number;
            /** Max Uses */
            max_uses: number;
            granted_by: components["schemas"]["GrantGrantedBy"];
            /**
             * Created At
             * Format: date-time
             */
            created_at: string;
            /**
             * Expires At
             * Format: date-time
             */
            expires_at: string;
            /** Revoked At */
            revoked_at: string | null;
        };
        /** GrantConstraintAnswer */
        GrantConstraintAnswer: {
            /**
             * Kind
             * @enum {string}
             */
            kind: "exactly" | "any" | "at_most";
            /** @description exactly: the value a call must carry; at_most: the largest number; any: null. */
            value: components["schemas"]["JsonValue"];
        };
        /** GrantGrantedBy */
        GrantGrantedBy: {
            /** Slack User Id */
            slack_user_id: string;
            /** Name */
            name: string | null;
        };
        /**
         * GrantList
         * @description ``GET /v1/grants``: the calling agent's live standing grants, newest first.
         */
        GrantList: {
            /** Grants */
            grants: components["schemas"]["GrantAnswer"][];
        };
        /** @description Any JSON value within I-JSON (RFC 7493): integers within ±(2^53 − 1), no number beyond a double's range, strings without NUL or lone surrogates, no key twice in one object. Anything else is a 422 naming the field (400 for a key twice). */
        JsonValue: unknown;
        /**
         * Lead
         * @description The outside party of a lead-facing conversation.
         */
        Lead: {
            /** Id */
            id: string;
            /**
             * Name
             * @default null
             */
            name?: string | null;
            /**
             * Phone
             * @default null
             */
            phone?: string | null;
            /**
             * Email
             * @default null
             */
            email?: string | null;
            /**
             * Slack User Id
             * @default null
             */
            slack_user_id?: string | null;
        };
        /**
         * Operator
         * @description The internal person responsible for the agent or the conversation (an identity like a
         *     requester's: it becomes the requester of the turn's escalation).
         *     Needs slack_user_id or email (not null), or both.
         */
        Operator: {
            /**
             * Slack User Id
             * @default null
             */
            slack_user_id?: string | null;
            /**
             * Email
             * @default null
             */
            email?: string | null;
            /**
             * Name
             * @default null
             */
            name?: string | null;
        } | unknown | unknown;
        /**
         * OutcomeEvent
         * @description What the agent reported after running the call.
         */
        OutcomeEvent: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "outcome";
            /**
             * At
             * Format: date-time
             */
            at: string;
            /** Claim Id */
            claim_id: string;
            /**
             * Status
             * @enum {string}
             */
            status: "ok" | "error";
            /** Detail */
            detail: string;
        };
        /**
         * OutcomeReport
         * @description The body of ``POST /v1/approvals/{id}/outcome``: what happened when the tool ran.
         */
        OutcomeReport: {
            /** Idempotency Key */
            idempotency_key: string;
            /**
             * Status
             * @enum {string}
             */
            status: "ok" | "error";
            /**
             * Detail
             * @default
             */
            detail?: string;
        };
        /** PasskeyVerified */
        PasskeyVerified: {
            /**
             * Credential Id
             * @description The passkey's credential id (base64url).
             */
            credential_id: string;
            /**
             * At
             * Format: date-time
             * @description When the passkey assertion was verified.
             */
            at: string;
        };
        /**
         * PolicyDecision
         * @description A call approved at once by a rule that decides by itself (decide: approve).
         */
        PolicyDecision: {
            /** Rule */
            rule: string;
            /** Policy Version */
            policy_version: string;
        };
        /** Problem */
        Problem: {
            /**
             * Code
             * @description Machine-readable, e.g. invalid_request, conflict, too_large.
             */
            code: string;
            /** Message */
            message: string;
            /** Fields */
            fields: components["schemas"]["FieldProblem"][];
            /**
             * Claim
             * @description already_claimed: the claim that holds the execution.
             * @default null
             */
            claim?: components["schemas"]["ClaimHeld"];
            /**
             * @description not_approved: the approval's status.
             * @default null
             */
            status?: components["schemas"]["Status"];
            /**
             * Valid Until
             * Format: date-time
             * @description decision_lapsed: when the approval stopped being valid.
             * @default null
             */
            valid_until?: string;
            /**
             * Arguments Sha256
             * @description not_these_arguments: the hash of the arguments approved to run.
             * @default null
             */
            arguments_sha256?: string;
            /**
             * Called Again As
             * @description called_again: the approval of the call again that runs the edit.
             * @default null
             */
            called_again_as?: string;
        };
        /**
         * Requester
         * @description Who asked. At least one identity is needed, or four eyes could not be checked.
         *     Needs slack_user_id or email (not null), or both.
         */
        Requester: {
            /**
             * Slack User Id
             * @default null
             */
            slack_user_id?: string | null;
            /**
             * Email
             * @default null
             */
            email?: string | null;
            /**
             * Name
             * @default null
             */
            name?: string | null;
        } | unknown | unknown;
        /** Required */
        Required: {
            /** Role */
            role: string;
            /**
             * Approvals
             * @default 1
             */
            approvals?: number;
            /**
             * Deny Reason
             * @default false
             */
            deny_reason?: boolean;
            /**
             * Any Of
             * @default []
             */
            any_of?: string[];
            /**
             * Verify
             * @default null
             */
            verify?: "passkey" | null;
        };
        /**
         * ResourceEdit
         * @description A reviewer's edit (docs/edits.md): an approval approved with an edit may run only these
         *     arguments.
         */
        ResourceEdit: {
            /**
             * Arguments
             * @description The edited arguments: exactly the RFC 8785 text hashed into edit.arguments_sha256.
             */
            arguments: {
                [key: string]: components["schemas"]["JsonValue"];
            };
            /** Arguments Sha256 */
            arguments_sha256: string;
            /**
             * Patch
             * @description The change as an RFC 6902 JSON Patch against tool.arguments (the requested arguments).
             */
            patch: {
                [key: string]: components["schemas"]["JsonValue"];
            }[];
            by: components["schemas"]["EditedBy"];
            /**
             * At
             * Format: date-time
             */
            at: string;
            /** Note */
            note: string | null;
            /**
             * Called Again As
             * @description The approval of the call again with exactly these arguments (its edit_of names this one), once the agent made it: that one runs them, this one can no longer be claimed. Null before.
             */
            called_again_as: string | null;
        };
        /**
         * ResourceExecution
         * @description The one claim to run an approved call (POST …/execution), and its reported outcome.
         */
        ResourceExecution: {
            /** Claim Id */
            claim_id: string;
            /**
             * Claimed At
             * Format: date-time
             */
            claimed_at: string;
            outcome: components["schemas"]["ResourceOutcome"] | null;
        };
        /**
         * ResourceGrantUse
         * @description On a call approved at once by a standing grant (docs/grants.md): the grant, and which
         *     of its uses this call took, of how many.
         */
        ResourceGrantUse: {
            /** Id */
            id: string;
            /** Use */
            use: number;
            /** Of */
            of: number;
        };
        /** ResourceOutcome */
        ResourceOutcome: {
            /**
             * Status
             * @enum {string}
             */
            status: "ok" | "error";
            /** Detail */
            detail: string;
            /**
             * Reported At
             * Format: date-time
             */
            reported_at: string;
        };
        /**
         * ResourceRequester
         * @description Who asked; only the identities the agent gave are present.
         */
        ResourceRequester: {
            /**
             * Slack User Id
             * @default null
             */
            slack_user_id?: string;
            /**
             * Email
             * @default null
             */
            email?: string;
            /**
             * Name
             * @default null
             */
            name?: string;
        };
        /**
         * ResourceRequired
         * @description What a decision needs: a role (or any of several) and how many approvals.
         */
        ResourceRequired: {
            /** Role */
            role: string;
            /** Approvals */
            approvals: number;
            /**
             * Deny Reason
             * @description Present (true) when a Deny needs a written reason.
             * @default null
             */
            deny_reason?: boolean;
            /**
             * Any Of
             * @description Further roles that may decide as well (present when there are any).
             * @default null
             */
            any_of?: string[];
        };
        /** ResourceTool */
        ResourceTool: {
            /** Name */
            name: string;
            /** Call Id */
            call_id: string;
            /**
             * Arguments
             * @description Exactly the RFC 8785 text that was hashed into arguments_sha256.
             */
            arguments: {
                [key: string]: components["schemas"]["JsonValue"];
            };
        };
        /** SettlementEvent */
        SettlementEvent: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "settlement";
            /**
             * At
             * Format: date-time
             */
            at: string;
            status: components["schemas"]["Status"];
            /** Decided By */
            decided_by: string[];
            /** Reason */
            reason: string | null;
            /** Policy Version */
            policy_version: string;
        };
        /**
         * Status
         * @enum {string}
         */
        Status: "pending" | "approved" | "denied" | "expired" | "cancelled";
        /**
         * TimerEvent
         * @description A reminder or an escalation to on-call that fired.
         */
        TimerEvent: {
            /**
             * @description discriminator enum property added by openapi-typescript
             * @enum {string}
             */
            kind: "timer";
            /**
             * At
             * Format: date-time
             */
            at: string;
            /**
             * Outcome
             * @enum {string}
             */
            outcome: "reminded" | "escalated";
            /**
             * Due At
             * Format: date-time
             */
            due_at: string;
        };
        /** ToolCall */
        ToolCall: {
            /** Name */
            name: string;
            /** Call Id */
            call_id: string;
            /** Arguments */
            arguments?: {
                [key: string]: components["schemas"]["JsonValue"];
            };
        };
        /**
         * TurnHistory
         * @description ``GET /v1/turns?session_id=``: the session's verdicts.
         */
        TurnHistory: {
            /** Session Id */
            session_id: string;
            /** Turns */
            turns: components["schemas"]["TurnVerdict"][];
        };
        /**
         * TurnRequest
         * @description The body of ``POST /v1/turns``: a lead-facing turn's pending tool call and its facts.
         */
        TurnRequest: {
            /** Session Id */
            session_id: string;
            /** Request Id */
            request_id: string;
            /**
             * Channel
             * @enum {string}
             */
            channel: "whatsapp" | "sms" | "webchat" | "email";
            lead: components["schemas"]["Lead"];
            /** @default null */
            operator?: components["schemas"]["Operator"] | null;
            /** Funnel */
            funnel?: {
                [key: string]: components["schemas"]["JsonValue"];
            };
            tool: components["schemas"]["ToolCall"];
            /**
             * Summary
             * @default
             */
            summary?: string;
            /**
             * Callback Url
             * @default null
             */
            callback_url?: string | null;
            /**
             * Expires In
             * @default null
             */
            expires_in?: number | null;
            /**
             * Framework
             * @default generic
             * @enum {string}
             */
            framework?: "generic" | "maf" | "ag-ui" | "langgraph" | "openai-agents" | "claude-code" | "mcp";
        };
        /** TurnTool */
        TurnTool: {
            /** Name */
            name: string;
            /** Call Id */
            call_id: string;
        };
        /**
         * TurnVerdict
         * @description The verdict on a lead-facing turn's tool call (never a question to the lead).
         */
        TurnVerdict: {
            /**
             * Verdict
             * @enum {string}
             */
            verdict: "allow" | "refuse" | "escalate";
            /** Rule */
            rule: string;
            /** Reason Code */
            reason_code: string;
            /** Message */
            message: string;
            /**
             * Approval Id
             * @description Only for escalate: the internal approval that decides.
             * @default null
             */
            approval_id?: string;
            /**
             * Approval Status
             * @description That approval's status, in the answer of POST /v1/turns.
             * @default null
             */
            approval_status?: components["schemas"]["Status"];
            /** Evaluated */
            evaluated: components["schemas"]["EvaluatedCheck"][];
            /** Session Id */
            session_id: string;
            /** Request Id */
            request_id: string;
            /** Channel */
            channel: string;
            /** Lead Id */
            lead_id: string;
            tool: components["schemas"]["TurnTool"];
            /** Inputs Sha256 */
            inputs_sha256: string;
            /** Policy Version */
            policy_version: string;
            /**
             * At
             * Format: date-time
             */
            at: string;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export type operations = Record<string, never>;
