"""``countersign init``: the starting files of a deployment, written where the command runs, so
that a wheel installed without a checkout can start: the policy (``countersign.yml``, from the
example the tests run) and the Slack app manifest (``manifest.yml``). Existing files are never
overwritten unless asked."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["TEMPLATES", "write_templates"]

#: template shipped in the package → the name it is written under
TEMPLATES = {"countersign.example.yml": "countersign.yml", "manifest.yml": "manifest.yml"}


def write_templates(folder: Path, *, force: bool = False) -> tuple[list[Path], list[Path]]:
    """Write each template into ``folder``; returns (written, left alone because they exist)."""
    written: list[Path] = []
    kept: list[Path] = []
    shipped = resources.files("bot") / "templates"
    for template, name in TEMPLATES.items():
        target = folder / name
        if target.exists() and not force:
            kept.append(target)
            continue
        target.write_text((shipped / template).read_text("utf-8"), "utf-8")
        written.append(target)
    return written, kept
