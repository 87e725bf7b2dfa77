"""Configuration: secrets and endpoints from the environment, rules from the YAML policy file.

Every problem is collected and reported at once, each naming the variable, or the file, line and
key; the CLI prints them and exits with status 2 (no traceback).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from approvals import errors, policy

__all__ = ["AgentCredentials", "Config", "Settings", "load", "load_policy"]


class Settings(BaseSettings):
    """Environment variables, named as Slack's own tooling names them."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", frozen=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Only what the caller passes: load() hands in the environment explicitly, so tests
        # and the CLI see exactly the same variables and nothing leaks in from the process.
        return (init_settings,)

    slack_bot_token: SecretStr = Field(min_length=1, validation_alias="SLACK_BOT_TOKEN")
    slack_signing_secret: SecretStr = Field(min_length=1, validation_alias="SLACK_SIGNING_SECRET")
    slack_app_token: SecretStr | None = Field(
        None, min_length=1, validation_alias="SLACK_APP_TOKEN"
    )
    slack_api_url: str = Field(
        "https://slack.com/api/",
        pattern=r"^https?://[^/\s]+(/\S*)?$",
        validation_alias="SLACK_API_URL",
    )
    database_url: str | None = Field(None, validation_alias="DATABASE_URL")
    config_path: Path = Field(Path("countersign.yml"), validation_alias="COUNTERSIGN_CONFIG")
    host: str = Field("0.0.0.0", validation_alias="HOST")  # noqa: S104
    port: int = Field(3000, ge=0, le=65535, validation_alias="PORT")
    data_dir: Path = Field(Path(".countersign"), validation_alias="COUNTERSIGN_DATA_DIR")
    delivery_budget: int = Field(86400, ge=1, validation_alias="COUNTERSIGN_DELIVERY_BUDGET")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        "INFO", validation_alias="LOG_LEVEL"
    )


@dataclass(frozen=True)
class AgentCredentials:
    name: str
    token: str
    callback_secret: str | None


@dataclass(frozen=True)
class Config:
    settings: Settings
    policy: policy.Policy
    agents: tuple[AgentCredentials, ...]


def _node_at(root: yaml.Node | None, loc: tuple[str | int, ...]) -> yaml.Node | None:
    """The deepest YAML node along ``loc`` (for its line number)."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if k.value == str(part)), None)
            if found is None:
                # an extra key: point at the key itself
                key = next((k for k, _ in node.value if k.value == str(part)), None)
                return key or node
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node
            node = node.value[part]
        else:
            return node
    return node


def _where(path: Path, root: yaml.Node | None, loc: tuple[str | int, ...]) -> str:
    node = _node_at(root, loc)
    line = f":{node.start_mark.line + 1}" if node is not None else ""
    key = ".".join(str(p) for p in loc) or "(top level)"
    return f"{path}{line}: {key}"


def _duplicate_keys(path: Path, node: yaml.Node | None, where: str = "") -> Iterator[str]:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = f"{where}.{key.value}" if where else str(key.value)
            if key.value in seen:
                yield f"{path}:{key.start_mark.line + 1}: {name}: duplicate key"
            seen.add(key.value)
            yield from _duplicate_keys(path, value, name)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _duplicate_keys(path, item, f"{where}.{index}")


def load_policy(path: Path) -> tuple[policy.Policy, yaml.Node | None]:
    """Read and validate the policy file; raises PolicyError listing every problem."""
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise errors.PolicyError(
            [f"{path}: cannot read the policy file ({exc.strerror})"]
        ) from None
    except UnicodeDecodeError as exc:
        raise errors.PolicyError([f"{path}: not UTF-8 text (byte {exc.start})"]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f":{mark.line + 1}" if mark else ""
        raise errors.PolicyError([f"{path}{line}: invalid YAML: {exc.problem}"]) from None
    duplicates = list(_duplicate_keys(path, root))
    if duplicates:
        # YAML keeps the last of two equal keys: a second `finance:` would silently replace
        # who holds authority.
        raise errors.PolicyError(duplicates)
    if not isinstance(data, dict):
        raise errors.PolicyError([f"{path}: the policy file must be a mapping of keys"])
    try:
        parsed = policy.Policy.model_validate(data)
    except ValidationError as exc:
        raise errors.PolicyError(
            [f"{_where(path, root, tuple(e['loc']))}: {e['msg']}" for e in exc.errors()]
        ) from None
    problems = [f"{_where(path, root, loc)}: {msg}" for loc, msg in parsed.problems()]
    if problems:
        raise errors.PolicyError(problems)
    return parsed, root


def _agent_credentials(
    path: Path, root: yaml.Node | None, parsed: policy.Policy, env: Mapping[str, str]
) -> tuple[list[AgentCredentials], list[str]]:
    agents, problems = [], []
    seen: dict[str, str] = {}
    for name, agent in parsed.agents.items():
        token = env.get(agent.token_env, "")
        where = _where(path, root, ("agents", name, "token_env"))
        if not token:
            problems.append(f"{agent.token_env}: not set (named by {where})")
        elif len(token) < 16:
            problems.append(f"{agent.token_env}: too short, use at least 16 characters ({where})")
        elif token in seen:
            problems.append(f"{agent.token_env}: the same token as agent {seen[token]!r}")
        seen.setdefault(token, name)
        secret = None
        if agent.callback_secret_env is not None:
            secret = env.get(agent.callback_secret_env, "") or None
            if secret is None:
                where = _where(path, root, ("agents", name, "callback_secret_env"))
                problems.append(f"{agent.callback_secret_env}: not set (named by {where})")
        agents.append(AgentCredentials(name=name, token=token, callback_secret=secret))
    return agents, problems


def load(env: Mapping[str, str] | None = None, **overrides: Any) -> Config:
    """Settings from ``env`` (default: the process environment), then the policy file.

    Raises PolicyError with one message per problem, settings and policy together.
    """
    environ = dict(os.environ if env is None else env)
    problems: list[str] = []
    settings: Settings | None = None
    try:
        settings = Settings(**{**environ, **overrides})
    except ValidationError as exc:
        for e in exc.errors():
            name = str(e["loc"][0]) if e["loc"] else "environment"
            message = {"missing": "not set", "too_short": "must not be empty"}.get(
                e["type"], e["msg"]
            )
            problems.append(f"{name}: {message}")
    # the policy file's problems are reported with the environment's, all in one go
    path = (
        settings.config_path
        if settings
        else Path(environ.get("COUNTERSIGN_CONFIG", "countersign.yml"))
    )
    try:
        parsed, root = load_policy(path)
    except errors.PolicyError as policy_exc:
        raise errors.PolicyError(problems + policy_exc.problems) from None
    agents, agent_problems = _agent_credentials(path, root, parsed, environ)
    problems.extend(agent_problems)
    if problems or settings is None:
        raise errors.PolicyError(problems)
    return Config(settings=settings, policy=parsed, agents=tuple(agents))
