"""Archive text made safe to show: control characters and bidi controls written out.

Message text and names come from the export as their authors typed them. Printed raw, an
ESC sequence drives the reader's terminal and a right-to-left override reorders the line
around it, so output can say something it does not. Both the MCP boundary (its one-line
error messages) and the CLI's readable output escape through here. Stdlib only: the CLI
imports it on every command.
"""

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
