"""Running ``countersign`` (``python -m bot.cli``) as a user would: a subprocess of its own."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


async def run_cli(
    *args: str, env: Mapping[str, str], cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """The CLI's exit status and output. In a thread: whatever answers it (the Slack stand-in,
    the agent receiver) keeps serving on the test's event loop meanwhile."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bot.cli", *args],
        cwd=cwd,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
