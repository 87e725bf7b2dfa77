"""Browser tests of the sandbox page: headless Chromium from Debian's packages (``chromium``),
driven by Playwright for Python through ``executable_path``; no browser is downloaded."""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["CHROMIUM", "missing"]

CHROMIUM = Path("/usr/bin/chromium")


def missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if importlib.util.find_spec("playwright") is None:
        return "Playwright for Python is not installed (pip install 'playwright>=1.50,<2')"
    if not CHROMIUM.exists():
        return (
            f"{CHROMIUM} is absent (apt-get install -y --no-install-recommends chromium "
            "chromium-driver)"
        )
    return None
