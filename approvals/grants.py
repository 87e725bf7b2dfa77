"""Standing grants (docs/grants.md): the pure rules.

A reviewer approving a call whose rule allows ``grants:`` may also allow more calls like it, for
a while and a number of uses. A grant is a way to say yes without a click, so each use must be
as safe as one: every condition below that a later call does not meet means no match, and the
call gets a card as usual (never a yes by default):

* the same agent; the same session for a ``session`` grant; the same tool name;
* exactly the arguments the grant names (one constraint per argument of the granted call: an
  argument added or left out is no match), each within its constraint: ``exactly`` the granted
  value (compared as RFC 8785 JSON, so ``5`` is not ``"5"`` and a nested change is a change),
  ``any`` value, or a finite number ``at_most`` the granted one (a string, a boolean, NaN or
  an object never is);
* the policy in force routes the call to the grant's rule, with the requirement it had when
  granted (:func:`requirement_sha256`: a reload changing its tool, conditions, roles, quorum
  or a ceiling voids it);
* uses left, not expired, not revoked: checked here and again by the store, which counts the
  use with a compare-and-set so that concurrent calls never use it more often than it allows;
* the granter still holds the authority now (the service asks the directory, as for a click).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import get_args

from pydantic import JsonValue

from approvals import hashing, models, policy

__all__ = [
    "ARGUMENT_FIELD",
    "MAX_ARGUMENTS",
    "Problem",
    "constraints",
    "grant_for",
    "is_number",
    "mismatch",
    "new_grant_id",
    "read_terms",
    "requirement_sha256",
    "satisfies",
]

# The most arguments a grant can constrain: the form shows one menu per argument, and a Slack
# modal holds at most 100 blocks. A call with more gets no Approve & allow more button.
MAX_ARGUMENTS = 40
ARGUMENT_FIELD = "argument:"  # + the argument's name: the form's block of its constraint


def new_grant_id() -> str:
    return "grt_" + secrets.token_hex(12)


@dataclass(frozen=True)
class Problem:
    """Why a grant's terms cannot be taken, at the form's block ``field`` (``scope``,
    ``seconds``, ``uses``, ``argument:<name>``). ``forged``: no form of ours offers this (a
    value past the policy's bounds, a constraint for an argument it did not show)."""

    field: str
    message: str
    forged: bool = True


def is_number(value: object) -> bool:
    """A JSON number that can be compared: not a boolean, finite."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def requirement_sha256(current: policy.Policy, rule: policy.Rule) -> str:
    """What a grant stays bound to: the rule's tool glob, conditions, roles and quorum, and the
    ceilings of those roles as the policy in force defines them. Who holds a role is not part
    of it (the granter's authority is checked again at every use)."""
    ceilings = {
        name: dict(current.roles[name].ceiling) if name in current.roles else None
        for name in rule.roles
    }
    bound = {
        "tool": rule.tool,
        "when": rule.when,
        "roles": list(rule.roles),
        "approvals": rule.approvals,
        "ceilings": ceilings,
    }
    return hashing.sha256_hex(hashing.canonical_json(bound))


def read_terms(
    raw: Mapping[str, object], limits: models.GrantLimits, arguments: Mapping[str, JsonValue]
) -> models.GrantTerms | list[Problem]:
    """The terms a grant form submitted (``scope``, ``seconds``, ``uses``, and ``kinds``: a
    constraint kind per argument), checked against the rule's limits and the granted call's
    arguments; else every problem found. An argument the form sent no kind for is held to
    ``exactly`` (the default)."""
    found: list[Problem] = []
    scope = raw.get("scope")
    if scope not in limits.scopes:
        found.append(Problem("scope", f"choose one of: {', '.join(limits.scopes)}"))
    seconds = raw.get("seconds")
    if not _whole(seconds) or not 60 <= seconds <= limits.max_seconds:  # type: ignore[operator]
        found.append(
            Problem("seconds", f"a whole number of seconds from 60 to {limits.max_seconds}", False)
        )
    uses = raw.get("uses")
    if not _whole(uses) or not 1 <= uses <= limits.max_uses:  # type: ignore[operator]
        found.append(Problem("uses", f"a whole number from 1 to {limits.max_uses}", False))
    if len(arguments) > MAX_ARGUMENTS:
        found.append(
            Problem("scope", f"a call with more than {MAX_ARGUMENTS} arguments cannot be granted")
        )
    kinds_raw = raw.get("kinds") or {}
    kinds: dict[str, models.ConstraintKind] = {}
    if not isinstance(kinds_raw, Mapping):
        found.append(Problem("scope", "the constraints are not a set of choices"))
        kinds_raw = {}
    for name, kind in kinds_raw.items():
        at = ARGUMENT_FIELD + str(name)
        if name not in arguments:
            found.append(Problem(at, "the granted call has no such argument"))
        elif kind not in get_args(models.ConstraintKind):
            found.append(Problem(at, "choose exactly, any or at most"))
        elif kind == "at_most" and not is_number(arguments[name]):
            found.append(Problem(at, "at most applies to numbers only"))
        else:
            kinds[name] = kind
    if found:
        return found
    assert isinstance(seconds, int)
    assert isinstance(uses, int)
    assert scope == "session" or scope == "agent"
    every = {name: kinds.get(name, "exactly") for name in arguments}
    return models.GrantTerms(scope=scope, seconds=seconds, uses=uses, kinds=every)


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def constraints(
    terms: models.GrantTerms, arguments: Mapping[str, JsonValue]
) -> dict[str, models.GrantConstraint]:
    """One constraint per argument of the granted call, its value that call's."""
    return {
        name: models.GrantConstraint(
            kind=terms.kinds.get(name, "exactly"),
            value=None if terms.kinds.get(name) == "any" else value,
        )
        for name, value in arguments.items()
    }


def grant_for(
    approval: models.Approval,
    terms: models.GrantTerms,
    granter: models.Decider,
    requirement: str,
    now: datetime,
) -> models.Grant:
    """The grant ``terms`` make on approving ``approval`` (which must be ``granter``'s to
    approve: the service checks that as for a click)."""
    return models.Grant(
        grant_id=new_grant_id(),
        approval_id=approval.approval_id,
        agent=approval.agent,
        scope=terms.scope,
        session_id=approval.session_id,
        tool_name=approval.tool.name,
        rule=approval.rule,
        requirement_sha256=requirement,
        required=approval.required,
        constraints=constraints(terms, approval.run_arguments),
        max_uses=terms.uses,
        granted_by=granter,
        created_at=now,
        expires_at=now + timedelta(seconds=terms.seconds),
        policy_version=approval.policy_version,
    )


def satisfies(constraint: models.GrantConstraint, value: JsonValue) -> bool:
    """Whether one argument's ``value`` meets its constraint."""
    match constraint.kind:
        case "any":
            return True
        case "exactly":
            try:
                return hashing.canonical_json(value) == hashing.canonical_json(constraint.value)
            except hashing.NotCanonical:
                return False  # what cannot be compared never matches
        case "at_most":
            bound = constraint.value
            return is_number(value) and is_number(bound) and value <= bound  # type: ignore[operator]


def mismatch(grant: models.Grant, call: models.Approval, now: datetime) -> str | None:
    """Why ``call`` (a new submission, routed by the policy in force) cannot use ``grant`` by
    the grant's own terms; None when it can (the granter's authority is the service's to check,
    and the store's compare-and-set has the last word on uses)."""
    state = grant.state(now)
    if state != "live":
        return f"the grant is {state.replace('_', ' ')}"
    if call.agent != grant.agent or call.tool.name != grant.tool_name:
        return "another agent or tool"
    if grant.scope == "session" and call.session_id != grant.session_id:
        return "another session"
    arguments = call.tool.arguments
    if arguments.keys() != grant.constraints.keys():
        return "another set of arguments"
    for name, constraint in grant.constraints.items():
        if not satisfies(constraint, arguments[name]):
            return f"{name} is not within the grant"
    if call.rule != grant.rule or call.required != grant.required:
        return "the policy in force routes it to another rule or requirement"
    return None
