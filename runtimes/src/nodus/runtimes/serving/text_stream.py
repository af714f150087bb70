"""A request's completion text as it grows token by token: what may be sent now, and where a stop string ends it.

Who uses it: `batching.Scheduler`, one `TextStream` per request. Each token re-decodes the completion so far (byte-
level tokenizers can leave half a character at the end: the replacement character is held back until the next
token completes it), and text that could be the start of a stop string is held back until it is known not to be
one: so what a stream sends never contains a stop string, and the pieces sent, joined, are exactly the final text.
"""

from __future__ import annotations

from collections.abc import Callable

INCOMPLETE = "\ufffd"


class TextStream:
    def __init__(self, decode: Callable[[list[int]], str], stop: tuple[str, ...] = ()) -> None:
        self._decode = decode
        self._stop = tuple(s for s in stop if s)
        self.token_ids: list[int] = []
        self._text = ""
        self._sent = ""
        self.stopped = False

    @property
    def text(self) -> str:
        """The visible text so far (after a stop string: the final text, the stop string cut off)."""
        return self._text

    def push(self, token_id: int) -> str:
        """Add a token; returns the new text that may be sent now (possibly empty). Sets `stopped` when the text
        reaches a stop string."""
        self.token_ids.append(token_id)
        text = self._decode(self.token_ids)
        cut = self._first_stop(text)
        if cut is not None:
            self._text, self.stopped = text[:cut], True
            return ""
        self._text = text
        safe = len(text) - self._held_back(text)
        if safe <= len(self._sent) or not text.startswith(self._sent):
            return ""
        delta = text[len(self._sent) : safe]
        self._sent += delta
        return delta

    def rest(self) -> str:
        """At the end: the text not yet sent (what was held back)."""
        if not self._text.startswith(self._sent):
            return ""
        delta = self._text[len(self._sent) :]
        self._sent = self._text
        return delta

    def _first_stop(self, text: str) -> int | None:
        # A stop string can only end in text not yet checked, but it may begin in what was held back: search from
        # the start of everything unsent, less the longest stop string.
        start = max(0, len(self._sent) - max((len(s) for s in self._stop), default=0))
        found = [index for s in self._stop if (index := text.find(s, start)) >= 0]
        return min(found) if found else None

    def _held_back(self, text: str) -> int:
        """How many characters at the end of `text` must wait: a half-decoded character, and before it any
        prefix of a stop string."""
        complete = text.rstrip(INCOMPLETE)
        longest = 0
        for stop in self._stop:
            for size in range(min(len(stop) - 1, len(complete)), longest, -1):
                if complete.endswith(stop[:size]):
                    longest = size
                    break
        return len(text) - len(complete) + longest
