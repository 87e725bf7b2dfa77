"""The passkeys' relying party from COUNTERSIGN_PUBLIC_URL: the origin exactly as a browser
sends it in clientDataJSON (an assertion from any other is refused), the host as the RP id."""

from __future__ import annotations

import pytest

from bot.passkeys import RelyingParty


@pytest.mark.parametrize(
    ("public_url", "origin", "rp_id"),
    [
        (
            "https://countersign.example.com",
            "https://countersign.example.com",
            "countersign.example.com",
        ),
        (
            "https://Countersign.Example.com:443",
            "https://countersign.example.com",
            "countersign.example.com",
        ),
        (
            "https://countersign.example.com:8443",
            "https://countersign.example.com:8443",
            "countersign.example.com",
        ),
        ("http://localhost:3000", "http://localhost:3000", "localhost"),
        ("http://localhost:80", "http://localhost", "localhost"),
    ],
)
def test_the_origin_is_the_browsers(public_url: str, origin: str, rp_id: str) -> None:
    rp = RelyingParty.of(public_url)
    assert (rp.origin, rp.rp_id) == (origin, rp_id)
