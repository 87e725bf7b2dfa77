"""The Slack app manifest is valid and grants what the bot needs.

Schema validation uses Slack's published manifest JSON Schema, which lives in
the developers' shared folder next to the repo rather than in it (it is
Slack's file, under its own licence). Where that folder is absent, as on CI,
the schema test skips; the checks that need no schema still run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
MANIFEST_PATH = REPO_ROOT / "manifest.yml"
SCHEMA_PATH = REPO_ROOT.parent / "shared" / "slack" / "manifest.schema.1.0.0.json"

REQUIRED_BOT_SCOPES = {"chat:write", "users:read", "users:read.email", "usergroups:read"}


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    """The parsed manifest.yml."""
    loaded = yaml.safe_load(MANIFEST_PATH.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict), "manifest.yml must be a YAML mapping"
    return loaded


def test_manifest_matches_slack_schema(manifest: dict[str, Any]) -> None:
    """Every field is one Slack's manifest schema allows, with a valid value."""
    if not SCHEMA_PATH.is_file():
        pytest.skip(
            f"Slack manifest schema not found at {SCHEMA_PATH}: the shared folder "
            "exists only on the developers' machines, so schema validation is skipped here"
        )
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    errors = sorted(validator_class(schema).iter_errors(manifest), key=lambda e: list(e.path))
    # All errors at once, each with its location, rather than only the first.
    assert not errors, "manifest.yml does not match Slack's schema:\n" + "\n".join(
        f"  {'/'.join(map(str, error.path)) or '<root>'}: {error.message}" for error in errors
    )


def test_background_color_is_a_hex_colour(manifest: dict[str, Any]) -> None:
    """Slack rejects a non-hex colour.

    Checked by hand because the schema states this rule under a non-standard
    ``regex`` keyword, which JSON Schema validators ignore.
    """
    colour = manifest["display_information"]["background_color"]
    assert re.fullmatch(r"#(?:[0-9a-fA-F]{3}){1,2}", colour), colour


def test_bot_scopes_cover_what_the_bot_calls(manifest: dict[str, Any]) -> None:
    """chat.* needs chat:write; user and usergroup lookups need the read scopes."""
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert scopes >= REQUIRED_BOT_SCOPES, f"missing: {sorted(REQUIRED_BOT_SCOPES - scopes)}"


def test_slack_posts_to_bolts_events_path(manifest: dict[str, Any]) -> None:
    """Bolt serves interactivity, events and commands on /slack/events."""
    settings = manifest["settings"]
    assert settings["interactivity"]["is_enabled"] is True
    assert settings["interactivity"]["request_url"].endswith("/slack/events")
    for url in [settings.get("event_subscriptions", {}).get("request_url")] + [
        command["url"] for command in manifest["features"].get("slash_commands", [])
    ]:
        assert url is None or url.endswith("/slack/events"), url
