"""Length-prefixed frames over a stream socket; shared by probe and monitor.

JSON, never pickle: the other end of the channel is never trusted to run code here. The
one exception to JSON is the step event log (``fastmon.common.step_events``), a flat run of
int64s: its frame is a fixed header and the ints as they lie in memory (both ends are one
machine). As base64 inside JSON it cost the publisher's round more than the rest of the
round together, in someone else's training process. A JSON body starts with ``{``, an
event log's with ``EVENTS_TAG``.
"""

from __future__ import annotations

import json
import struct
from array import array

_HEADER = struct.Struct("!I")
MAX_FRAME = 64 * 1024 * 1024
# Built once: json.dumps with options builds an encoder at every call, and the probe's
# publisher encodes inside someone else's training.
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)
# Seconds between the probe's sends (its publisher's rounds): what a killed trainer may lose,
# and how far a rank may be past what the monitor has heard of it. Why once a second:
# fastmon/probe/publisher.py.
SEND_EVERY = 1.0
EVENTS_TAG = 0
_EVENTS_HEADER = struct.Struct("=B?iqd")  # tag, gap, rank, perf0, wall0


def encode(message: dict) -> bytes:
    body = _ENCODER.encode(message).encode()
    return _HEADER.pack(len(body)) + body


def encode_events(log: array, rank: int, perf0: int, wall0: float, gap: bool) -> bytes:
    """A frame of the step event log (an ``array('q')``); ``gap``: events were dropped before
    it. Read back as ``{"t": "events", "log": bytes, ...}``."""
    header = _EVENTS_HEADER.pack(EVENTS_TAG, gap, rank, perf0, wall0)
    return _HEADER.pack(len(header) + len(log) * log.itemsize) + header + log.tobytes()


def _decode(body: bytes) -> dict:
    if body[:1] == b"{":
        return json.loads(body)
    if len(body) < _EVENTS_HEADER.size or body[0] != EVENTS_TAG:
        raise ValueError(f"a frame that is neither JSON nor an event log (it starts {body[:8]!r})")
    _, gap, rank, perf0, wall0 = _EVENTS_HEADER.unpack_from(body)
    return {"t": "events", "rank": rank, "perf0": perf0, "wall0": wall0, "gap": gap,
            "log": body[_EVENTS_HEADER.size:]}


class FrameReader:
    """Accumulates received bytes and yields the complete messages in them; a frame
    longer than ``max_frame`` is refused (ValueError) before any of it is kept. Below the
    wire's own limit, one message at a time: what follows a hello waits until the hello
    has been judged (``feed(b"")`` then takes it, with the limit raised or not)."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self._buffer = bytearray()
        self.max_frame = max_frame

    def feed(self, data: bytes) -> list[dict]:
        self._buffer += data
        messages = []
        while len(self._buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buffer)
            if length > self.max_frame:
                raise ValueError(f"frame of {length} bytes exceeds the limit")
            end = _HEADER.size + length
            if len(self._buffer) < end:
                break
            messages.append(_decode(bytes(self._buffer[_HEADER.size:end])))
            del self._buffer[:end]
            if self.max_frame < MAX_FRAME:
                break
        return messages
