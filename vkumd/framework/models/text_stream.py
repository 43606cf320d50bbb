"""Generated ids to text as they come: whole characters only, stop strings held back.

A byte-level BPE token may carry part of a UTF-8 character (an emoji is often three or four
tokens), so a token's text cannot be decoded alone. :class:`Detokenizer` decodes a short
window of recent ids twice, without and with the newest, and emits the difference once it no
longer ends in U+FFFD (a character still incomplete) -- the same scheme as Hugging Face's
text-generation-inference, so the cost per token does not grow with the text.
:class:`StopFilter` then holds back any tail that could still become a stop string, so the
text of a stop string that spans tokens is never emitted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

# Prompt ids decoded ahead of the first generated one: a tokenizer that drops a leading
# space at the start of a decode (SentencePiece's) then keeps the first token's space.
PROMPT_CONTEXT = 4
_INCOMPLETE = "\ufffd"


class Detokenizer:
    """Incremental decoding of one sequence.

    Args:
        decode: ids -> text (special tokens skipped), e.g. a ``tokenizers.Tokenizer``'s
            ``decode``.
        prompt_ids: the prompt; its last :data:`PROMPT_CONTEXT` ids open the window.
    """

    def __init__(self, decode: Callable[[list[int]], str],
                 prompt_ids: Sequence[int] = ()) -> None:
        self._decode = decode
        self._ids = list(prompt_ids[-PROMPT_CONTEXT:]) if PROMPT_CONTEXT else []
        self._prefix = 0                 # the window's start in _ids
        self._read = len(self._ids)      # ids up to here have been emitted as text

    def add(self, token: int) -> str:
        """Take one generated id; return the text that became complete (maybe "")."""
        self._ids.append(int(token))
        before = self._decode(self._ids[self._prefix:self._read])
        after = self._decode(self._ids[self._prefix:])
        if len(after) > len(before) and not after.endswith(_INCOMPLETE):
            self._prefix, self._read = self._read, len(self._ids)
            return after[len(before):]
        return ""

    def flush(self) -> str:
        """The text of ids not yet emitted (at the end: an incomplete character is emitted
        as U+FFFD, as llama.cpp and Hugging Face do)."""
        before = self._decode(self._ids[self._prefix:self._read])
        after = self._decode(self._ids[self._prefix:])
        self._prefix = self._read = len(self._ids)
        return after[len(before):] if len(after) > len(before) else ""


class StopFilter:
    """Cuts a text stream at the first stop string.

    Args:
        stops: the stop strings (non-empty).
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(stops)
        self._held = ""
        self.stopped = False

    def add(self, text: str) -> str:
        """Take more text; return what can be emitted now. After a stop string is seen,
        :attr:`stopped` is True and nothing more is returned."""
        if self.stopped or not text:
            return ""
        if not self.stops:
            return text
        buffer = self._held + text
        found = [index for index in (buffer.find(stop) for stop in self.stops) if index >= 0]
        if found:
            self.stopped = True
            self._held = ""
            return buffer[:min(found)]
        hold = 0
        for stop in self.stops:
            for length in range(min(len(stop) - 1, len(buffer)), hold, -1):
                if buffer.endswith(stop[:length]):
                    hold = length
                    break
        self._held = buffer[len(buffer) - hold:] if hold else ""
        return buffer[:len(buffer) - hold]

    def flush(self) -> str:
        """At the end without a stop: the text held back."""
        held, self._held = self._held, ""
        return "" if self.stopped else held
