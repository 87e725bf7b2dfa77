"""The sandbox page in a real browser (headless Debian Chromium, driven by Playwright).

A newcomer's walk through it: an approval submitted over HTTP appears as a card, the
requester's click is refused (the ephemeral shows), an approver denies another card through
the modal (its required reason enforced) and approves the first; each card updates live and the
agent receives each callback. Then the injection corpus: hostile text from agents, and hostile
markup posted to Slack itself, must show literally and inject nothing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from bot import messages
from tests.browser import missing
from tests.integration.test_sandbox import DELETE, INVOICE, SandboxHarness
from tests.support.harness import APPROVER, BOT_TOKEN, CHANNEL, OUTSIDER, REQUESTER
from tests.unit.test_untrusted_text import HOSTILE

if (why := missing()) is not None:
    pytest.skip(why, allow_module_level=True)

from playwright.async_api import Browser, Locator, Page, expect

# HTML and script an agent might slip into what it sends
HTML_PAYLOADS = [
    '<img src=x onerror="window.__pwned=1">',
    "<script>window.__pwned=1</script>",
    '"><svg onload=window.__pwned=1>',
    '<a href="javascript:window.__pwned=1">click me</a>',
    '<iframe srcdoc="<script>parent.__pwned=1</script>"></iframe>',
    "javascript:window.__pwned=1",
    "</pre><b>bold</b><pre>",
    "&lt;img src=x onerror=window.__pwned=1&gt;",
]
SHORT_HOSTILE = [text for text in HOSTILE if len(text) <= 80]


@pytest.fixture
async def sandbox(database_url: str) -> AsyncIterator[SandboxHarness]:
    h = await SandboxHarness(database_url=database_url).start()
    yield h
    await h.stop()


# one browser for the module's tests: on one worker under pytest-xdist
pytestmark = pytest.mark.xdist_group("browser")


@pytest.fixture
async def page(browser: Browser, sandbox: SandboxHarness) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    opened = await context.new_page()
    opened.set_default_timeout(10_000)
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    opened.on(
        "console",
        lambda message: problems.append(message.text) if message.type == "error" else None,
    )
    await opened.goto(sandbox.base_url + "/sandbox/")
    await expect(opened.get_by_test_id("live")).to_have_text("live")
    yield opened
    await context.close()
    assert problems == [], problems  # no script error, no CSP violation


def card(page: Page, approval_id: str) -> Locator:
    return page.locator("article[data-testid=message]", has_text=approval_id)


async def act_as(page: Page, user_id: str) -> None:
    await page.get_by_test_id("acting").select_option(user_id)


async def test_a_newcomers_walk_through_the_sandbox(sandbox: SandboxHarness, page: Page) -> None:
    first = (await sandbox.submit(tool=INVOICE, summary="Invoice ACME for May"))["approval_id"]
    invoice = card(page, first)
    await expect(invoice).to_be_visible()  # live: posted after the page loaded
    await expect(invoice.locator(".header")).to_have_text("Approval needed: send_invoice")
    await expect(invoice.locator("pre.code-block")).to_contain_text('"amount_eur": 1200')
    await expect(invoice.locator(".fields strong").first).to_have_text("Requester")

    # the requester cannot approve their own request
    await act_as(page, REQUESTER.id)
    await invoice.get_by_role("button", name="Approve").click()
    refusal = page.get_by_test_id("ephemeral")
    await expect(refusal).to_contain_text("Only visible to you")
    await expect(refusal).to_contain_text("you requested this call")
    # nor can an outsider; and each person sees only their own ephemerals
    await act_as(page, OUTSIDER.id)
    await expect(refusal).to_have_count(0)
    await invoice.get_by_role("button", name="Approve").click()
    await expect(refusal).to_contain_text("do not hold the role")
    assert await sandbox.status_of(first) == "pending"

    # an approver denies another card through the modal, whose reason is required
    await act_as(page, APPROVER.id)
    second = (await sandbox.submit(tool=DELETE, request_id="af-call-8"))["approval_id"]
    delete = card(page, second)
    await delete.get_by_role("button", name="Deny").click()
    modal = page.get_by_test_id("modal")
    await expect(modal).to_be_visible()
    await expect(modal.locator(".modal-title")).to_have_text("Deny this request")
    presets = modal.locator("select option")
    await expect(presets).to_have_text(["Choose…", "Amount looks wrong", "Wrong recipient"])
    await modal.get_by_test_id("modal-submit").click()
    await expect(modal.locator(".input-error").last).to_have_text(messages.REASON_REQUIRED)
    assert await sandbox.status_of(second) == "pending"
    await modal.locator("select").select_option("1")
    await modal.locator("textarea").fill("that table is the CRM")
    await modal.get_by_test_id("modal-submit").click()
    await expect(modal).to_be_hidden()
    await expect(delete.locator(".header")).to_have_text("Denied: delete_records")
    await expect(delete).to_contain_text(f"Denied by @{APPROVER.real_name}")
    await expect(delete.get_by_role("button")).to_have_count(0)
    [denied] = await sandbox.receiver.wait_delivered(1)
    decision = json.loads(denied.body)
    assert (decision["approval_id"], decision["status"]) == (second, "denied")
    assert "Wrong recipient: that table is the CRM" in decision["reason"]

    # and approves the first
    await invoice.get_by_role("button", name="Approve").click()
    await expect(invoice.locator(".header")).to_have_text("Approved: send_invoice")
    await expect(invoice.locator(".edited")).to_have_text("(edited)")
    await expect(invoice).to_contain_text(f"Approved by @{APPROVER.real_name}")
    await expect(invoice.get_by_role("button")).to_have_count(0)
    received = await sandbox.receiver.wait_delivered(2)
    approved = json.loads(received[1].body)
    assert (approved["approval_id"], approved["status"]) == (first, "approved")
    # every request the page sent is listed, with the bot's answer
    await expect(page.get_by_test_id("log").locator("li")).to_have_count(6)

    # the approver's App Home: nothing left to decide, both requests settled
    await page.locator("button[data-place=home]").click()
    await expect(page.get_by_test_id("home")).to_contain_text(messages.HOME_NOTHING)


async def test_hostile_text_from_agents_shows_literally_and_injects_nothing(
    sandbox: SandboxHarness, page: Page
) -> None:
    arguments = {f"p{i:02d}": text for i, text in enumerate(HTML_PAYLOADS + SHORT_HOSTILE)}
    hostile = (
        await sandbox.submit(
            tool={"name": "send_invoice", "call_id": "call_x", "arguments": arguments},
            summary="\n".join(HTML_PAYLOADS),
            requester={
                "slack_user_id": REQUESTER.id,
                "name": '<img src=x onerror="window.__pwned=1"> <!channel> *Rita*',
            },
        )
    )["approval_id"]
    shown = card(page, hostile)
    await expect(shown).to_be_visible()
    await expect(shown.locator("pre.code-block")).to_contain_text("p00")

    await _assert_inert(page)
    text = await shown.inner_text()
    for literal in (
        "<img src=x onerror=",
        "<script>window.",
        "<svg onload=window.",
        "</pre><b>bold</b><pre>",
        "<iframe srcdoc=",
    ):
        assert literal in text, literal
    assert "&lt;img" in text  # an entity the agent sent is shown as it was sent
    assert "<!channel>" in text
    assert "<https://evil.example|bank.com>" in text
    # clicking on it is still just a click: the requester is refused
    await act_as(page, REQUESTER.id)
    await shown.get_by_role("button", name="Approve").click()
    await expect(page.get_by_test_id("ephemeral")).to_contain_text("you requested this call")
    await _assert_inert(page)


async def test_markup_in_slack_itself_renders_safely(sandbox: SandboxHarness, page: Page) -> None:
    """What a bot could post (not ours: it escapes all of it): the renderer still makes only
    text, http(s) links and names of it."""
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": "<img src=x onerror=window.__pwned=1>"},
        },
        {
            "type": "section",
            "text": {
                "type": "mrkdwn",
                "text": (
                    "*bold* _it_ ~gone~ `code` <@U0APP> <!subteam^S0FINANCE> "
                    "<https://example.org/a?b=1&amp;c=2|a safe link> "
                    "<javascript:window.__pwned=1|not a link> <data:text/html,hi|nor this> "
                    "<img src=x onerror=window.__pwned=1> <!date^0^{date_short_pretty}|the epoch>"
                    "\n```<b>in code</b> *not bold*```"
                ),
            },
            "fields": [{"type": "mrkdwn", "text": "*F*\n<script>window.__pwned=1</script>"}],
        },
        {
            "type": "context",
            "elements": [
                {"type": "image", "image_url": "https://tracker.example/x.png", "alt_text": "pixel"}
            ],
        },
        {"type": "divider"},
        {
            "type": "rich_text",
            "elements": [
                {
                    "type": "rich_text_preformatted",
                    "elements": [{"type": "text", "text": "<script>window.__pwned=1</script>"}],
                }
            ],
        },
    ]
    assert sandbox.session is not None
    async with sandbox.session.post(
        sandbox.standin.base_url + "chat.postMessage",
        json={"channel": CHANNEL, "text": "markup", "blocks": blocks},
        headers={"Authorization": f"Bearer {BOT_TOKEN}"},
    ) as response:
        assert (await response.json())["ok"] is True
    shown = page.locator("article[data-testid=message]", has_text="a safe link")
    await expect(shown).to_be_visible()
    await expect(shown.locator(".header")).to_have_text("<img src=x onerror=window.__pwned=1>")
    section = shown.locator(".section").first
    await expect(section.locator("strong").first).to_have_text("bold")
    await expect(section.locator("em")).to_have_text("it")
    await expect(section.locator("s")).to_have_text("gone")
    await expect(section.locator("code.inline-code")).to_have_text("code")
    await expect(section.locator(".mention").first).to_have_text(f"@{APPROVER.real_name}")
    await expect(section.locator(".mention").nth(1)).to_have_text("@s0finance")
    await expect(section.locator("pre.code-block")).to_have_text("<b>in code</b> *not bold*")
    links = section.locator("a")
    await expect(links).to_have_count(1)
    await expect(links).to_have_text("a safe link")
    assert await links.get_attribute("href") == "https://example.org/a?b=1&c=2"
    await expect(section).to_contain_text("not a link")
    await expect(section).to_contain_text("nor this")
    await expect(section.locator("time")).not_to_have_text("the epoch")  # a date, rendered
    await expect(shown.locator(".image-alt")).to_have_text("[image: pixel]")
    await expect(shown.locator(".rich-text pre")).to_have_text("<script>window.__pwned=1</script>")
    await _assert_inert(page)


async def _assert_inert(page: Page) -> None:
    """Nothing was made of the hostile text but text."""
    assert await page.evaluate("typeof window.__pwned") == "undefined"
    main = page.get_by_test_id("main")
    for selector in (
        "img",
        "script",
        "iframe",
        "svg",
        "object",
        "embed",
        "b",
        "[onerror]",
        "[onload]",
    ):
        await expect(main.locator(selector)).to_have_count(0)
    hrefs = await main.locator("a").evaluate_all("links => links.map(a => a.href)")
    assert all(href.startswith(("https://", "http://")) for href in hrefs), hrefs
    await expect(main.locator(".broadcast")).to_have_count(0)  # no @channel from anyone's text


async def test_the_page_updates_when_a_card_changes_elsewhere(
    sandbox: SandboxHarness, page: Page
) -> None:
    """A click that did not come from this page (another reviewer's) shows here too."""
    approval_id = (await sandbox.submit(tool=INVOICE))["approval_id"]
    shown = card(page, approval_id)
    await expect(shown.get_by_role("button", name="Approve")).to_be_visible()
    await sandbox.click(APPROVER, approval_id)
    await expect(shown.locator(".header")).to_have_text("Approved: send_invoice")
    async with (
        aiohttp.ClientSession() as http,
        http.get(sandbox.base_url + "/sandbox/api/state") as r,
    ):
        assert r.status == 200
