"""JsonProgress: when each top-level field of a JSON document streamed in pieces became complete.

What a UI can show of structured output (or of a tool call's arguments) depends on when each field is whole,
not on when tokens arrive. This follows the JSON grammar incrementally, a token at a time with regular
expressions over only the new text, so a chunk costs O(its own bytes) however long the document has grown;
re-parsing the prefix on every chunk costs O(document) per chunk.

A field is complete when its value is: a string, object or array at its closing character, a number or literal
at the character after it (until then ``12`` may become ``123``). The elements of a top-level array count as
its fields, named ``[0]``, ``[1]``, ... The document is valid when its top-level value closes; it is malformed
when a character breaks the grammar (or anything but whitespace follows the document), truncated when the
stream ends first.
"""

from __future__ import annotations

import json
import re
from typing import Literal

Outcome = Literal["valid", "truncated", "malformed"]

MAX_FIELDS = 32
"""Top-level fields whose names and completion times are kept; later ones are only counted."""

_SPACE = re.compile(r"[ \t\n\r]*")
_STRING_RUN = re.compile(r'[^"\\\x00-\x1f]*')
_SCALAR_RUN = re.compile(r"[-+.0-9a-zA-Z]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_LITERALS = frozenset({"true", "false", "null"})
_SCALAR_START = frozenset("-0123456789tfn")
_ESCAPES = frozenset('"\\/bfnrt')
_HEX = frozenset("0123456789abcdefABCDEF")

# What the next token may be.
_VALUE, _VALUE_OR_CLOSE, _KEY, _KEY_OR_CLOSE, _COLON, _AFTER, _DONE, _FAILED = range(8)


class JsonProgress:
    """Feed the document's text as it arrives, each piece with the time it arrived (any clock, ns)."""

    __slots__ = (
        "_escape",
        "_in_key",
        "_in_string",
        "_item",
        "_key",
        "_key_parts",
        "_scalar",
        "_stack",
        "_state",
        "field_count",
        "fields",
        "last_ns",
        "started_ns",
        "valid_ns",
    )

    def __init__(self) -> None:
        self._state = _VALUE
        self._stack: list[str] = []
        self._in_string = False
        self._in_key = False
        self._escape = ""
        self._key_parts: list[str] = []
        self._key = ""
        self._item = 0
        self._scalar = ""
        self.fields: list[tuple[str, int]] = []
        """(name, time complete) of the first ``MAX_FIELDS`` top-level fields, in the order they completed."""
        self.field_count = 0
        self.started_ns: int | None = None
        """When the first character of the document arrived."""
        self.valid_ns: int | None = None
        self.last_ns: int | None = None

    @property
    def outcome(self) -> Outcome:
        if self._state == _FAILED:
            return "malformed"
        return "valid" if self.valid_ns is not None else "truncated"

    def feed(self, text: str, now_ns: int) -> None:
        """Follow ``text``, the next piece of the document, which arrived at ``now_ns``."""
        if self._state == _FAILED or not text:
            return
        if self.started_ns is None:
            start = _run(_SPACE, text, 0)
            if start == len(text):
                return
            self.started_ns = now_ns
        self.last_ns = now_ns
        i, end = 0, len(text)
        while i < end and self._state != _FAILED:
            if self._in_string:
                i = self._string(text, i, now_ns)
            elif self._scalar:
                i = self._scalar_token(text, i, now_ns)
            else:
                i = _run(_SPACE, text, i)
                if i < end:
                    i = self._token(text, i, now_ns)

    def finish(self) -> None:
        """The stream ended: a number or literal at the very end of a top-level scalar document completes it."""
        if self._scalar and not self._stack and self._state == _VALUE:
            token, self._scalar = self._scalar, ""
            if _valid_scalar(token):
                self.valid_ns, self._state = self.last_ns, _DONE
            else:
                self._state = _FAILED

    def _token(self, text: str, i: int, now_ns: int) -> int:
        c = text[i]
        state = self._state
        if c == '"' and state in (_KEY, _KEY_OR_CLOSE, _VALUE, _VALUE_OR_CLOSE):
            self._in_string = True
            self._in_key = state in (_KEY, _KEY_OR_CLOSE)
            return i + 1
        if c in "{[" and state in (_VALUE, _VALUE_OR_CLOSE):
            self._stack.append(c)
            self._state = _KEY_OR_CLOSE if c == "{" else _VALUE_OR_CLOSE
            return i + 1
        if c in "}]" and self._stack and self._stack[-1] == ("{" if c == "}" else "["):
            if state in (_AFTER, _KEY_OR_CLOSE if c == "}" else _VALUE_OR_CLOSE):
                self._stack.pop()
                self._value_done(now_ns)
                return i + 1
        elif c == ":" and state == _COLON:
            self._state = _VALUE
            return i + 1
        elif c == "," and state == _AFTER and self._stack:
            if self._stack[-1] == "{":
                self._state = _KEY
            else:
                self._state = _VALUE
                if len(self._stack) == 1:
                    self._item += 1
            return i + 1
        elif c in _SCALAR_START and state in (_VALUE, _VALUE_OR_CLOSE):
            return self._scalar_token(text, i, now_ns)
        self._state = _FAILED
        return len(text)

    def _scalar_token(self, text: str, i: int, now_ns: int) -> int:
        """A number or literal, which may go on in the next piece: it ends at the first character that cannot
        continue it."""
        end = _run(_SCALAR_RUN, text, i)
        self._scalar += text[i:end]
        if end == len(text):
            return end
        token, self._scalar = self._scalar, ""
        if _valid_scalar(token):
            self._value_done(now_ns)
        else:
            self._state = _FAILED
        return end

    def _string(self, text: str, i: int, now_ns: int) -> int:
        if self._escape:
            return self._escape_sequence(text, i)
        run = _run(_STRING_RUN, text, i)
        if self._in_key and len(self._stack) == 1:
            self._key_parts.append(text[i:run])
        if run == len(text):
            return run
        c = text[run]
        if c == '"':
            self._in_string = False
            if self._in_key:
                if len(self._stack) == 1:
                    self._key = json.loads('"' + "".join(self._key_parts) + '"')
                    self._key_parts.clear()
                self._state = _COLON
            else:
                self._value_done(now_ns)
            return run + 1
        if c == "\\":
            self._escape = "\\"
            return self._escape_sequence(text, run + 1)
        self._state = _FAILED  # a raw control character
        return len(text)

    def _escape_sequence(self, text: str, i: int) -> int:
        """``\\x`` or ``\\uXXXX``, possibly split across pieces."""
        escape = self._escape
        while i < len(text):
            escape += text[i]
            i += 1
            if len(escape) == 2:
                if escape[1] in _ESCAPES:
                    break
                if escape[1] != "u":
                    self._state = _FAILED
                    return len(text)
            elif escape[-1] not in _HEX:
                self._state = _FAILED
                return len(text)
            elif len(escape) == 6:
                break
        else:
            self._escape = escape
            return i
        self._escape = ""
        if self._in_key and len(self._stack) == 1:
            self._key_parts.append(escape)
        return i

    def _value_done(self, now_ns: int) -> None:
        depth = len(self._stack)
        if depth == 0:
            self.valid_ns = now_ns
            self._state = _DONE
            return
        self._state = _AFTER
        if depth == 1:
            self.field_count += 1
            if len(self.fields) < MAX_FIELDS:
                name = self._key if self._stack[0] == "{" else f"[{self._item}]"
                self.fields.append((name, now_ns))


def _run(pattern: re.Pattern[str], text: str, i: int) -> int:
    """Where the run of ``pattern`` (a starred class: it always matches) starting at ``i`` ends."""
    return pattern.match(text, i).end()  # type: ignore[union-attr]


def _valid_scalar(token: str) -> bool:
    return token in _LITERALS or _NUMBER.fullmatch(token) is not None
