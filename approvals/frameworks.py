"""What Countersign relies on each agent framework to do: one table of traits, so that a
framework's quirk is written down once, beside the others, not tested for by name where it
matters.

    reports_outcomes   the agent can say what happened after the tool ran (Claude Code's
                       permission-prompt protocol tells the permission server nothing
                       afterwards: no outcome can come, so none is waited for or warned about)
    resumes_with_edits the framework continues a paused call with other arguments than it
                       recorded, and the model learns of them (LangGraph's edit decision, whose
                       middleware tells the model; a generic agent's own code). The others
                       would run what they recorded (MAF, OpenAI Agents) or run other input
                       the model never sees (Claude Code's updatedInput; AG-UI, whose resume
                       payload has no standard key for edited arguments): an approval with
                       edits refuses that call, tells the model what was approved instead,
                       and its call again with exactly that is approved at once
                       (approvals.call_again, docs/edits.md)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from approvals import models

__all__ = ["TRAITS", "Traits", "reports_outcomes", "resumes_with_edits"]


@dataclass(frozen=True, kw_only=True)
class Traits:
    """One framework's traits (see the module's docstring)."""

    reports_outcomes: bool = True
    resumes_with_edits: bool = True


TRAITS: Mapping[models.Framework, Traits] = {
    "generic": Traits(),
    "maf": Traits(resumes_with_edits=False),
    "ag-ui": Traits(resumes_with_edits=False),
    "langgraph": Traits(),
    "openai-agents": Traits(resumes_with_edits=False),
    "claude-code": Traits(reports_outcomes=False, resumes_with_edits=False),
    # the gateway runs the approved arguments itself (the edited ones, saying so in the result)
    # and reports the upstream's outcome
    "mcp": Traits(),
}


def reports_outcomes(framework: models.Framework) -> bool:
    """Whether an agent of ``framework`` can report what happened after the tool ran."""
    return TRAITS[framework].reports_outcomes


def resumes_with_edits(framework: models.Framework) -> bool:
    """Whether an agent of ``framework`` can run an approved call with edited arguments."""
    return TRAITS[framework].resumes_with_edits
