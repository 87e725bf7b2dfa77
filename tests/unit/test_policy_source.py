"""The policy in force: read from its file, reloaded on demand or when the file changes, and
never replaced by a file that does not load."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from approvals import errors, policy
from tests.support import waiting

POLICY = """\
slack:
  reviewer_channel: C0REVIEWS
agents:
  sales-bot: {token_env: SALES_BOT_TOKEN}
roles:
  approvers: {users: [U0ANA]}
  finance: {usergroups: [S0FINANCE]}
rules:
  - {tool: "transfer_*", require: finance}
  - {tool: "*", require: approvers}
"""
# the same file with one rule changed: another version
CHANGED = POLICY.replace("require: finance", "require: approvers")


def write(path: Path, text: str, *, mtime: int | None = None) -> Path:
    path.write_text(text, "utf-8")
    if mtime is not None:
        # file systems keep coarse times: a rewrite within the same tick would look unchanged
        os.utime(path, (mtime, mtime))
    return path


def source_of(path: Path) -> policy.PolicySource[policy.PolicyFile]:
    return policy.PolicySource(policy.load_file(path), path, policy.load_file)


def test_the_source_gives_the_policy_read_from_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "countersign.yml", POLICY)
    source = source_of(path)
    assert source().match("transfer_money").rule.require == "finance"
    assert source.current.path == path
    assert source.current.where(("rules", 1, "require")) == f"{path}:10: rules.1.require"


def test_reload_takes_a_valid_new_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write(tmp_path / "countersign.yml", POLICY)
    source = source_of(path)
    before = source().version
    write(path, CHANGED)
    with caplog.at_level(logging.INFO):
        assert source.reload() is True
    assert source().match("transfer_money").rule.require == "approvers"
    [record] = [r for r in caplog.records if r.message == "policy reloaded"]
    assert (record.__dict__["from"], record.__dict__["to"]) == (before, source().version)


def test_an_invalid_new_file_is_refused_and_the_old_policy_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "countersign.yml", POLICY)
    source = source_of(path)
    before = source()
    write(path, POLICY.replace("require: finance", "require: ghost"))
    assert source.reload() is False
    assert source() is before
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "stays in force" in record.message
    assert any("'ghost'" in problem for problem in record.__dict__["problems"])


def test_a_fixed_policy_never_reloads(tmp_path: Path) -> None:
    path = write(tmp_path / "countersign.yml", POLICY)
    fixed = policy.PolicySource(policy.load_file(path), path)
    before = fixed()
    write(path, CHANGED)
    assert fixed.reload() is False
    assert fixed() is before


def test_a_read_that_refuses_for_its_own_reasons_keeps_the_old_policy(tmp_path: Path) -> None:
    path = write(tmp_path / "countersign.yml", POLICY)

    def read(path: Path) -> policy.PolicyFile:
        raise errors.SettingsError(["SALES_BOT_TOKEN: not set"])

    source = policy.PolicySource(policy.load_file(path), path, read)
    before = source()
    assert source.reload() is False
    assert source() is before


async def test_watch_reloads_when_the_file_changes(tmp_path: Path) -> None:
    path = write(tmp_path / "countersign.yml", POLICY, mtime=1_000_000)
    reads: list[Path] = []

    def read(path: Path) -> policy.PolicyFile:
        reads.append(path)
        return policy.load_file(path)

    source = policy.PolicySource(policy.load_file(path), path, read)
    before = source().version
    watching = asyncio.create_task(source.watch(interval=0.01))
    try:
        await asyncio.sleep(0.05)
        assert reads == []  # an unchanged file is not read again
        write(path, CHANGED, mtime=2_000_000)
        await waiting.until(lambda: source().version != before, what="the change to be read")
    finally:
        watching.cancel()
    assert source().match("transfer_money").rule.require == "approvers"
    assert reads == [path]
