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
from tests.support.harness import APPROVER

OUTPUT = Path(__file__).resolve().parents[2] / "docs" / "sandbox.png"


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


def main() -> int:
    why = missing()
    if why is not None:
        print(f"no screenshot: {why}", file=sys.stderr)
        return 1
    asyncio.run(_shoot(OUTPUT))
    print(
        f"wrote {OUTPUT.relative_to(Path.cwd()) if OUTPUT.is_relative_to(Path.cwd()) else OUTPUT}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
