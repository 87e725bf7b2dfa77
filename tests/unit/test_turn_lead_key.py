"""The lead key: one lead, however its id is spelled, is one key (for per-lead limits) and the
same identities (for "never decides")."""

from __future__ import annotations

import pytest

from approvals import models


@pytest.mark.parametrize(
    ("lead_id", "key"),
    [
        # an e-mail: lower-cased
        ("lena@prospect.example", "lena@prospect.example"),
        ("Lena@Prospect.example", "lena@prospect.example"),
        ("LENA@PROSPECT.EXAMPLE", "lena@prospect.example"),
        ("ÉLODIE@Prospect.example", "élodie@prospect.example"),
        # compatibility forms fold first: full-width letters and a full-width at sign
        ("\uff2c\uff25\uff2e\uff21@prospect.example", "lena@prospect.example"),
        ("lena\uff20prospect.example", "lena@prospect.example"),
        # a phone number: its digits with a leading +, whatever the separators
        ("+351900000000", "+351900000000"),
        ("+351 900 000 000", "+351900000000"),
        ("+351-900-000-000", "+351900000000"),
        ("351 (900) 000.000", "+351900000000"),
        ("(+351) 900/000/000", "+351900000000"),
        ("+351\u00a0900\u00a0000\u00a0000", "+351900000000"),  # no-break spaces
        ("+351\u2009900\u2009000\u2009000", "+351900000000"),  # thin spaces
        ("\uff0b\uff13\uff15\uff11900000000", "+351900000000"),  # full-width + and digits
        ("+\u0663\u0665\u0661900000000", "+351900000000"),  # Arabic-Indic digits
        ("1234567", "+1234567"),  # seven digits: the shortest phone number
        ("123456789012345", "+123456789012345"),  # fifteen: the longest (E.164)
        # anything else: the id as given (opaque ids may be case-sensitive)
        ("crm-Lead-42", "crm-Lead-42"),
        ("lead-42", "lead-42"),
        ("123456", "123456"),  # too short for a phone number
        ("1234567890123456", "1234567890123456"),  # too long for one
        ("+351 900 000 000 ext 12", "+351 900 000 000 ext 12"),
        ("++351900000000", "++351900000000"),
        ("351+900000000", "351+900000000"),
        ("U0LENA", "U0LENA"),  # a Slack id is matched as a Slack id, not re-spelled
        ("lena@@prospect.example", "lena@@prospect.example"),
        ("Ｌｅａｄ-42", "Ｌｅａｄ-42"),  # as given: only e-mails and phones are folded
    ],
)
def test_lead_key(lead_id: str, key: str) -> None:
    assert models.lead_key(lead_id) == key


def test_a_lead_and_its_key_agree() -> None:
    assert models.Lead(id="  Lena@Prospect.example ").key == "lena@prospect.example"


@pytest.mark.parametrize(
    "lead_id",
    [
        "Lena@Prospect.example",
        "\uff2c\uff45\uff4e\uff41@prospect.example",
        "lena\uff20prospect.example",
    ],
)
def test_outsiders_use_the_same_normalisation(lead_id: str) -> None:
    """Every spelling of the lead's e-mail is the same outsider who never decides."""
    assert models.Lead(id=lead_id).outsiders() == (models.Outsider(email="lena@prospect.example"),)


def test_a_phone_shaped_lead_id_is_no_slack_identity() -> None:
    assert models.Lead(id="+351 900 000 000").outsiders() == ()


def test_outsiders_keep_slack_ids_and_both_emails() -> None:
    lead = models.Lead(
        id="LENA@Prospect.example", email="lena.other@prospect.example", slack_user_id="U0LENA"
    )
    assert lead.outsiders() == (
        models.Outsider(slack_user_id="U0LENA"),
        models.Outsider(email="lena.other@prospect.example"),
        models.Outsider(email="lena@prospect.example"),
    )
