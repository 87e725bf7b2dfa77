"""The ``turns:`` section of the policy file: guard rules for lead-facing turns, as data.

Validated here and turned into :mod:`guards.turns`' own small types, so the pure engine never
sees YAML or pydantic.

```yaml
turns:
  stages: [new, contacted, qualified, proposal, negotiation, won, lost]   # in funnel order
  tools:
    send_proposal:
      stages: {from: qualified}            # or a list: [qualified, proposal]
      channels: [whatsapp, email, webchat]
    grant_discount:
      limits:
        - {argument: discount_pct, max: 10, over: escalate, escalate_to: sales-lead}
    issue_refund:
      operator_role: support
      limits: [{argument: amount, max: 5000}]
    book_demo:
      window: {weekdays: [mon, tue, wed, thu, fri], from: "09:00", to: "18:00", tz: Europe/Lisbon}
      per_lead: {max: 2, within: 86400}   # at most 2 allowed per lead a day
```
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import time
from functools import cached_property
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StringConstraints, field_validator

from approvals import identity
from guards import turns

__all__ = [
    "WEEKDAYS",
    "GuardLimit",
    "PerLeadPolicy",
    "StageRange",
    "ToolGuardPolicy",
    "TurnPolicy",
    "WindowPolicy",
]

Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WEEKDAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
Name = Annotated[str, StringConstraints(min_length=1, max_length=100)]


class StageRange(identity.Frozen):
    """``{from: qualified}``: that stage and every later one (``to`` optionally ends it)."""

    # a dump by field name (from_) reads back as well as the file's own spelling (from)
    model_config = ConfigDict(populate_by_name=True)
    from_: Name = Field(alias="from")
    to: Name | None = None


class GuardLimit(identity.Frozen):
    model_config = ConfigDict(allow_inf_nan=False)

    argument: Name
    max: float | None = None
    min: float | None = None
    over: Literal["refuse", "escalate"] = "refuse"
    escalate_to: str | None = None


class WindowPolicy(identity.Frozen):
    model_config = ConfigDict(populate_by_name=True)

    weekdays: tuple[Weekday, ...] = WEEKDAYS
    from_: time = Field(time(0, 0), alias="from")
    to: time = time(23, 59, 59)
    tz: str = "UTC"

    @field_validator("from_", "to", mode="before")
    @classmethod
    def _quoted_local_time(cls, value: object) -> object:
        # YAML 1.1 reads an unquoted 18:00 as the integer 1080 (base 60): refuse, don't guess
        if not isinstance(value, str | time):
            raise ValueError('write times quoted, as "HH:MM" (unquoted YAML reads 18:00 as 1080)')
        if isinstance(value, str) and not re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", value):
            raise ValueError(
                'a local time "HH:MM" or "HH:MM:SS", without offset (tz says the zone)'
            )
        return value

    @field_validator("tz")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value


class PerLeadPolicy(identity.Frozen):
    max: Annotated[int, Field(ge=1)]
    within: Annotated[int, Field(ge=1)]  # seconds


class ToolGuardPolicy(identity.Frozen):
    stages: tuple[Name, ...] | StageRange | None = None
    channels: tuple[identity.LeadChannel, ...] | None = None
    operator_role: str | None = None
    window: WindowPolicy | None = None
    per_lead: PerLeadPolicy | None = None
    limits: tuple[GuardLimit, ...] = ()


class TurnPolicy(identity.Frozen):
    stages: Annotated[tuple[Name, ...], Field(min_length=1)]
    tools: dict[Name, ToolGuardPolicy] = Field(default_factory=dict)

    def problems(self, roles: set[str]) -> list[tuple[tuple[str | int, ...], str]]:
        found: list[tuple[tuple[str | int, ...], str]] = []
        for name, tool in self.tools.items():
            at: tuple[str | int, ...] = ("turns", "tools", name)
            if tool.operator_role is not None and tool.operator_role not in roles:
                problem = f"role {tool.operator_role!r} is not defined"
                found.append(((*at, "operator_role"), problem))
            stages = tool.stages
            named = (
                [stages.from_, *([stages.to] if stages.to else [])]
                if isinstance(stages, StageRange)
                else list(stages or ())
            )
            found.extend(
                ((*at, "stages"), f"stage {s!r} is not in turns.stages")
                for s in named
                if s not in self.stages
            )
            if (
                isinstance(stages, StageRange)
                and stages.to
                and {stages.from_, stages.to} <= set(self.stages)
                and self.stages.index(stages.to) < self.stages.index(stages.from_)
            ):
                found.append(
                    ((*at, "stages"), f"stage {stages.to!r} comes before {stages.from_!r}")
                )
            if tool.window is not None and tool.window.from_ >= tool.window.to:
                found.append(
                    ((*at, "window", "to"), "the window must end after it starts (same day)")
                )
            for i, limit in enumerate(tool.limits):
                where = (*at, "limits", i)
                if limit.max is not None and limit.min is not None and limit.min > limit.max:
                    found.append(((*where, "min"), "min is above max: no value could pass"))
                if limit.max is None and limit.min is None:
                    found.append(((*where, "max"), "a limit needs max or min"))
                if limit.over == "escalate" and limit.escalate_to is None:
                    found.append(((*where, "escalate_to"), "over: escalate needs escalate_to"))
                if limit.escalate_to is not None and limit.escalate_to not in roles:
                    found.append(
                        ((*where, "escalate_to"), f"role {limit.escalate_to!r} is not defined")
                    )
        return found

    def _stages(self, stages: tuple[str, ...] | StageRange | None) -> frozenset[str] | None:
        if stages is None:
            return None
        if isinstance(stages, StageRange):
            start = self.stages.index(stages.from_)
            end = self.stages.index(stages.to) if stages.to else len(self.stages) - 1
            return frozenset(self.stages[start : end + 1])
        return frozenset(stages)

    @cached_property
    def guards(self) -> turns.GuardPolicy:
        """The pure engine's view of this section (call only on a policy without problems)."""
        return turns.GuardPolicy(
            stages=self.stages,
            tools={
                name: turns.ToolGuard(
                    stages=self._stages(tool.stages),
                    channels=frozenset(tool.channels) if tool.channels is not None else None,
                    operator_role=tool.operator_role,
                    window=turns.Window(
                        weekdays=frozenset(WEEKDAYS.index(d) for d in tool.window.weekdays),
                        start=tool.window.from_,
                        end=tool.window.to,
                        tz=tool.window.tz,
                    )
                    if tool.window
                    else None,
                    per_lead=turns.PerLead(max=tool.per_lead.max, within=tool.per_lead.within)
                    if tool.per_lead
                    else None,
                    limits=tuple(
                        turns.Limit(
                            argument=limit.argument,
                            max=limit.max,
                            min=limit.min,
                            over=limit.over,
                            escalate_to=limit.escalate_to,
                        )
                        for limit in tool.limits
                    ),
                )
                for name, tool in self.tools.items()
            },
        )
