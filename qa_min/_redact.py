"""Hiding a secret (the API key) in text: every piece of it 8 characters long or longer.

The one redaction function of the package and of its command line: ``Redactor(key)(text)``, or
``redact(text, key)`` for a single use. A server may echo the key whole, cut short (a truncated
body, a prefix quoted in a message), JSON-escaped or percent-encoded, so what is hidden is any
run of 8 or more characters of any form of the key: as given, as ``json.dumps`` writes it (with
and without ``ensure_ascii``), with ``/`` written ``\\/``, and as ``quote`` and ``quote_plus``
write it. A key shorter than 8 characters is hidden
whole: anywhere in text (a message, a log line), but in values (a success body about to be
decoded, the command line's output of answers and model names: ``values``, ``data``) only
where it stands alone, not inside a word, since a short test key such as ``test`` would
otherwise turn the model ``judge-latest`` into ``judge-la[redacted]`` and the question ``ok``
into no answer. Callers redact before they shorten anything.

How, in one left-to-right scan: every 8-character piece of a form contains one of the form's
4-character blocks at offsets 0, 4, 8, ...; one compiled pattern of those blocks finds the
candidates at C speed, a table of the 8-character pieces confirms one, and the match is
extended as far as the key goes. A piece left behind would have to start where the scan found
no candidate, so none is. Whole copies of the key are replaced first, at ``str.replace`` speed.
"""

from __future__ import annotations

import json
import re
from urllib.parse import quote, quote_plus

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Optional

PIECE = 8
"""Runs of the key this long or longer are hidden; a shorter key is hidden whole."""

_BLOCK = 4


class Redactor:
    """Hides every piece of the given secrets in text; immutable, safe to share between threads.

    Args:
        secrets: The secrets to hide; None and empty strings are ignored.
    """

    __slots__ = ("_alone", "_blocks", "_long", "_mark", "_needles", "_pieces", "_whole")

    def __init__(self, *secrets: Optional[str]) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if secret:
                forms |= _forms(secret)
        # Longest first, so that a form holding another is replaced before it.
        self._whole = sorted(forms, key=len, reverse=True)
        self._pieces: dict[str, list[tuple[str, int]]] = {}
        blocks: set[str] = set()
        for form in forms:
            for i in range(len(form) - PIECE + 1):
                self._pieces.setdefault(form[i : i + PIECE], []).append((form, i))
            if len(form) >= PIECE:
                blocks.update(form[k : k + _BLOCK] for k in range(0, len(form) - _BLOCK + 1, _BLOCK))
        self._blocks = _alternatives(sorted(blocks)) if blocks else None
        short = [form for form in forms if len(form) < PIECE]
        # "surrogatepass": a key read from argv or the environment may hold the surrogates of
        # undecodable bytes; the command line scrubs with it before the client refuses it.
        needles = sorted({b.encode("utf-8", "surrogatepass") for b in blocks | set(short)})
        self._needles = re.compile(b"|".join(map(re.escape, needles))) if needles else None
        self._mark = _mark_for(forms, [*self._pieces, *short])
        self._long = [form for form in self._whole if len(form) >= PIECE]
        self._alone = (
            re.compile("|".join(map(_standing_alone, sorted(short, key=len, reverse=True))))
            if short
            else None
        )

    def __call__(self, text: str) -> str:
        """``text`` with every piece of the secrets replaced by ``[redacted]``."""
        if self._needles is None:
            return text
        for form in self._whole:
            if form in text:
                text = text.replace(form, self._mark)
        return text if self._blocks is None else self._scan(text, self._blocks)

    def data(self, body: bytes) -> bytes:
        """``body`` itself when it holds no piece of a secret (the fast, common case), else redacted
        as ``values`` does.

        A body that holds one is decoded as UTF-8, redacted and encoded again.
        """
        if self._needles is None or self._needles.search(body) is None:
            return body
        text = body.decode("utf-8", "replace")
        try:
            # JSON is redacted as data, string by string: a short key that spells a number,
            # ``true`` or ``null`` is never cut out of its syntax, so the body still parses.
            value = json.loads(text)
            shown_value = self.walk(value)
            if shown_value == value:
                return body
            return json.dumps(shown_value, ensure_ascii=False).encode("utf-8")
        except (ValueError, RecursionError):
            shown = self.values(text)
        return body if shown == text else shown.encode("utf-8")

    def walk(self, value: object, hide: Optional[Callable[[str], str]] = None) -> object:
        """``value``, JSON data, with every string in it (object keys included) redacted by
        ``hide`` (``values`` by default); numbers, booleans and null as they are."""
        hide = self.values if hide is None else hide
        if isinstance(value, str):
            return hide(value)
        if isinstance(value, dict):
            return {hide(str(key)): self.walk(item, hide) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.walk(item, hide) for item in value]
        return value

    def values(self, text: str) -> str:
        """``text`` that holds values someone reads (a body to decode, JSON to print), redacted as
        ``self(text)`` but for a secret shorter than ``PIECE``, hidden only where it stands alone."""
        if self._needles is None:
            return text
        for form in self._long:
            if form in text:
                text = text.replace(form, self._mark)
        if self._alone is not None:
            text = self._alone.sub(self._mark, text)
        return text if self._blocks is None else self._scan(text, self._blocks)

    @property
    def active(self) -> bool:
        """False when there is no secret to hide."""
        return self._needles is not None

    def hides(self, text: str) -> bool:
        """True if ``text`` holds a piece of a secret, which ``self(text)`` would hide."""
        return self(text) != text

    def holds(self, value: object, depth: int = 4) -> bool:
        """True if ``value`` holds a piece of a secret: a str, bytes read as UTF-8 and as latin-1
        (a server's bytes may be either), or a tuple, list, set or dict of them, ``depth`` deep."""
        if self._needles is None:
            return False
        if isinstance(value, str):
            return self.hides(value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
            return self.hides(data.decode("utf-8", "replace")) or self.hides(data.decode("latin-1"))
        if depth > 0 and isinstance(value, dict):
            value = [*value.keys(), *value.values()]
        if depth > 0 and isinstance(value, (tuple, list, set, frozenset)):
            return any(self.holds(item, depth - 1) for item in value)
        return False

    def _scan(self, text: str, blocks: re.Pattern[str]) -> str:
        pieces = self._pieces
        out: list[str] = []
        last = pos = 0  # the end of the last match; where the search goes on
        while True:
            hit = blocks.search(text, pos)
            if hit is None:
                break
            block = hit.start()
            # A piece holding this block starts at most 3 characters before it.
            for start in range(max(pos, block - _BLOCK + 1), block + 1):
                spots = pieces.get(text[start : start + PIECE])
                if spots:
                    end = start + max(_reach(text, start, form, i) for form, i in spots)
                    piece = text[start:end]
                    while text.startswith(piece, end):  # back-to-back copies: one marker for all
                        end += len(piece)
                    if not out or start > last:
                        out += (text[last:start], self._mark)
                    last = pos = end
                    break
            else:
                pos = block + 1
        if not out:
            return text
        out.append(text[last:])
        return "".join(out)


def redact(text: str, *secrets: Optional[str]) -> str:
    """``text`` with every piece of 8 or more characters of each secret hidden (``[redacted]``).

    For a single use; build a ``Redactor`` once to redact many texts with the same secrets.
    """
    return Redactor(*secrets)(text)


def _forms(secret: str) -> set[str]:
    forms = {secret}
    for ascii_only in (True, False):
        escaped = json.dumps(secret, ensure_ascii=ascii_only)[1:-1]
        forms |= {escaped, escaped.replace("/", "\\/")}
    # A server may quote the key in a URL (a login link, a logged query); percent-encoding
    # splits a key holding "/", "+" or "=" into runs too short to be hidden as given.
    # (``secret`` itself when it holds no such character: no new form, no cost.)
    forms.add(quote(secret, safe="", errors="surrogatepass"))
    forms.add(quote_plus(secret, safe="", errors="surrogatepass"))
    return forms


def _mark_for(forms: set[str], pieces: list[str]) -> str:
    # The marker must not hold a piece, nor make one with the text around it: a piece that
    # crosses its edge holds its first or last character.
    for mark in ("[redacted]", "***", "###"):
        edges = (mark[0], mark[-1])
        if not any(edge in form for form in forms for edge in edges) and not any(p in mark for p in pieces):
            return mark
    return "\u2026"  # not latin-1, so never part of a key that can be sent in a header


def _standing_alone(form: str) -> str:
    """A pattern of ``form`` not inside a word: no word character joined to either end."""
    before = r"(?<!\w)" if re.match(r"\w", form[0]) else ""
    after = r"(?!\w)" if re.match(r"\w", form[-1]) else ""
    return before + re.escape(form) + after


def _alternatives(blocks: list[str]) -> re.Pattern[str]:
    return re.compile("|".join(map(re.escape, blocks)))


def _reach(text: str, start: int, form: str, i: int) -> int:
    """How many characters from ``start`` on follow ``form`` from ``i`` on (at least ``PIECE``)."""
    rest = form[i:]
    if text.startswith(rest, start):
        return len(rest)
    n = PIECE
    limit = min(len(rest), len(text) - start)
    while n < limit and text[start + n] == rest[n]:
        n += 1
    return n
