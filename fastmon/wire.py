"""Length-prefixed JSON frames over a stream socket; shared by probe and monitor.

JSON, never pickle: the other end of the channel is never trusted to run code here.
"""

from __future__ import annotations

import json
import struct

_HEADER = struct.Struct("!I")
MAX_FRAME = 64 * 1024 * 1024
# Built once: json.dumps with options builds an encoder at every call, and the probe's
# publisher encodes inside someone else's training.
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)


def encode(message: dict) -> bytes:
    body = _ENCODER.encode(message).encode()
    return _HEADER.pack(len(body)) + body


class FrameReader:
    """Accumulates received bytes and yields the complete messages in them."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        self._buffer += data
        messages = []
        while len(self._buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buffer)
            if length > MAX_FRAME:
                raise ValueError(f"frame of {length} bytes exceeds the limit")
            end = _HEADER.size + length
            if len(self._buffer) < end:
                break
            messages.append(json.loads(bytes(self._buffer[_HEADER.size:end])))
            del self._buffer[:end]
        return messages
