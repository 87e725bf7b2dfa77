"""The Slack app manifest is valid, grants what the bot needs, and declares what the bot serves.

Schema validation uses Slack's published manifest JSON Schema, which lives in
the developers' shared folder next to the repo rather than in it (it is
Slack's file, under its own licence). Where that folder is absent, as on CI,
the schema test skips; the checks that need no schema still run.

What must be declared is read from the bolt app itself, never listed here: the
app is built by :func:`bot.slack_app.build_slack_app`, as the bot builds it,
with each registration decorator noting what it was given. Slack only sends
what an app declares, so a listener the manifest does not name never runs in a
real workspace, and a declaration no listener serves is a surface that goes
unanswered; both fail here.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import jsonschema
import pytest
import yaml
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from approvals import db, policy
from approvals.repository import Repository
from approvals.service import ApprovalService
from bot import oidc, slack_app
from bot.slack_directory import SlackDirectory

REPO_ROOT = Path(__file__).resolve().parents[2]
MANIFEST_PATH = REPO_ROOT / "manifest.yml"
SCHEMA_PATH = REPO_ROOT.parent / "shared" / "slack" / "manifest.schema.1.0.0.json"

REQUIRED_BOT_SCOPES = {
    "chat:write",
    "users:read",
    "users:read.email",
    "usergroups:read",
    "channels:read",  # conversations.info on public channels (countersign check, start-up)
    "groups:read",  # conversations.info on private channels
    "channels:history",  # conversations.history: a card posted before a crash, found again
    "groups:history",  # the same in a private reviewer channel
}

BOT_EVENTS = "settings.event_subscriptions.bot_events"
SLASH_COMMANDS = "features.slash_commands"
INTERACTIVITY = "settings.interactivity.is_enabled"
HOME_TAB = "features.app_home.home_tab_enabled"
COMMANDS_SCOPE = "oauth_config.scopes.bot: commands"


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


def test_sign_in_with_slack_is_declared(manifest: dict[str, Any]) -> None:
    """Step-up's Sign in with Slack (docs/step-up.md): the page's redirect URL, where the bot
    serves it, and the OpenID Connect user scopes its ID token needs."""
    assert manifest["oauth_config"]["redirect_urls"] == [
        "https://countersign.example.com" + oidc.CALLBACK_PATH
    ]
    assert set(manifest["oauth_config"]["scopes"]["user"]) == set(oidc.SCOPES.split())


def test_slack_posts_to_bolts_events_path(manifest: dict[str, Any]) -> None:
    """Bolt serves interactivity, events and commands on /slack/events.

    In HTTP mode Slack needs a request URL for each of them; in Socket Mode it
    sends everything over the websocket and ignores any URL that is left in.
    """
    settings, features = manifest["settings"], manifest["features"]
    urls = [
        settings["interactivity"].get("request_url"),
        settings.get("event_subscriptions", {}).get("request_url"),
    ] + [command.get("url") for command in features.get("slash_commands", [])]
    for url in urls:
        if settings["socket_mode_enabled"]:
            assert url is None or url.endswith("/slack/events"), url
        else:
            assert url is not None, "HTTP mode: every surface needs its request URL"
            assert url.endswith("/slack/events"), url


# --- what the bolt app serves ---------------------------------------------------------------


@dataclass
class Served:
    """What the registered listeners answer, in the terms the manifest uses."""

    events: set[str] = field(default_factory=set)
    commands: set[str] = field(default_factory=set)
    # block actions and view submissions both reach the app through interactivity
    interactions: int = 0
    registrations: int = 0


def _literal(constraint: object, decorator: str) -> str:
    """The one name a listener was registered for; a pattern or a dict would leave what
    the manifest must declare open, so this test refuses it until it learns that shape."""
    assert isinstance(constraint, str), (
        f"app.{decorator}({constraint!r}): only a literal name says what the manifest declares"
    )
    return constraint


class _RecordingApp(AsyncApp):
    """bolt's own AsyncApp that also notes what each listener is registered for.

    Only the decorators the bot uses are read. A listener registered through any other
    (``app.shortcut``, ``app.options``, ``app.message``…) is one this record cannot account
    for, and :func:`served_by` fails until the record learns what it needs declared.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.served = Served()

    def event(self, event: Any, *args: Any, **kwargs: Any) -> Any:
        self.served.events.add(_literal(event, "event"))
        self.served.registrations += 1
        return super().event(event, *args, **kwargs)

    def command(self, command: Any, *args: Any, **kwargs: Any) -> Any:
        self.served.commands.add(_literal(command, "command"))
        self.served.registrations += 1
        return super().command(command, *args, **kwargs)

    def action(self, constraints: Any, *args: Any, **kwargs: Any) -> Any:
        self.served.interactions += 1
        self.served.registrations += 1
        return super().action(constraints, *args, **kwargs)

    def view(self, constraints: Any, *args: Any, **kwargs: Any) -> Any:
        self.served.interactions += 1
        self.served.registrations += 1
        return super().view(constraints, *args, **kwargs)


def _no_policy() -> policy.Policy:
    raise AssertionError("registering listeners must not read the policy")


class _NoDatabase:
    """Registering listeners must not touch the store either: every use of it fails."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"registering listeners must not use the database ({name})")


@pytest.fixture
def bolt_app(monkeypatch: pytest.MonkeyPatch) -> _RecordingApp:
    """A fresh bolt app, built exactly as the bot builds it, recording its listeners."""
    monkeypatch.setattr(slack_app, "AsyncApp", _RecordingApp)
    client = AsyncWebClient(token="xoxb-manifest-test")
    store = Repository(cast(db.Database, _NoDatabase()))
    app = slack_app.build_slack_app(
        client=client,
        signing_secret="manifest-test-secret",
        service=ApprovalService(store=store, policy=_no_policy),
        directory=SlackDirectory(client),
    )
    assert isinstance(app, _RecordingApp)
    return app


def served_by(app: _RecordingApp) -> Served:
    # bolt has no public list of its listeners; their number is all this reads from it
    listeners = len(app._async_listeners)
    assert listeners == app.served.registrations, (
        f"{listeners - app.served.registrations} listener(s) registered through a decorator "
        "_RecordingApp does not read: teach it what the manifest must declare for them"
    )
    return app.served


def needed(served: Served) -> set[str]:
    """The manifest entries the listeners need, each named by where it goes."""
    entries = {f"{BOT_EVENTS}: {event}" for event in served.events}
    entries |= {f"{SLASH_COMMANDS}: {command}" for command in served.commands}
    if served.interactions:
        entries.add(INTERACTIVITY)
    if "app_home_opened" in served.events:
        entries.add(HOME_TAB)  # without the tab Slack never opens it, so never sends the event
    if served.commands:
        entries.add(COMMANDS_SCOPE)
    return entries


def declared(manifest: dict[str, Any]) -> set[str]:
    """The manifest entries that make Slack send something, named as in :func:`needed`."""
    features, settings = manifest.get("features", {}), manifest.get("settings", {})
    subscriptions = settings.get("event_subscriptions", {})
    entries = {f"{BOT_EVENTS}: {event}" for event in subscriptions.get("bot_events", [])}
    entries |= {f"{SLASH_COMMANDS}: {c['command']}" for c in features.get("slash_commands", [])}
    if settings.get("interactivity", {}).get("is_enabled"):
        entries.add(INTERACTIVITY)
    if features.get("app_home", {}).get("home_tab_enabled"):
        entries.add(HOME_TAB)
    if "commands" in manifest.get("oauth_config", {}).get("scopes", {}).get("bot", []):
        entries.add(COMMANDS_SCOPE)
    return entries


def test_manifest_declares_every_listener(
    manifest: dict[str, Any], bolt_app: _RecordingApp
) -> None:
    """Whatever the bolt app listens for, Slack is told to send."""
    missing = needed(served_by(bolt_app)) - declared(manifest)
    assert not missing, f"listeners Slack would never reach; add to manifest.yml: {sorted(missing)}"


def test_manifest_declares_nothing_no_listener_serves(
    manifest: dict[str, Any], bolt_app: _RecordingApp
) -> None:
    """Whatever Slack is told to send, a listener answers."""
    unserved = declared(manifest) - needed(served_by(bolt_app))
    assert not unserved, f"declared in manifest.yml, served by no listener: {sorted(unserved)}"


def test_the_bot_serves_its_queue_surfaces(bolt_app: _RecordingApp) -> None:
    """The comparison has something to compare: the App Home, /approvals, the buttons."""
    served = served_by(bolt_app)
    assert served.events >= {"app_home_opened"}
    assert served.commands >= {"/approvals"}
    assert served.interactions >= 2  # the decision buttons and the Deny modal


def _set(manifest: dict[str, Any], path: str, value: object) -> None:
    *parents, key = path.split(".")
    for name in parents:
        manifest = manifest[name]
    manifest[key] = value


@pytest.mark.parametrize(
    ("path", "value", "missing", "unserved"),
    [
        pytest.param(
            BOT_EVENTS,
            [],
            {f"{BOT_EVENTS}: app_home_opened"},
            set(),
            id="event-listener-not-subscribed",
        ),
        pytest.param(
            BOT_EVENTS,
            ["app_home_opened", "reaction_added"],
            set(),
            {f"{BOT_EVENTS}: reaction_added"},
            id="event-subscribed-without-listener",
        ),
        pytest.param(
            SLASH_COMMANDS,
            [],
            {f"{SLASH_COMMANDS}: /approvals"},
            set(),
            id="command-listener-not-declared",
        ),
        pytest.param(HOME_TAB, False, {HOME_TAB}, set(), id="home-tab-off"),
        pytest.param(INTERACTIVITY, False, {INTERACTIVITY}, set(), id="no-interactivity"),
        pytest.param(
            "oauth_config.scopes.bot",
            sorted(REQUIRED_BOT_SCOPES),
            {COMMANDS_SCOPE},
            set(),
            id="no-commands-scope",
        ),
    ],
)
def test_a_manifest_out_of_step_with_the_listeners_is_caught(
    manifest: dict[str, Any],
    bolt_app: _RecordingApp,
    path: str,
    value: object,
    missing: set[str],
    unserved: set[str],
) -> None:
    changed = copy.deepcopy(manifest)
    _set(changed, path, value)
    served = needed(served_by(bolt_app))
    assert (served - declared(changed), declared(changed) - served) == (missing, unserved)


async def _listener(ack: Any) -> None:
    await ack()


@pytest.mark.parametrize(
    ("decorator", "name", "missing"),
    [
        pytest.param(
            "event", "member_joined_channel", {f"{BOT_EVENTS}: member_joined_channel"}, id="event"
        ),
        pytest.param("command", "/countersign", {f"{SLASH_COMMANDS}: /countersign"}, id="command"),
    ],
)
def test_a_listener_added_without_the_manifest_is_caught(
    manifest: dict[str, Any], bolt_app: _RecordingApp, decorator: str, name: str, missing: set[str]
) -> None:
    getattr(bolt_app, decorator)(name)(_listener)
    assert needed(served_by(bolt_app)) - declared(manifest) == missing


def test_a_listener_the_record_cannot_read_is_caught(bolt_app: _RecordingApp) -> None:
    """A shortcut needs ``features.shortcuts``, which this test does not check yet: rather
    than pass silently, it says so."""
    bolt_app.shortcut("open_queue")(_listener)
    with pytest.raises(AssertionError, match="does not read"):
        served_by(bolt_app)
