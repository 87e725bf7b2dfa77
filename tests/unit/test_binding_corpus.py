"""The cross-language binding corpus (tests/fixtures/binding_corpus.json): the server's hashing
gives the stored RFC 8785 text and SHA-256 for every case, the same file the TypeScript
client's test (clients/typescript/test/binding.test.ts) checks its own hashing against."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from approvals import hashing

CORPUS = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "binding_corpus.json").read_text("utf-8")
)


def _ids(cases: list[dict[str, Any]]) -> list[str]:
    return [case["name"] for case in cases]


@pytest.mark.parametrize("case", CORPUS["cases"], ids=_ids(CORPUS["cases"]))
def test_the_server_hashes_each_case_as_stored(case: dict[str, Any]) -> None:
    canonical = hashing.canonical_json(json.loads(case["json"]))
    assert canonical.decode("utf-8") == case["canonical"]
    assert hashing.arguments_sha256(json.loads(case["json"])) == case["sha256"]


@pytest.mark.parametrize("case", CORPUS["refused"], ids=_ids(CORPUS["refused"]))
def test_the_server_refuses_what_rfc_8785_cannot_write(case: dict[str, Any]) -> None:
    # the webhook refuses all of these with a 422 before hashing
    with pytest.raises(hashing.NotCanonical):
        hashing.arguments_sha256(json.loads(case["json"]))


def test_the_corpus_covers_what_the_issue_names() -> None:
    texts = " ".join(case["json"] for case in CORPUS["cases"])
    for needle in ("1e16", "-0.0", "1.5e300", "\\ud83d\\ude00", "\\u00e9", '[{"k":[{"k":'):
        assert needle in texts, needle
    assert len({case["sha256"] for case in CORPUS["cases"]}) == len(CORPUS["cases"])
