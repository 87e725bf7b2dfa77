"""Step-up in a real browser: headless Chromium (Playwright) with Chromium's virtual
authenticator (the DevTools protocol's WebAuthn domain) as the person's passkey, the Slack
stand-in as Slack and as Sign in with Slack (OpenID Connect), the bot on loopback.

An Approve on a ``verify: passkey`` card answers with a link; the page signs the person in,
shows the call, registers a passkey on first use and has it sign a challenge bound to the call;
only then does the vote count. Each way around it is tried: the wrong person signed in, a link
expired or used, an assertion for another approval, another hash or a Deny replayed as an
Approve, another person's passkey, no user verification, a counter gone back, the call edited
or settled meanwhile, and clicks alone however many reach /slack/events.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from approvals import step_up
from bot import app as bot_app
from bot import interactions
from bot.sandbox import page as page_module
from bot.sandbox.sign_in_standin import CLIENT_ID, CLIENT_SECRET
from tests import slack_requests
from tests.browser import missing
from tests.support import harness as support
from tests.support.edit_form import edit_and_approve
from tests.support.harness import CHANNEL, FINANCE, REQUESTER, Harness
from tests.support.ports import free_port

if (why := missing()) is not None:
    pytest.skip(why, allow_module_level=True)

from playwright.async_api import Browser, BrowserContext, CDPSession, Page, expect

pytestmark = pytest.mark.xdist_group("browser")

APPROVER, SECOND = FINANCE[0], FINANCE[1]
LINK = re.compile(r"<(http://localhost:\d+/step-up/[A-Za-z0-9_-]+)\|Confirm with passkey>")


@dataclass
class StepUpHarness(Harness):
    """The test bot with a ``verify: passkey`` rule for transfer_money (reviewers may edit its
    amount), served on a port known before it starts: its public URL is
    ``http://localhost:PORT`` (a secure context for WebAuthn), Sign in with Slack the stand-in's.
    """

    port: int = 0

    @property
    def public_url(self) -> str:
        return f"http://localhost:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            **super().env(),
            "COUNTERSIGN_PUBLIC_URL": self.public_url,
            "SLACK_CLIENT_ID": CLIENT_ID,
            "SLACK_CLIENT_SECRET": CLIENT_SECRET,
        }

    async def start_bot(self, *, workers: bool = True, same_port: bool = False) -> None:
        self.base_url, self._runner, self.store = await self.serve_bot(
            workers=workers, port=self.port
        )

    async def with_passkey_rule(self) -> StepUpHarness:
        """Started, then restarted on the test policy with, first, the passkey rule."""
        await self.start()
        data = support.test_policy(self.receiver.port).model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
        rule = {"tool": "transfer_money", "require": "finance", "verify": "passkey"}
        data["rules"].insert(0, {**rule, "editable": ["amount"]})
        self.write_policy(data)
        await self.stop_bot()
        await self.start_bot()
        return self


@pytest.fixture
async def bot(database_url: str, tmp_path: Path) -> AsyncIterator[StepUpHarness]:
    h = StepUpHarness(
        database_url=database_url, policy_file=tmp_path / "countersign.yml", port=free_port()
    )
    try:
        yield await h.with_passkey_rule()
    finally:
        await h.stop()


@dataclass
class Browsing:
    context: BrowserContext
    page: Page
    cdp: CDPSession
    authenticator: str
    problems: list[str]


async def _authenticator(context: BrowserContext, page: Page) -> tuple[CDPSession, str]:
    """Chromium's virtual authenticator on ``page``: a platform authenticator with resident
    keys and user verification (a PIN or a biometric, always passing unless a test says)."""
    cdp = await context.new_cdp_session(page)
    await cdp.send("WebAuthn.enable", {"enableUI": False})
    added = await cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "ctap2Version": "ctap2_1",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    return cdp, str(added["authenticatorId"])


@pytest.fixture
async def browsing(browser: Browser) -> AsyncIterator[Browsing]:
    context = await browser.new_context()
    page = await context.new_page()
    page.set_default_timeout(10_000)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    cdp, authenticator = await _authenticator(context, page)
    yield Browsing(context, page, cdp, authenticator, problems)
    await context.close()


async def _link(bot: StepUpHarness, clicker: Any, approval_id: str, count: int = 1) -> str:
    """Approve as ``clicker`` on the card: the click counts nothing, its answer is a link."""
    assert await bot.click(clicker, approval_id) == 200
    answers = await bot.wait_ephemeral(clicker, count)
    found = LINK.search(answers[-1])
    assert found is not None, answers[-1]
    return found.group(1)


async def _open(browsing: Browsing, bot: StepUpHarness, url: str, as_user: str) -> Page:
    """Open the link signed in to (the stand-in's) Slack as ``as_user``."""
    bot.standin.sign_in.signed_in_as = as_user
    await browsing.page.goto(url)
    return browsing.page


async def _confirm(page: Page) -> str:
    await expect(page.locator("#act")).to_be_enabled()
    await page.locator("#act").click()
    result = page.locator("#result")
    await expect(result).not_to_have_text(re.compile(r"^(|Waiting for your passkey…)$"))
    return await result.inner_text()


async def _status(bot: StepUpHarness, approval_id: str) -> str:
    return str((await bot.approval(approval_id))["status"])


async def _outcomes(bot: StepUpHarness, approval_id: str) -> list[str]:
    assert bot.store is not None
    return [a.outcome.value for a in await bot.store.attempts(approval_id)]


def _token(url: str) -> str:
    return url.rsplit("/", 1)[1]


async def test_register_confirm_settle(bot: StepUpHarness, browsing: Browsing) -> None:
    approval_id = (await bot.submit())["approval_id"]
    ts = await bot.card_ts(approval_id)
    url = await _link(bot, APPROVER, approval_id)
    assert await _status(bot, approval_id) == "pending"  # the click alone counted nothing
    bot.standin.sign_in.signed_in_as = APPROVER.id
    page = browsing.page
    response = await page.goto(url)
    # a real web page: nothing inline or from elsewhere runs; the session cookie is kept from
    # scripts and other sites
    assert response is not None
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy
    assert "script-src 'self';" in policy
    assert "unsafe" not in policy
    assert response.headers["referrer-policy"] == "no-referrer"
    [session] = [c for c in await browsing.context.cookies() if c["name"] == "countersign_step_up"]
    assert (session["httpOnly"], session["sameSite"]) == (True, "Lax")
    assert session["secure"] is False  # http://localhost here; Secure behind https
    # a call of the page's without its CSRF token is refused
    forged = await page.evaluate(
        """async (url) => (await fetch(url, {method: "POST", credentials: "same-origin",
            headers: {"Content-Type": "application/json"}, body: "{}"})).status""",
        url + "/options",
    )
    assert forged == 403
    browsing.problems.clear()  # (the console's line for that 403)
    # what is approved, shown as text
    await expect(page.locator("#tool")).to_have_text("transfer_money")
    facts = await bot.approval(approval_id)
    await expect(page.locator("#sha")).to_have_text(facts["arguments_sha256"])
    await expect(page.locator("#register-note")).to_be_visible()  # first use: registers
    assert await _confirm(page) == "Approved. You can close this page."
    [delivered] = await bot.receiver.wait_delivered(1)
    decision = json.loads(delivered.body)
    assert decision["status"] == "approved"
    [vote] = (await bot.approval(approval_id))["decided_by"]
    assert vote["slack_user_id"] == APPROVER.id
    credentials = (
        await browsing.cdp.send(
            "WebAuthn.getCredentials", {"authenticatorId": browsing.authenticator}
        )
    )["credentials"]
    [credential] = credentials
    expected_id = (
        base64.urlsafe_b64encode(base64.b64decode(credential["credentialId"])).decode().rstrip("=")
    )
    assert vote["passkey"]["credential_id"] == expected_id
    # the card says how it was approved; the audit has the passkey
    await bot.standin.wait_for(
        lambda: "verified with a passkey" in json.dumps(bot.standin.card(CHANNEL, ts)["blocks"])
    )
    assert await _outcomes(bot, approval_id) == ["passkey_asked", "accepted"]
    # the person is told, in Slack, that a passkey was registered for them
    [told] = bot.standin.messages[APPROVER.id]
    assert told["text"].startswith(":key: A passkey was registered for your Countersign")
    assert f"countersign passkeys reset {APPROVER.id}" in told["text"]
    assert bot.store is not None
    [accepted] = [a for a in await bot.store.attempts(approval_id) if a.outcome.value == "accepted"]
    assert accepted.detail == f"verified with passkey {expected_id}"
    assert browsing.problems == []  # no script error, no CSP violation
    # the link is spent: opening it again says so
    response = await page.goto(url)
    assert response is not None
    assert response.status == 410


HOSTILE = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'


async def test_what_an_agent_sends_shows_as_text(bot: StepUpHarness, browsing: Browsing) -> None:
    """Markup in the summary or the arguments is shown literally and runs nothing."""
    approval_id = (
        await bot.submit(
            summary=HOSTILE,
            tool={
                "name": "transfer_money",
                "call_id": "call_1",
                "arguments": {"amount": 5, "memo": HOSTILE},
            },
        )
    )["approval_id"]
    await bot.card_ts(approval_id)
    url = await _link(bot, APPROVER, approval_id)
    page = await _open(browsing, bot, url, APPROVER.id)
    await expect(page.locator("#summary")).to_have_text(HOSTILE)
    await expect(page.locator("#arguments")).to_contain_text('<img src=x onerror=\\"window')
    assert await page.locator("main img, main script").count() == 0
    assert await page.evaluate("window.__pwned") is None
    assert browsing.problems == []


async def test_the_wrong_person_signed_in_counts_nothing(
    bot: StepUpHarness, browsing: Browsing
) -> None:
    approval_id = (await bot.submit())["approval_id"]
    await bot.card_ts(approval_id)
    url = await _link(bot, APPROVER, approval_id)
    page = await _open(browsing, bot, url, SECOND.id)  # another finance member's Slack login
    await expect(page.locator("h1")).to_have_text("Signed in as someone else")
    # the clicker's user id, but of another workspace (a Slack id is unique with its team)
    bot.standin.sign_in.claims = {"https://slack.com/team_id": "T0ELSEWHERE"}
    await _open(browsing, bot, url, APPROVER.id)
    await expect(page.locator("h1")).to_have_text("Signed in as someone else")
    bot.standin.sign_in.claims = {}
    assert await _status(bot, approval_id) == "pending"
    # nor can a page's call be made without the clicker's session
    status, _ = await _post(page, url, "options", {})
    assert status == 401


async def _post(page: Page, url: str, what: str, body: dict[str, Any]) -> tuple[int, Any]:
    """A call of the page's own, made from the page (its cookies, its CSRF token)."""
    answer = await page.evaluate(
        """async ([url, body]) => {
            const meta = document.querySelector('meta[name="csrf-token"]');
            const r = await fetch(url, {method: "POST", credentials: "same-origin",
                headers: {"Content-Type": "application/json",
                          "X-CSRF-Token": meta ? meta.getAttribute("content") : ""},
                body: JSON.stringify(body)});
            let b = null; try { b = await r.json(); } catch (e) {}
            return [r.status, b];
        }""",
        [f"{url}/{what}", body],
    )
    return int(answer[0]), answer[1]


async def _assert_with(page: Page, options: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """An assertion made in the page from ``options`` (WebAuthn JSON), with ``changes`` laid
    over them (another challenge, allowed credentials, user verification)."""
    merged = {**options, **changes}
    result: dict[str, Any] = await page.evaluate(
        """async (options) => {
            const got = await navigator.credentials.get(
                {publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options)});
            return got.toJSON();
        }""",
        merged,
    )
    return result


async def _refused(
    bot: StepUpHarness, page: Page, url: str, approval_id: str, assertion: Any, says: str
) -> None:
    """``assertion`` sent to confirm ``url``'s approval: refused, saying ``says``, nothing
    counted."""
    status, answer = await _post(page, url, "confirm", {"credential": assertion})
    assert status == 409, answer
    assert says in answer["error"], answer
    assert await _status(bot, approval_id) == "pending"


async def _signed_in_with_a_passkey(
    bot: StepUpHarness, browsing: Browsing, user: Any = APPROVER
) -> tuple[str, str, Page]:
    """An approval confirmed by ``user`` (their passkey registered), then a second pending
    approval and ``user``'s link for it, the page open on it."""
    first = (await bot.submit(request_id="first"))["approval_id"]
    await bot.card_ts(first)
    url = await _link(bot, user, first)
    page = await _open(browsing, bot, url, user.id)
    assert (await _confirm(page)).startswith("Approved")
    second = (await bot.submit(request_id="second"))["approval_id"]
    await bot.card_ts(second)
    url2 = await _link(bot, user, second, count=2)
    await page.goto(url2)
    await expect(page.locator("#act")).to_be_enabled()
    return second, url2, page


async def test_an_assertion_for_another_call_or_decision_counts_nothing(
    bot: StepUpHarness, browsing: Browsing
) -> None:
    approval_id, url, page = await _signed_in_with_a_passkey(bot, browsing)
    status, options = await _post(page, url, "options", {})
    assert (status, options["mode"]) == (200, "confirm")
    link = await bot.store.passkeys.step_up(_token(url))  # type: ignore[union-attr]
    assert link is not None
    approval = await bot.approval(approval_id)

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    forged = {
        # a Deny replayed as an Approve: the same link, the decision "deny"
        "deny": step_up.challenge(approval_id, approval["arguments_sha256"], "deny", link.nonce),
        # another version of the arguments
        "hash": step_up.challenge(approval_id, "0" * 64, "approve", link.nonce),
        # another approval (the first one, settled: its own challenge)
        "approval": step_up.challenge(
            "apr_other", approval["arguments_sha256"], "approve", link.nonce
        ),
    }
    for name, challenge in forged.items():
        assertion = await _assert_with(page, options["publicKey"], challenge=b64(challenge))
        status, answer = await _post(page, url, "confirm", {"credential": assertion})
        assert status == 409, (name, answer)
        assert "did not confirm this call" in answer["error"], (name, answer)
    assert await _status(bot, approval_id) == "pending"
    assert (await _outcomes(bot, approval_id)).count("passkey_refused") == 3
    # the right one still works (3 tries of 5 spent)
    assert (await _confirm(page)).startswith("Approved")


async def test_another_persons_passkey_counts_nothing(
    bot: StepUpHarness, browsing: Browsing
) -> None:
    """SECOND's passkey sits on this authenticator too; signed in as APPROVER, an assertion
    made with SECOND's credential is refused."""
    first = (await bot.submit(request_id="by-second"))["approval_id"]
    await bot.card_ts(first)
    url = await _link(bot, SECOND, first)
    page = await _open(browsing, bot, url, SECOND.id)
    assert (await _confirm(page)).startswith("Approved")
    [theirs] = (
        await browsing.cdp.send(
            "WebAuthn.getCredentials", {"authenticatorId": browsing.authenticator}
        )
    )["credentials"]
    their_id = (
        base64.urlsafe_b64encode(base64.b64decode(theirs["credentialId"])).decode().rstrip("=")
    )
    approval_id, url2, page = await _signed_in_with_a_passkey(bot, browsing, APPROVER)
    status, options = await _post(page, url2, "options", {})
    assert status == 200
    assertion = await _assert_with(
        page, options["publicKey"], allowCredentials=[{"type": "public-key", "id": their_id}]
    )
    await _refused(bot, page, url2, approval_id, assertion, "not registered to you")


async def test_user_verification_absent_counts_nothing(
    bot: StepUpHarness, browsing: Browsing
) -> None:
    approval_id, url, page = await _signed_in_with_a_passkey(bot, browsing)
    await browsing.cdp.send(
        "WebAuthn.setUserVerified",
        {"authenticatorId": browsing.authenticator, "isUserVerified": False},
    )
    # the page asks for user verification: the browser itself refuses to answer
    assert (await _confirm(page)).startswith("Not confirmed")
    # an answer made without it (as a tampered page would ask) is refused by the server
    status, options = await _post(page, url, "options", {})
    assert status == 200, options
    assertion = await _assert_with(page, options["publicKey"], userVerification="discouraged")
    await _refused(bot, page, url, approval_id, assertion, "User verification is required")


async def test_a_sign_counter_gone_back_counts_nothing(
    bot: StepUpHarness, browsing: Browsing
) -> None:
    approval_id, _url, page = await _signed_in_with_a_passkey(bot, browsing)
    cdp, authenticator = browsing.cdp, browsing.authenticator
    [credential] = (await cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator}))[
        "credentials"
    ]
    assert credential["signCount"] >= 2
    # a clone of the authenticator from before its last use
    await cdp.send(
        "WebAuthn.removeCredential",
        {"authenticatorId": authenticator, "credentialId": credential["credentialId"]},
    )
    cloned = {
        k: credential[k]
        for k in ("credentialId", "isResidentCredential", "rpId", "privateKey", "userHandle")
    }
    await cdp.send(
        "WebAuthn.addCredential",
        {"authenticatorId": authenticator, "credential": {**cloned, "signCount": 0}},
    )
    text = await _confirm(page)
    assert text.startswith("Not confirmed"), text
    assert "sign count" in text, text
    assert await _status(bot, approval_id) == "pending"


async def test_an_expired_link_counts_nothing(bot: StepUpHarness, browsing: Browsing) -> None:
    approval_id, url, page = await _signed_in_with_a_passkey(bot, browsing)
    bot.clock.advance(step_up.LINK_SECONDS + 1)
    # the page was open: its confirmation is refused now
    result = await _confirm(page)
    assert result.startswith("Not confirmed"), result
    assert "expired" in result, result
    response = await page.goto(url)
    assert response is not None
    assert response.status == 410
    await expect(page.locator("#message")).to_contain_text("expired")
    assert await _status(bot, approval_id) == "pending"


async def test_the_call_edited_or_settled_meanwhile_counts_nothing(
    bot: StepUpHarness, browsing: Browsing
) -> None:
    approval_id, _url, page = await _signed_in_with_a_passkey(bot, browsing)
    # another reviewer edits the amount: the link was for the call as it was
    status, text = await edit_and_approve(bot, SECOND, approval_id, amount=400)
    assert status == 200, text
    result = await _confirm(page)
    assert "edited" in result, result
    approval = await bot.approval(approval_id)
    assert approval["status"] == "pending"
    assert approval["decided_by"] == []  # the edit asked its editor for a passkey too
    # settled meanwhile: denied by another approver, then the link of before
    third = (await bot.submit(request_id="third"))["approval_id"]
    await bot.card_ts(third)
    url3 = await _link(bot, APPROVER, third, count=3)
    await page.goto(url3)
    await expect(page.locator("#act")).to_be_enabled()
    assert await bot.click(SECOND, third, "countersign_deny", reason="no") == 200
    assert "denied" in await _confirm(page)
    assert await _status(bot, third) == "denied"


async def test_clicks_alone_never_settle_a_passkey_call(bot: StepUpHarness) -> None:
    """However many signed clicks reach /slack/events, from however many approvers, and a
    requester's: nothing counts without a passkey."""
    approval_id = (await bot.submit())["approval_id"]
    await bot.card_ts(approval_id)
    for clicker in (APPROVER, SECOND, APPROVER, REQUESTER):
        assert await bot.click(clicker, approval_id) == 200
    await bot.settle_quietly()
    assert await _status(bot, approval_id) == "pending"
    assert (await bot.approval(approval_id))["decided_by"] == []
    # (in the order the clicks were handled: each is acknowledged first, then judged)
    assert sorted(await _outcomes(bot, approval_id)) == [
        "passkey_asked",
        "passkey_asked",
        "passkey_asked",
        "self",
    ]
    # a Deny needs no passkey
    assert await bot.click(SECOND, approval_id, "countersign_deny", reason="no") == 200
    await bot.receiver.wait_delivered(1)
    assert await _status(bot, approval_id) == "denied"


@dataclass
class EmailSignInHarness(StepUpHarness):
    """Another OpenID Connect provider (the stand-in's, as a generic issuer): who signs in is
    matched to the clicker by verified e-mail, not by Slack user id."""

    def env(self) -> dict[str, str]:
        return {
            **super().env(),
            "COUNTERSIGN_OIDC_ISSUER": self.standin.sign_in.issuer,
            "COUNTERSIGN_OIDC_CLIENT_ID": CLIENT_ID,
            "COUNTERSIGN_OIDC_CLIENT_SECRET": CLIENT_SECRET,
        }


async def test_another_provider_matches_by_verified_email(
    database_url: str, tmp_path: Path, browsing: Browsing
) -> None:
    bot = EmailSignInHarness(
        database_url=database_url, policy_file=tmp_path / "countersign.yml", port=free_port()
    )
    try:
        await bot.with_passkey_rule()
        first = (await bot.submit(request_id="by-email"))["approval_id"]
        await bot.card_ts(first)
        url = await _link(bot, APPROVER, first)
        # an unverified e-mail proves nothing
        bot.standin.sign_in.claims = {"email_verified": False}
        page = await _open(browsing, bot, url, APPROVER.id)
        await expect(page.locator("#message")).to_have_text(
            "the sign-in provider did not give a verified e-mail address"
        )
        # a verified e-mail that is not the clicker's
        bot.standin.sign_in.claims = {"email": SECOND.email}
        await page.goto(url)
        await expect(page.locator("#message")).to_contain_text(
            "which is not the e-mail of the Slack user who clicked Approve"
        )
        assert await _status(bot, first) == "pending"
        # the clicker's own verified e-mail
        bot.standin.sign_in.claims = {}
        await page.goto(url)
        assert (await _confirm(page)).startswith("Approved")
        assert await _status(bot, first) == "approved"
    finally:
        await bot.stop()


@dataclass
class SandboxStepUpHarness(StepUpHarness):
    """Try-out mode's sandbox page on the step-up bot: what a newcomer sees of a passkey rule."""

    sandbox: page_module.Sandbox | None = None

    def mount(self, app: web.Application) -> None:
        self.sandbox = page_module.Sandbox(
            standin=self.standin,
            signing_secret=support.SIGNING_SECRET,
            policy=app[bot_app.LIVE].policy,
        )
        page_module.mount(app, self.sandbox)


async def test_the_sandbox_shows_a_passkey_rule_end_to_end(
    database_url: str, tmp_path: Path, browsing: Browsing
) -> None:
    """In the sandbox, Approve on a passkey rule's card answers with the link; following it (the
    person acting on the page is who is signed in), the browser's passkey prompt confirms, and
    the card shows the approval verified with a passkey."""
    bot = SandboxStepUpHarness(
        database_url=database_url, policy_file=tmp_path / "countersign.yml", port=free_port()
    )
    try:
        await bot.with_passkey_rule()
        page = browsing.page
        await page.goto(bot.public_url + "/sandbox/")
        approval_id = (await bot.submit())["approval_id"]
        card = page.locator("article[data-testid=message]", has_text=approval_id)
        await expect(card).to_be_visible()
        await page.get_by_test_id("acting").select_option(APPROVER.id)
        await card.get_by_role("button", name="Approve", exact=True).click()
        answer = page.get_by_test_id("ephemeral")
        await expect(answer).to_contain_text("This call needs your passkey")
        async with browsing.context.expect_page() as opened:
            await answer.get_by_role("link", name="Confirm with passkey").click()
        confirmation = await opened.value
        await _authenticator(browsing.context, confirmation)  # the new tab's passkey
        assert (await _confirm(confirmation)).startswith("Approved")
        await expect(card).to_contain_text("verified with a passkey")
        assert await _status(bot, approval_id) == "approved"
    finally:
        await bot.stop()


async def test_failed_confirmations_spend_the_link(bot: StepUpHarness, browsing: Browsing) -> None:
    """Five failed confirmations and the link is spent, the right passkey too late; and a page
    confirms at most ten times a minute."""
    approval_id, url, page = await _signed_in_with_a_passkey(bot, browsing)
    status, options = await _post(page, url, "options", {})
    assert status == 200, options
    wrong = base64.urlsafe_b64encode(b"\x00" * 32).decode().rstrip("=")
    for _ in range(step_up.MAX_TRIES):
        assertion = await _assert_with(page, options["publicKey"], challenge=wrong)
        await _refused(bot, page, url, approval_id, assertion, "did not confirm this call")
    result = await _confirm(page)
    assert "too many failed confirmations" in result, result
    assert await _status(bot, approval_id) == "pending"
    # the page's own limit, whatever the link: the eleventh call in a minute is refused
    statuses = [(await _post(page, url, "confirm", {"credential": {}}))[0] for _ in range(11)]
    assert statuses[-1] == 429, statuses
    browsing.problems.clear()  # (the console's lines for those refusals)


async def test_adding_a_passkey_needs_one_used_first(
    bot: StepUpHarness, browsing: Browsing, browser: Browser
) -> None:
    """Someone signed in (a Slack session is all a thief may have) cannot add a passkey to a
    person who has one; the person, right after using theirs, can."""
    approval_id, url, page = await _signed_in_with_a_passkey(bot, browsing)
    thief = await browser.new_context()
    try:
        other = await thief.new_page()
        bot.standin.sign_in.signed_in_as = APPROVER.id
        await other.goto(url)
        await expect(other.locator("#act")).to_be_enabled()
        status, answer = await _post(other, url, "options", {"add": True})
        assert status == 403, answer
        assert answer["error"] == "adding a passkey needs one of yours, used first"
        # a registration answer sent anyway is refused the same way (no challenge was given)
        status, answer = await _post(other, url, "register", {"credential": {}})
        assert status == 409, answer
    finally:
        await thief.close()
    # the person, whose session confirmed with their passkey a moment ago
    status, answer = await _post(page, url, "options", {"add": True})
    assert (status, answer["mode"]) == (200, "register")
    assert await _status(bot, approval_id) == "pending"
    browsing.problems.clear()


async def _click_on_version(bot: StepUpHarness, user: Any, approval_id: str, sha: str) -> int:
    """Approve as the card's button sends it: the block names the version shown."""
    request = slack_requests.block_actions(
        signing_secret=support.SIGNING_SECRET,
        user_id=user.id,
        user_name=user.name,
        action_id="countersign_approve",
        value=approval_id,
        channel_id=CHANNEL,
        block_id=f"{interactions.DECISION_BLOCK}:{sha}",
    )
    return await bot.post_slack(request)


async def test_an_edited_call_is_confirmed_as_edited(
    bot: StepUpHarness, browsing: Browsing
) -> None:
    """Edit & approve asks the editor for their passkey over the edited call (the page shows
    the edited arguments and their hash); then another approver confirms the edited version."""
    approval_id = (await bot.submit())["approval_id"]
    await bot.card_ts(approval_id)
    status, text = await edit_and_approve(bot, APPROVER, approval_id, amount=400)
    assert status == 200, text
    [answer] = await bot.wait_ephemeral(APPROVER)
    found = LINK.search(answer)
    assert found is not None, answer
    edited = await bot.approval(approval_id)
    run_sha = edited["edit"]["arguments_sha256"]
    assert edited["decided_by"] == []  # the edit alone counted nothing
    page = await _open(browsing, bot, found.group(1), APPROVER.id)
    await expect(page.locator("#sha")).to_have_text(run_sha)
    await expect(page.locator("#arguments")).to_contain_text('"amount": 400')
    await expect(page.locator("#edit")).to_be_visible()
    assert (await _confirm(page)).startswith("Approved")
    [delivered] = await bot.receiver.wait_delivered(1)
    decision = json.loads(delivered.body)
    assert decision["status"] == "approved"
    assert decision["edit"]["arguments_sha256"] == run_sha


async def test_another_approver_confirms_an_edit_of_someone_else(
    bot: StepUpHarness, browsing: Browsing
) -> None:
    approval_id = (await bot.submit())["approval_id"]
    await bot.card_ts(approval_id)
    status, text = await edit_and_approve(bot, SECOND, approval_id, amount=300)
    assert status == 200, text
    [theirs] = await bot.wait_ephemeral(SECOND)  # the editor's own link, not used here
    assert LINK.search(theirs) is not None, theirs
    run_sha = (await bot.approval(approval_id))["edit"]["arguments_sha256"]
    # APPROVER clicks Approve on the card as it now shows the edit
    assert await _click_on_version(bot, APPROVER, approval_id, run_sha) == 200
    [answer] = await bot.wait_ephemeral(APPROVER)
    found = LINK.search(answer)
    assert found is not None, answer
    page = await _open(browsing, bot, found.group(1), APPROVER.id)
    assert (await _confirm(page)).startswith("Approved")
    [vote] = (await bot.approval(approval_id))["decided_by"]
    assert (vote["slack_user_id"], vote["arguments_sha256"]) == (APPROVER.id, run_sha)
    assert "passkey" in vote
