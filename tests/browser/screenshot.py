"""``python -m tests.browser.screenshot``: writes docs/sandbox.png, the sandbox page with one
settled and one pending card (for the README and the docs).

The bot runs as in the tests (embedded PostgreSQL, the Slack stand-in, an agent receiver); the
approval is settled through the page's own button, as a newcomer would.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tests.browser import CHROMIUM, missing
from tests.integration.test_sandbox import DELETE, INVOICE, SandboxHarness
from tests.support import postgres
from tests.support.harness import APPROVER, FINANCE

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "sandbox.png"
STEP_UP_OUTPUT = OUTPUT.with_name("step-up.png")


async def _shoot(output: Path) -> None:
    from playwright.async_api import async_playwright, expect

    with postgres.server_dsn(os.environ.get("TEST_DATABASE_URL")) as admin:
        await postgres.create_template(admin)
        dsn = await postgres.fresh_database(admin)
        harness = await SandboxHarness(database_url=dsn).start()
        try:
            settled = (await harness.submit(tool=INVOICE, summary="Invoice ACME for the May work"))[
                "approval_id"
            ]
            await harness.card_ts(settled)  # posted first: the cards keep this order
            pending = (
                await harness.submit(
                    tool=DELETE, request_id="af-call-8", summary="Clean up the stale leads table"
                )
            )["approval_id"]
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(
                    executable_path=str(CHROMIUM), headless=True
                )
                page = await browser.new_page(viewport={"width": 1400, "height": 1100})
                await page.goto(harness.base_url + "/sandbox/")
                await page.get_by_test_id("acting").select_option(APPROVER.id)
                first = page.locator("article[data-testid=message]", has_text=settled)
                await first.get_by_role("button", name="Approve").click()
                await expect(first.locator(".header")).to_have_text("Approved: send_invoice")
                second = page.locator("article[data-testid=message]", has_text=pending)
                await expect(second.get_by_role("button", name="Deny")).to_be_visible()
                await harness.receiver.wait_delivered(1)
                output.parent.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(output), full_page=True)
                await browser.close()
        finally:
            await harness.stop()
            await postgres.drop_database(admin, dsn)


async def _shoot_step_up(output: Path) -> None:
    """docs/step-up.png: the confirmation page of a passkey rule's approval, signed in."""
    import tempfile

    from playwright.async_api import async_playwright, expect

    from tests.browser.test_step_up import LINK, StepUpHarness
    from tests.support.ports import free_port

    with (
        postgres.server_dsn(os.environ.get("TEST_DATABASE_URL")) as admin,
        tempfile.TemporaryDirectory() as directory,
    ):
        await postgres.create_template(admin)
        dsn = await postgres.fresh_database(admin)
        harness = StepUpHarness(
            database_url=dsn, policy_file=Path(directory) / "countersign.yml", port=free_port()
        )
        try:
            await harness.with_passkey_rule()
            approval_id = (
                await harness.submit(
                    summary="Pay invoice 42 to ACME Corp",
                    tool={
                        "name": "transfer_money",
                        "call_id": "call_1",
                        "arguments": {"amount": 48250, "currency": "EUR", "to": "ACME Corp"},
                    },
                )
            )["approval_id"]
            await harness.card_ts(approval_id)
            approver = FINANCE[0]
            assert await harness.click(approver, approval_id) == 200
            [answer] = await harness.wait_ephemeral(approver)
            found = LINK.search(answer)
            assert found is not None, answer
            harness.standin.sign_in.signed_in_as = approver.id
            async with async_playwright() as playwright:
                browser = await playwright.chromium.launch(
                    executable_path=str(CHROMIUM), headless=True
                )
                page = await browser.new_page(viewport={"width": 900, "height": 900})
                await page.goto(found.group(1))
                await expect(page.locator("#act")).to_be_enabled()
                await page.screenshot(path=str(output), full_page=True)
                await browser.close()
        finally:
            await harness.stop()
            await postgres.drop_database(admin, dsn)


def main() -> int:
    why = missing()
    if why is not None:
        print(f"no screenshot: {why}", file=sys.stderr)
        return 1
    asyncio.run(_shoot(OUTPUT))
    asyncio.run(_shoot_step_up(STEP_UP_OUTPUT))
    for written in (OUTPUT, STEP_UP_OUTPUT):
        shown = written.relative_to(Path.cwd()) if written.is_relative_to(Path.cwd()) else written
        print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
