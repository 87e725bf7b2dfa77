"""The gateway's file (``gateway.yml``): where Countersign is, whose calls these are, and the
upstream MCP servers it fronts, each with the globs of its gated tools.

Read once at start; every problem is named by its key (``upstreams.files.command: …``), and a
key the gateway does not know is an error too — a misspelt ``gate`` must not leave every tool
ungated.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Self

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

__all__ = [
    "ApprovalSettings",
    "ConfigError",
    "CountersignSettings",
    "GatewayConfig",
    "HttpSettings",
    "Requester",
    "Upstream",
    "load",
]

# the wire contract's body limit is 64 KiB: the arguments leave room for the rest of the request
MAX_ARGUMENT_BYTES = 56 * 1024
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
Glob = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class ConfigError(Exception):
    """The file cannot run the gateway: ``problems`` names each key that is wrong."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CountersignSettings(_Strict):
    url: str
    token_env: EnvName = "COUNTERSIGN_AGENT_TOKEN"  # noqa: S105 - a variable's name

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        if not re.match(r"^https?://[^/\s]+", url):
            raise ValueError("must be an http:// or https:// URL")
        return url.rstrip("/")


class Requester(_Strict):
    """Whose calls these are: they can never approve them themselves."""

    slack_user_id: str | None = None
    email: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _someone(self) -> Self:
        if not (self.slack_user_id or self.email):
            raise ValueError("needs slack_user_id or email (four eyes need to know who asks)")
        return self


class Upstream(_Strict):
    """One upstream MCP server: a command on stdio, or a Streamable HTTP URL."""

    command: list[Annotated[str, StringConstraints(min_length=1)]] | None = Field(
        default=None, min_length=1
    )
    env: dict[str, str] = Field(default_factory=dict)  # added to a safe default environment
    cwd: str | None = None
    url: str | None = None
    # HTTP headers for the upstream, each value read from the named environment variable (a
    # token is never written in the file)
    headers_env: dict[str, EnvName] = Field(default_factory=dict)
    gate: list[Glob] = Field(default_factory=lambda: ["*"])  # default: every tool
    prefix: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]*$", max_length=64)] = ""

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if (self.command is None) == (self.url is None):
            raise ValueError("needs exactly one of command (stdio) or url (Streamable HTTP)")
        if self.url is not None and not re.match(r"^https?://[^/\s]+", self.url):
            raise ValueError("url must be an http:// or https:// URL")
        if self.command is None and (self.env or self.cwd):
            raise ValueError("env and cwd are for a command upstream")
        if self.url is None and self.headers_env:
            raise ValueError("headers_env is for a url upstream")
        return self


class HttpSettings(_Strict):
    """``--http``: who may talk to the gateway. Browsers send ``Origin``; one not listed is
    refused (403), so a web page cannot drive the gateway (DNS rebinding)."""

    allowed_origins: list[str] = Field(default_factory=list)
    # Host headers beside loopback's and the bound address (a name the gateway is reached by)
    allowed_hosts: list[str] = Field(default_factory=list)
    # clients must send ``Authorization: Bearer <the variable's value>``
    token_env: EnvName | None = None


class ApprovalSettings(_Strict):
    """How gated calls are asked for and waited on."""

    expires_in: int | None = Field(default=None, ge=1)  # sent as the approval's expires_in
    wait: float | None = Field(default=None, gt=0)  # at most this long; default: until expiry
    progress_every: float = Field(default=10.0, gt=0, le=300)  # seconds between progress
    max_argument_bytes: int = Field(default=MAX_ARGUMENT_BYTES, ge=1, le=MAX_ARGUMENT_BYTES)
    # the session_id of every call, pinned: a gateway restarted with it finds the approvals it
    # left waiting (default: the MCP session's, or one made per stdio process)
    session_id: Annotated[str, StringConstraints(min_length=1, max_length=150)] | None = None
    agent_name: Annotated[str, StringConstraints(max_length=100)] = "mcp-gateway"


class GatewayConfig(_Strict):
    countersign: CountersignSettings
    requester: Requester
    upstreams: dict[
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+$", max_length=64)], Upstream
    ] = Field(min_length=1)
    http: HttpSettings = Field(default_factory=HttpSettings)
    approvals: ApprovalSettings = Field(default_factory=ApprovalSettings)

    def token(self, env: Mapping[str, str]) -> str:
        """The agent's bearer token; ConfigError naming the variable when it is not set."""
        token = env.get(self.countersign.token_env, "").strip()
        if not token:
            raise ConfigError([f"countersign.token_env: {self.countersign.token_env} is not set"])
        return token


def load(path: str | Path, env: Mapping[str, str] | None = None) -> GatewayConfig:
    """The file at ``path``, checked; ConfigError naming every problem at once."""
    env = os.environ if env is None else env
    try:
        raw: Any = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([f"{path}: {exc.strerror or exc}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not YAML ({exc})"]) from None
    if not isinstance(raw, dict):
        raise ConfigError([f"{path}: must be a mapping with countersign, requester, upstreams"])
    try:
        config = GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError([_problem(error) for error in exc.errors()]) from None
    problems = []
    for name, upstream in config.upstreams.items():
        for header, variable in upstream.headers_env.items():
            if not env.get(variable):
                problems.append(f"upstreams.{name}.headers_env.{header}: {variable} is not set")
    if config.http.token_env and not env.get(config.http.token_env):
        problems.append(f"http.token_env: {config.http.token_env} is not set")
    if problems:
        raise ConfigError(problems)
    return config


def _problem(error: Mapping[str, Any]) -> str:
    where = ".".join(str(part) for part in error.get("loc", ())) or "(file)"
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{where}: {message}"
