"""The policy: what the file says, what a call must carry to be judged, where it comes from.

    schema          the file's model (Policy, Rule, Role, ...) and the first-match rule search
    conditions      a rule's ``when:`` turned into the matcher's types
    contract        the argument contract: fields the rules compare, a tool's JSON Schema
    turn_rules      the ``turns:`` section, turned into the pure guards' types
    callback_hosts  where an agent's callbacks may go
    source          the YAML file read with file/line/key problems, reloaded while in force

Pure but for :mod:`~approvals.policy.source`, which reads the file. Every public name is here,
so callers write ``policy.Policy``, ``policy.load_file``.
"""

from approvals.policy.callback_hosts import callback_allowed
from approvals.policy.conditions import parse_condition
from approvals.policy.contract import ArgumentProblem, Requirement
from approvals.policy.schema import (
    AgentPolicy,
    Expiry,
    GrantPolicy,
    MatchedRule,
    OnCall,
    Owner,
    Policy,
    Role,
    Rule,
    SlackSettings,
    Step,
    ToolContract,
    resolve_again_after,
)
from approvals.policy.source import PolicyFile, PolicySource, load_file
from approvals.policy.turn_rules import (
    WEEKDAYS,
    GuardLimit,
    PerLeadPolicy,
    StageRange,
    ToolGuardPolicy,
    TurnPolicy,
    WindowPolicy,
)

__all__ = [
    "WEEKDAYS",
    "AgentPolicy",
    "ArgumentProblem",
    "Expiry",
    "GrantPolicy",
    "GuardLimit",
    "MatchedRule",
    "OnCall",
    "Owner",
    "PerLeadPolicy",
    "Policy",
    "PolicyFile",
    "PolicySource",
    "Requirement",
    "Role",
    "Rule",
    "SlackSettings",
    "StageRange",
    "Step",
    "ToolContract",
    "ToolGuardPolicy",
    "TurnPolicy",
    "WindowPolicy",
    "callback_allowed",
    "load_file",
    "parse_condition",
    "resolve_again_after",
]
