"""Archive text made safe to show: control characters and bidi controls written out.

Message text and names come from the export as their authors typed them. Printed raw, an
ESC sequence drives the reader's terminal and a right-to-left override reorders the line
around it, so output can say something it does not. Both the MCP boundary (its one-line
error messages) and the CLI's readable output escape through here. Stdlib only: the CLI
imports it on every command.
"""

import os
import re
import sys
import unicodedata

# The explicit embeddings, overrides and isolates ("Trojan Source"): invisible, yet they
# reorder the text after them up to the end of the line.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Control characters (C0, DEL, C1), lone surrogates, line and paragraph separators.
_ESCAPED_CATEGORIES = frozenset(("Cc", "Cs", "Zl", "Zp"))


def _escape(char: str) -> str:
    """The character, or `\\xNN` / `\\uNNNN` when it is a control, surrogate, line or
    paragraph separator, or bidi control."""
    if unicodedata.category(char) in _ESCAPED_CATEGORIES or char in _BIDI_CONTROLS:
        code = ord(char)
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return char


def escape_controls(text: str, keep: str = "") -> str:
    """The text with every character `_escape` escapes written out, except those in
    `keep`. Idempotent: what it writes contains nothing it would escape."""
    return "".join(char if char in keep else _escape(char) for char in text)


def terminal_line(text: str) -> str:
    """A value shown within one line of terminal output: escaped, tabs kept. A newline is
    written out too, so a name or link cannot start a line of its own and pose as output."""
    return escape_controls(text, keep="\t")


def terminal_text(text: str) -> str:
    """Text the output shows as lines of its own (an answer, one line per part): escaped,
    its newlines and tabs kept."""
    return escape_controls(text, keep="\n\t")


# What `_escape` escapes, less the newline: in JSON text a raw control character can only be
# structural whitespace (`json.dumps` escapes C0 controls inside strings itself), while DEL,
# C1 controls, the separators, bidi controls and lone surrogates are left raw in strings.
_RAW_IN_JSON = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def json_text(document: str) -> str:
    """JSON text (as `json.dumps(..., ensure_ascii=False)` writes it) with every character
    `_escape` would escape written as a JSON `\\uNNNN` escape: the same JSON value, but
    nothing in it drives or reorders a terminal that shows it. Other non-ASCII text (names
    like Zoë) stays readable."""
    return _RAW_IN_JSON.sub(lambda match: f"\\u{ord(match.group(0)):04x}", document)


def quoted(value: object, limit: int = 40) -> str:
    """A value quoted back in a one-line error: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def emphasis() -> tuple[str, str]:
    """How printed text marks a word (a search term, an answering sentence): bold on a
    terminal that takes it (no NO_COLOR, not TERM=dumb), Markdown's `**` elsewhere."""
    plain_terminal = bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM") == "dumb"
    if sys.stdout.isatty() and not plain_terminal:
        return "\033[1m", "\033[0m"
    return "**", "**"
