"""Step-up's set-up and record, without a browser (tests/browser/test_step_up.py has the page):
what a ``verify: passkey`` rule needs from the environment and the policy, the operator's
``countersign passkeys reset``, and passkeys in the sealed audit chain."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from approvals import errors, policy
from approvals.passkey_store import Passkey
from bot import config
from bot.sandbox.sign_in_standin import CLIENT_ID, CLIENT_SECRET
from tests.support import harness as support
from tests.support.cli import run_cli
from tests.support.harness import FINANCE, Harness

PASSKEY_RULE = {"tool": "transfer_money", "require": "finance", "verify": "passkey"}


def _policy_with(tmp_path: Path, *rules: dict[str, Any]) -> Path:
    data = support.test_policy(8088).model_dump(mode="json", by_alias=True, exclude_none=True)
    data["rules"][:0] = list(rules)
    path = tmp_path / "countersign.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), "utf-8")
    return path


def _env(path: Path, **extra: str) -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": support.BOT_TOKEN,
        "SLACK_SIGNING_SECRET": support.SIGNING_SECRET,
        "COUNTERSIGN_CONFIG": str(path),
        "SALES_BOT_TOKEN": support.AGENT_TOKEN,
        "SALES_BOT_SIGNING": support.CALLBACK_SECRET,
        "OPS_BOT_TOKEN": support.OTHER_AGENT_TOKEN,
        **extra,
    }


def test_a_passkey_rule_names_what_it_needs(tmp_path: Path) -> None:
    path = _policy_with(tmp_path, PASSKEY_RULE)
    with pytest.raises(errors.SettingsError) as refused:
        config.load(_env(path))
    assert [p.split(":")[0] for p in refused.value.problems] == [
        "COUNTERSIGN_PUBLIC_URL",
        "SLACK_CLIENT_ID",
        "SLACK_CLIENT_SECRET",
    ]
    assert all("verify: passkey" in p for p in refused.value.problems)
    # another provider: its own three variables
    with pytest.raises(errors.SettingsError) as refused:
        config.load(
            _env(
                path,
                COUNTERSIGN_PUBLIC_URL="https://countersign.example.com",
                COUNTERSIGN_OIDC_ISSUER="https://login.example.com",
            )
        )
    assert [p.split(":")[0] for p in refused.value.problems] == [
        "COUNTERSIGN_OIDC_CLIENT_ID",
        "COUNTERSIGN_OIDC_CLIENT_SECRET",
    ]
    # plain http only on this machine: a passkey needs a secure context
    with pytest.raises(errors.SettingsError) as refused:
        config.load(_env(path, COUNTERSIGN_PUBLIC_URL="http://countersign.example.com"))
    assert refused.value.problems[0].startswith("COUNTERSIGN_PUBLIC_URL: must be an https://")
    whole = config.load(
        _env(
            path,
            COUNTERSIGN_PUBLIC_URL="https://countersign.example.com/",
            SLACK_CLIENT_ID="1.2",
            SLACK_CLIENT_SECRET="s3cret",
        )
    )
    sign_in = whole.settings.sign_in()
    assert sign_in is not None
    assert (sign_in.public_url, sign_in.issuer, sign_in.is_slack) == (
        "https://countersign.example.com",
        "https://slack.com",
        True,
    )
    # without a passkey rule nothing of it is needed
    assert config.load(_env(_policy_with(tmp_path))).settings.sign_in() is None


@pytest.mark.parametrize(
    ("extra", "key", "says"),
    [
        ({"grants": {"max_seconds": 60, "max_uses": 2}}, "grants", "allows no grants"),
        ({"decide": "approve"}, "verify", "approves by itself"),
    ],
)
def test_a_passkey_rule_takes_no_grant_and_never_decides_alone(
    tmp_path: Path, extra: dict[str, Any], key: str, says: str
) -> None:
    rule = {**PASSKEY_RULE, **extra}
    if "decide" in extra:
        del rule["require"]
    with pytest.raises(errors.PolicyError) as refused:
        policy.load_file(_policy_with(tmp_path, rule))
    [problem] = [p for p in refused.value.problems if f"rules.0.{key}" in p]
    assert says in problem


async def test_passkeys_reset_is_audited_and_sealed(harness: Harness) -> None:
    assert harness.store is not None
    keys = harness.store.passkeys
    now = datetime.now(UTC)
    for n in (1, 2):
        key = Passkey(
            credential_id=f"cred-{n}",
            slack_user_id=FINANCE[0].id,
            user_handle="handle",
            public_key=b"\xa5\x01\x02",
            sign_count=0,
            created_at=now,
        )
        assert await keys.add_passkey(key, first=n == 1)
    assert not await keys.add_passkey(key, first=False)  # one credential, registered once
    # a first passkey of someone who has one by now (two first registrations at once): refused
    assert not await keys.add_passkey(key.model_copy(update={"credential_id": "late"}), first=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLACK_", "DATABASE_URL", "LOG_LEVEL"))
    }
    env["DATABASE_URL"] = harness.database_url
    reset = await run_cli("passkeys", "reset", FINANCE[0].id, env=env)
    assert reset.returncode == 0, reset.stderr
    assert reset.stdout.strip() == f"2 passkeys of {FINANCE[0].id} removed (recorded in the audit)"
    assert await keys.passkeys_of(FINANCE[0].id) == []
    # registered twice, reset once: in the chain, sealed, and the chain verifies
    await harness.store.audit.seal(datetime.now(UTC), wait=True)
    held, _ = await harness.store.audit.export(now.replace(year=now.year - 1))
    events = [event for event, _ in held if event.kind == "passkey"]
    assert [(e.data["event"], e.approval_id) for e in events] == [
        ("registered", None),
        ("registered", None),
        ("reset", None),
    ]
    assert events[-1].data["data"] == {"by": "cli", "credential_ids": ["cred-1", "cred-2"]}
    assert all(seal is not None for event, seal in held if event.kind == "passkey")
    assert (await harness.store.audit.verify()).ok


async def test_check_finds_the_sign_in_provider(harness: Harness, tmp_path: Path) -> None:
    """``countersign check`` reads the provider's discovery document: Sign in with Slack's
    (here the stand-in's, beside its Web API) answers; an issuer that does not is named."""
    path = _policy_with(tmp_path, PASSKEY_RULE)
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLACK_", "HOST", "DATABASE_URL", "COUNTERSIGN_", "LOG_LEVEL"))
    }
    env = {
        **inherited,
        **_env(path),
        "SLACK_API_URL": harness.standin.base_url,
        "COUNTERSIGN_DATA_DIR": str(tmp_path / "data"),
        "COUNTERSIGN_PUBLIC_URL": "http://localhost:3000",
        "SLACK_CLIENT_ID": CLIENT_ID,
        "SLACK_CLIENT_SECRET": CLIENT_SECRET,
    }
    good = await run_cli("check", env=env)
    assert good.returncode == 0, good.stderr
    assert good.stdout == "configuration OK\n"
    closed = {
        **env,
        "COUNTERSIGN_OIDC_ISSUER": "http://127.0.0.1:9",
        "COUNTERSIGN_OIDC_CLIENT_ID": "c",
        "COUNTERSIGN_OIDC_CLIENT_SECRET": "s",
    }
    bad = await run_cli("check", env=closed)
    assert bad.returncode == 2, bad.stdout
    assert (
        "COUNTERSIGN_OIDC_ISSUER: the sign-in provider http://127.0.0.1:9 cannot be used: "
        "http://127.0.0.1:9/.well-known/openid-configuration could not be read"
    ) in bad.stderr
