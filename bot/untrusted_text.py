"""Untrusted text made inert for Slack: pure functions, tested property-style.

Everything an agent sends (tool name, call id, arguments, summary, names, a lead's context) is
untrusted, and so is what comes back from elsewhere (a callback's error, a refusal's detail).
All of it reaches Slack through one function, :func:`escape` (or :func:`truncate_escaped`, the
same with a length budget; :func:`fill` puts values into one of our sentences, :func:`plain`
makes plain_text), on every surface: the card, the App Home, the ``/approvals`` answer, the
Deny modal, reminders, escalations and ephemeral answers. What comes out is inert:

* ``&``, ``<`` and ``>`` become entities, so no ``<!channel>``, mention or disguised link;
* Slack's mrkdwn has no escape for its formatting characters, so a ``*``, ``_`` or ``~`` that
  could open or close a span (any not between two ASCII letters or digits: ``transfer_money``
  stays as it is) and every backtick become look-alikes; a ``>`` starting a line cannot quote;
* characters that render as nothing or reorder the text (bidi overrides, zero-width spaces,
  tag characters) are shown as ``[U+202E]``; a zero-width space would also make Slack treat
  the character beside it as a word boundary.

In a code block formatting is off: only the entities, and a zero-width space after each
backtick so the content cannot close the fence. Long text is cut within Slack's limits
(counted in UTF-16 units, as Slack counts) between source characters, never inside an entity.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Literal

__all__ = [
    "VALUE_LIMIT",
    "ZWSP",
    "escape",
    "fill",
    "hidden_as_json_escapes",
    "is_hidden",
    "plain",
    "slack_len",
    "truncate_escaped",
    "value",
]

VALUE_LIMIT = 500  # one untrusted value inside one of our sentences
ZWSP = "\u200b"

# Code points that render as nothing or reorder what follows. The zero-width joiner is left
# alone: emoji sequences (👩‍👧) are made of it, and it breaks no word boundary.
_HIDDEN = frozenset(
    [
        *range(0x00, 0x09),
        *range(0x0B, 0x20),
        *range(0x7F, 0xA0),
        0x00AD,
        0x061C,
        0x180E,
        0x200B,
        0x200C,
        0x200E,
        0x200F,
        0x2028,
        0x2029,
        *range(0x202A, 0x202F),
        *range(0x2060, 0x2065),
        *range(0x2066, 0x206A),
        0xFEFF,
        *range(0xE0000, 0xE0080),
    ]
)
# Look-alikes for mrkdwn's formatting characters (Slack offers no way to escape them).
_LOOKALIKES = {"*": "\u2217", "_": "\u02cd", "~": "\u223c", "`": "\u02cb"}
_QUOTE_LOOKALIKE = "\u203a"  # a ">" that starts a line would quote it
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
Mode = Literal["mrkdwn", "code", "plain"]


def is_hidden(ch: str) -> bool:
    """Whether ``ch`` renders as nothing or reorders the text around it."""
    return ord(ch) in _HIDDEN


def _shown(ch: str) -> str:
    return f"[U+{ord(ch):04X}]"


def _word(ch: str | None) -> bool:
    return ch is not None and ch.isascii() and ch.isalnum()


def _pieces(text: str, mode: Mode) -> list[str]:
    """``text`` rendered for ``mode``, one piece per source character (so a cut between
    pieces never splits an entity, a ``[U+…]`` or a surrogate pair)."""
    out: list[str] = []
    line_start = True  # only spaces since the start or the last newline
    for i, ch in enumerate(text):
        before = text[i - 1] if i else None
        after = text[i + 1] if i + 1 < len(text) else None
        out.append(
            _piece(ch, mode, inside_word=_word(before) and _word(after), line_start=line_start)
        )
        if ch == "\n":
            line_start = True
        elif ch not in " \t":
            line_start = False
    return out


def _piece(ch: str, mode: Mode, *, inside_word: bool, line_start: bool) -> str:
    """One character for ``mode``: plain text only shows hidden characters; code keeps the
    formatting characters (inert there) but splits backtick runs; mrkdwn neutralises all."""
    if ch in "\n\t":
        return ch
    if is_hidden(ch):
        return _shown(ch)
    if mode == "plain":
        return ch
    if ch == ">" and line_start and mode == "mrkdwn":
        return _QUOTE_LOOKALIKE
    if ch in _ENTITIES:
        return _ENTITIES[ch]
    if mode == "code":
        return ch + ZWSP if ch == "`" else ch
    if ch in _LOOKALIKES and (ch == "`" or not inside_word):
        return _LOOKALIKES[ch]
    return ch


# The same rendering as _pieces, in one regex pass that stops only at the characters that
# change (most text has none): cards render every untrusted value, and a Python loop over each
# character was the largest cost of posting a card. _pieces stays the reference (the property
# tests compare the two) and does the cutting, where pieces matter.
def _char_class(points: frozenset[int]) -> str:
    """A regex character class body of ``points``, as ranges (a class of single characters is
    matched by a scan of each)."""
    ranges: list[list[int]] = []
    for p in sorted(points):
        if ranges and ranges[-1][1] == p - 1:
            ranges[-1][1] = p
        else:
            ranges.append([p, p])
    return "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in ranges
    )


_HIDDEN_CLASS = _char_class(_HIDDEN)
_SPECIAL: dict[Mode, re.Pattern[str]] = {
    "plain": re.compile(f"[{_HIDDEN_CLASS}]"),
    "code": re.compile(f"[{_HIDDEN_CLASS}&<>`]"),
    # a ">" after nothing but spaces since the line's start quotes the line
    "mrkdwn": re.compile(f"(?m)(?P<quote>^[ \\t]*>)|[{_HIDDEN_CLASS}&<>`*_~]"),
}


def _render(text: str, mode: Mode) -> str:
    """``"".join(_pieces(text, mode))``, without a step per character."""
    special = _SPECIAL[mode]
    if special.search(text) is None:
        return text

    def one(match: re.Match[str]) -> str:
        found = match.group()
        if match.lastgroup == "quote":
            return found[:-1] + _QUOTE_LOOKALIKE  # the spaces kept, the ">" made inert
        at = match.start()
        inside_word = at > 0 and _word(text[at - 1]) and at + 1 < len(text) and _word(text[at + 1])
        return _piece(found, mode, inside_word=inside_word, line_start=False)

    return special.sub(one, text)


def slack_len(text: str) -> int:
    """The length Slack counts: UTF-16 code units (so emoji-heavy text stays within limits)."""
    if text.isascii():  # one unit a character: most text, counted without encoding it
        return len(text)
    # (surrogatepass: a lone surrogate, which Slack text may hold, counts as the one unit it is)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def hidden_as_json_escapes(json_text: str) -> str:
    """``json_text`` with each hidden character written as its ``\\u`` escape: still the same
    JSON where they can only occur inside strings (as in what ``json.dumps`` writes)."""
    return _SPECIAL["plain"].sub(lambda found: json.dumps(found.group())[1:-1], json_text)


def _cut(pieces: list[str], budget: int) -> tuple[str, int]:
    out, used = [], 0
    for piece in pieces:
        size = slack_len(piece)
        if used + size > budget:
            break
        out.append(piece)
        used += size
    return "".join(out), len(out)


def escape(text: str) -> str:
    """``text`` made inert for mrkdwn: no mention, link, formatting or hidden character."""
    return _render(text, "mrkdwn")


def truncate_escaped(text: str, budget: int, *, code: bool = False) -> tuple[str, int]:
    """``text`` escaped (for a code block if ``code``) and cut to ``budget`` Slack characters,
    with how many characters of ``text`` it shows (fewer than ``len(text)`` means cut).

    Cuts between source characters, so an entity like ``&amp;`` is never split.
    """
    return _within(text, "code" if code else "mrkdwn", budget)


def _within(text: str, mode: Mode, budget: int) -> tuple[str, int]:
    whole = _render(text, mode)
    if slack_len(whole) <= budget:
        return whole, len(text)
    # Each source character renders to one UTF-16 unit at least, so no more than ``budget`` of
    # them fit: only those (and the one after, which decides whether the last is inside a word)
    # are cut into pieces, however long the text.
    return _cut(_pieces(text[: budget + 1], mode)[:budget], budget)


def value(item: object, budget: int = VALUE_LIMIT) -> str:
    """One untrusted value for one of our sentences: escaped, and cut with "…" if long."""
    text = str(item)
    whole, shown = truncate_escaped(text, budget)
    if shown == len(text):
        return whole
    return truncate_escaped(text, budget - 1)[0] + "…"


def fill(template: str, markup: Mapping[str, str] | None = None, **untrusted: object) -> str:
    """One of our sentences (trusted markup) with each untrusted value escaped on its own, so
    our ``*bold*`` survives and theirs cannot form. ``markup``: values we built ourselves."""
    return template.format(**(markup or {}), **{k: value(v) for k, v in untrusted.items()})


def plain(text: str, limit: int) -> str:
    """plain_text is never parsed for mentions or formatting, but hidden characters still
    hide, and it has its own limits (UTF-16 units)."""
    whole, shown = _within(text, "plain", limit)
    if shown == len(text):
        return whole
    return _within(text, "plain", limit - 1)[0] + "…"
