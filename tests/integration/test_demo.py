"""``make demo`` runs the loop on the sandbox and prints the card as Slack renders it."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def test_the_demo_runs_on_the_sandbox_and_prints_readable_dates(database_url: str) -> None:
    demo = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.demo",
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(demo.communicate(), timeout=120)
    text = output.decode()
    assert demo.returncode == 0, text
    assert "/sandbox/" in text  # the page a newcomer would open
    # the three clicks went through the sandbox's signed requests: two refused, one settled
    assert "attempts recorded: rita=self, otto=no_authority, finance=accepted" in text
    assert "you requested this call" in text
    assert "signature valid" in text
    # Slack's markup rendered as a reader sees it; untrusted text still escaped
    assert "<!date" not in text
    assert "<@" not in text
    assert re.search(r"\*Expires\*: [A-Z][a-z]{2} \d{1,2}, \d{4} at \d{2}:\d{2} UTC", text)
    assert re.search(r"\*Approved\* by @finance at [A-Z][a-z]{2} \d{1,2}, \d{4} at", text)
    assert "&lt;!channel&gt; invoice 42" in text
    # approve with edits: refused as recorded, the call again approved at once, run once
    assert "resume (maf): approved=False" in text
    assert "Approved with edits* by @finance" in text
    assert re.search(r"status=approved edit_of=apr_[0-9a-f]{24}, no card of its own", text)
    assert "a claim of the original ← 409 called_again" in text
    assert "a claim of the call again ← 200" in text
    assert text.rstrip().endswith("done")
