"""Configuration: secrets and endpoints from the environment, rules from the YAML policy file.

Every problem is collected and reported at once, each naming the variable, or the file, line and
key; the CLI prints them and exits with status 2 (no traceback). The settings are built once, at
start, and read from there (changing one needs a restart); only the policy file reloads.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from approvals import errors, outbox, policy

__all__ = [
    "AgentCredentials",
    "CommonSettings",
    "Config",
    "Settings",
    "SignIn",
    "load",
    "load_common",
    "reread",
    "url_problem",
]


class CommonSettings(BaseSettings):
    """What every command reads: where the data lives and how much to log (``migrate``,
    ``redrive`` and ``audit`` need neither Slack nor the policy file)."""

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

    database_url: str | None = Field(None, validation_alias="DATABASE_URL")
    data_dir: Path = Field(Path(".countersign"), validation_alias="COUNTERSIGN_DATA_DIR")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        "INFO", validation_alias="LOG_LEVEL"
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        # the log itself has always taken debug as well as DEBUG: so does the check
        return value.upper() if isinstance(value, str) else value


class Settings(CommonSettings):
    """Environment variables, named as Slack's own tooling names them."""

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
    config_path: Path = Field(Path("countersign.yml"), validation_alias="COUNTERSIGN_CONFIG")
    host: str = Field("0.0.0.0", validation_alias="HOST")  # noqa: S104
    port: int = Field(3000, ge=0, le=65535, validation_alias="PORT")
    delivery_budget: int = Field(86400, ge=1, validation_alias="COUNTERSIGN_DELIVERY_BUDGET")
    # the longest wait between two delivery attempts (the backoff's cap; Retry-After too)
    delivery_max_delay: float = Field(
        600.0, gt=0, le=3600, validation_alias="COUNTERSIGN_DELIVERY_MAX_DELAY"
    )
    # deliveries the relay runs at once (card posts and updates, callbacks, pages): more lets
    # cards keep pace with a burst of submissions, at the cost of the same process's requests
    relay_concurrency: int = Field(
        outbox.CONCURRENCY, ge=1, le=1000, validation_alias="COUNTERSIGN_RELAY_CONCURRENCY"
    )
    # Slack writes per channel (bot/pacing.py), at Slack's published limits: chat.postMessage
    # about one a second, chat.update Tier 3 (50 a minute); the bursts are our own margin
    slack_posts_per_minute: float = Field(
        60.0, gt=0, validation_alias="COUNTERSIGN_SLACK_POSTS_PER_MINUTE"
    )
    slack_post_burst: int = Field(10, ge=1, validation_alias="COUNTERSIGN_SLACK_POST_BURST")
    slack_updates_per_minute: float = Field(
        50.0, gt=0, validation_alias="COUNTERSIGN_SLACK_UPDATES_PER_MINUTE"
    )
    slack_update_burst: int = Field(10, ge=1, validation_alias="COUNTERSIGN_SLACK_UPDATE_BURST")
    # the paging services' base URLs (tests point them at stand-ins; Opsgenie's EU instance is
    # https://api.eu.opsgenie.com): https only, see _paging_url
    pagerduty_url: str = Field(
        "https://events.pagerduty.com", validation_alias="COUNTERSIGN_PAGERDUTY_URL"
    )
    opsgenie_url: str = Field(
        "https://api.opsgenie.com", validation_alias="COUNTERSIGN_OPSGENIE_URL"
    )
    # how often the audit's new events are sealed into its hash chain (approvals/audit_chain.py):
    # the longest an event stays unsealed, in seconds; off the hot path, once across replicas
    audit_seal_interval: float = Field(
        5.0, gt=0, le=3600, validation_alias="COUNTERSIGN_AUDIT_SEAL_INTERVAL"
    )
    # step-up (docs/step-up.md), needed once a rule says verify: passkey: the bot's address as
    # browsers reach it (the passkeys' relying party), and the sign-in provider: Sign in with
    # Slack with the app's client id and secret, or any OpenID Connect issuer
    public_url: str | None = Field(None, validation_alias="COUNTERSIGN_PUBLIC_URL")
    slack_client_id: str | None = Field(None, min_length=1, validation_alias="SLACK_CLIENT_ID")
    slack_client_secret: SecretStr | None = Field(
        None, min_length=1, validation_alias="SLACK_CLIENT_SECRET"
    )
    oidc_issuer: str | None = Field(None, validation_alias="COUNTERSIGN_OIDC_ISSUER")
    oidc_client_id: str | None = Field(
        None, min_length=1, validation_alias="COUNTERSIGN_OIDC_CLIENT_ID"
    )
    oidc_client_secret: SecretStr | None = Field(
        None, min_length=1, validation_alias="COUNTERSIGN_OIDC_CLIENT_SECRET"
    )

    @field_validator("public_url", "oidc_issuer")
    @classmethod
    def _step_up_url(cls, value: str | None) -> str | None:
        # passkeys and sign-in cookies need a secure context: https, or http on this machine
        if value is None:
            return None
        problem = url_problem(value)
        if problem is not None:
            raise PydanticCustomError("step_up_url", problem)
        return value.rstrip("/")

    @property
    def slack_issuer(self) -> str:
        """Sign in with Slack's issuer: https://slack.com, or the origin of SLACK_API_URL where
        that points elsewhere (a Slack stand-in answers OpenID Connect beside its Web API)."""
        if self.slack_api_url.startswith(SLACK_ISSUER + "/"):
            return SLACK_ISSUER
        url = urlsplit(self.slack_api_url)
        return f"{url.scheme}://{url.netloc}"

    def sign_in(self) -> SignIn | None:
        """The step-up sign-in, when it is configured whole (:func:`_step_up_problems` says
        what is missing)."""
        if self.public_url is None:
            return None
        if self.oidc_issuer is not None:
            client_id, secret = self.oidc_client_id, self.oidc_client_secret
            issuer = self.oidc_issuer
        else:
            client_id, secret = self.slack_client_id, self.slack_client_secret
            issuer = self.slack_issuer
        if client_id is None or secret is None:
            return None
        return SignIn(
            public_url=self.public_url,
            issuer=issuer,
            client_id=client_id,
            client_secret=secret.get_secret_value(),
            is_slack=self.oidc_issuer is None,
        )

    @field_validator("pagerduty_url", "opsgenie_url")
    @classmethod
    def _paging_url(cls, value: str) -> str:
        # every request carries the service's key (and who asked, for whom): never in clear
        # text, except to a stand-in on this machine
        problem = url_problem(value)
        if problem is not None:
            raise PydanticCustomError("paging_url", problem)
        return value


SLACK_ISSUER = "https://slack.com"  # Sign in with Slack (OpenID Connect)


@dataclass(frozen=True)
class SignIn:
    """Step-up's relying party and sign-in provider (docs/step-up.md)."""

    public_url: str  # https://countersign.example.com: the passkeys' origin and RP id
    issuer: str  # found through OpenID Connect discovery
    client_id: str
    client_secret: str
    is_slack: bool = True  # Sign in with Slack: who signed in is matched by Slack user id


def _step_up_problems(current: policy.Policy, settings: Settings | None) -> list[str]:
    """What a ``verify: passkey`` rule needs and the environment does not give."""
    if settings is None or not any(rule.verify for rule in current.rules):
        return []
    why = "needed by a rule with verify: passkey"
    problems = []
    if settings.public_url is None:
        problems.append(f"COUNTERSIGN_PUBLIC_URL: not set ({why}: where browsers reach the bot)")
    named: list[tuple[str, object]] = (
        [
            ("COUNTERSIGN_OIDC_CLIENT_ID", settings.oidc_client_id),
            ("COUNTERSIGN_OIDC_CLIENT_SECRET", settings.oidc_client_secret),
        ]
        if settings.oidc_issuer is not None
        else [
            ("SLACK_CLIENT_ID", settings.slack_client_id),
            ("SLACK_CLIENT_SECRET", settings.slack_client_secret),
        ]
    )
    problems += [f"{name}: not set ({why}: signing in)" for name, value in named if value is None]
    return problems


_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})  # as a resolver takes them


def _loopback(host: str) -> bool:
    """Whether ``host`` is this machine: localhost, 127.0.0.0/8 or ::1."""
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_problem(value: str) -> str | None:
    """Why ``value`` cannot be the base URL of a service that secrets travel to (a paging
    service, step-up's page and sign-in provider): https, or http on this machine; None when
    it can."""
    https_only = "must be an https:// URL (http:// only to localhost, 127.0.0.0/8 or ::1)"
    if not value or any(c.isspace() for c in value):
        return https_only
    try:
        url = urlsplit(value)
        _ = url.port  # a port that is not a number (or out of range) raises
    except ValueError:
        return https_only
    if not url.hostname:
        return https_only
    if url.query or url.fragment or value.endswith(("?", "#")):
        return "must be a base URL, without a query or a fragment"
    if url.scheme == "https" or (url.scheme == "http" and _loopback(url.hostname)):
        return None
    return https_only


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
    # the paging services' keys, by the name of the variable the policy reads each from
    page_secrets: Mapping[str, str] = field(default_factory=dict)


S = TypeVar("S", bound=CommonSettings)


def _settings(cls: type[S], environ: Mapping[str, str]) -> tuple[S | None, list[str]]:
    values: dict[str, Any] = dict(environ)  # every variable; the model picks its own
    try:
        return cls(**values), []
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            name = str(e["loc"][0]) if e["loc"] else "environment"
            message = {"missing": "not set", "too_short": "must not be empty"}.get(
                e["type"], e["msg"]
            )
            problems.append(f"{name}: {message}")
        return None, problems


def _environ(env: Mapping[str, str] | None) -> dict[str, str]:
    return dict(os.environ if env is None else env)


def load_common(env: Mapping[str, str] | None = None) -> CommonSettings:
    """The settings every command needs, from ``env`` (default: the process environment).

    Raises SettingsError with one message per problem."""
    settings, problems = _settings(CommonSettings, _environ(env))
    if settings is None:
        raise errors.SettingsError(problems)
    return settings


def _agent_credentials(
    loaded: policy.PolicyFile, env: Mapping[str, str]
) -> tuple[tuple[AgentCredentials, ...], list[str]]:
    agents, problems = [], []
    seen: dict[str, str] = {}
    for name, agent in loaded.policy.agents.items():
        token = env.get(agent.token_env, "")
        where = loaded.where(("agents", name, "token_env"))
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
                where = loaded.where(("agents", name, "callback_secret_env"))
                problems.append(f"{agent.callback_secret_env}: not set (named by {where})")
        agents.append(AgentCredentials(name=name, token=token, callback_secret=secret))
    return tuple(agents), problems


PAGERDUTY_KEY_LENGTH = 32  # an Events API v2 integration (routing) key


def _page_credentials(
    loaded: policy.PolicyFile, env: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The keys of the paging services under ``oncall``, each from the variable it names."""
    oncall = loaded.policy.oncall
    if oncall is None:
        return {}, []
    named: list[tuple[str, tuple[str, ...]]] = []
    if oncall.pagerduty is not None:
        named.append((oncall.pagerduty.routing_key_env, ("oncall", "pagerduty", "routing_key_env")))
    if oncall.opsgenie is not None:
        named.append((oncall.opsgenie.api_key_env, ("oncall", "opsgenie", "api_key_env")))
    secrets, problems = {}, []
    for name, loc in named:
        value = env.get(name, "").strip()
        where = loaded.where(loc)
        if not value:
            problems.append(f"{name}: not set (named by {where})")
        elif loc[1] == "pagerduty" and len(value) != PAGERDUTY_KEY_LENGTH:
            problems.append(
                f"{name}: a PagerDuty routing key has {PAGERDUTY_KEY_LENGTH} characters: use the "
                f"Integration Key of an Events API v2 integration ({where})"
            )
        else:
            secrets[name] = value
    return secrets, problems


def load(env: Mapping[str, str] | None = None) -> Config:
    """Settings from ``env`` (default: the process environment), then the policy file and the
    credentials of the agents it names.

    Raises SettingsError or PolicyError with one message per problem, or a ConfigError when
    both the environment and the file have some (the environment's first).
    """
    environ = _environ(env)
    settings, problems = _settings(Settings, environ)
    # the policy file's problems are reported with the environment's, all in one go
    path = (
        settings.config_path
        if settings
        else Path(environ.get("COUNTERSIGN_CONFIG", "countersign.yml"))
    )
    try:
        loaded = policy.load_file(path)
    except errors.PolicyError as exc:
        raise (errors.ConfigError(problems + exc.problems) if problems else exc) from None
    agents, agent_problems = _agent_credentials(loaded, environ)
    problems.extend(agent_problems)
    page_secrets, page_problems = _page_credentials(loaded, environ)
    problems.extend(page_problems)
    problems.extend(_step_up_problems(loaded.policy, settings))
    if problems or settings is None:
        raise errors.SettingsError(problems)
    return Config(settings=settings, policy=loaded.policy, agents=agents, page_secrets=page_secrets)


def reread(settings: Settings, env: Mapping[str, str], path: Path) -> Config:
    """The policy file at ``path`` again, with the settings already in force: what a reload
    reads. Raises PolicyError, or SettingsError when an agent's credentials (or a paging
    service's key) are not set."""
    loaded = policy.load_file(path)
    agents, problems = _agent_credentials(loaded, env)
    page_secrets, page_problems = _page_credentials(loaded, env)
    problems.extend(page_problems)
    problems.extend(_step_up_problems(loaded.policy, settings))
    if problems:
        raise errors.SettingsError(problems)
    return Config(settings=settings, policy=loaded.policy, agents=agents, page_secrets=page_secrets)
