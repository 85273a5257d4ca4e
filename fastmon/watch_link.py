"""``fastmon watch``'s line to the monitor recording the run: apply and dismiss, as the
dashboard of ``fastmon run`` sends them, answered by that monitor (``Session.watch_command``)
under the run's own ``--apply``. The record names the monitor's socket and the watch
secret (``meta.watch``); the run folder is its owner's alone, and so is the line."""

from __future__ import annotations

import socket

from fastmon.common import wire

ANSWER_WITHIN = 10.0  # seconds: the monitor's owner thread answers in milliseconds unless it is stuck


class WatchLink:
    def __init__(self, channel: str, secret: str) -> None:
        self.channel, self.secret = channel, secret

    @classmethod
    def of(cls, meta: dict) -> WatchLink | None:
        """The line a record names, or None (a record older than it)."""
        watch = meta.get("watch")
        if not isinstance(watch, dict) or not watch.get("channel") or not watch.get("secret"):
            return None
        return cls(watch["channel"], watch["secret"])

    def apply(self, advice_id: str) -> str | None:
        return self._ask("apply", advice_id)

    def dismiss(self, advice_id: str) -> str | None:
        return self._ask("dismiss", advice_id)

    def _ask(self, do: str, advice_id: str) -> str | None:
        """None if the monitor did it; else why not, in words."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(ANSWER_WITHIN)
                conn.connect(self.channel)
                conn.sendall(wire.encode({"t": "watch", "secret": self.secret})
                             + wire.encode({"t": "command", "do": do, "id": advice_id}))
                reader = wire.FrameReader()
                while True:
                    data = conn.recv(65536)
                    if not data:
                        return "the monitor closed the line without an answer (the run has ended?)"
                    for message in reader.feed(data):
                        if message.get("t") == "answer":
                            return message.get("refused")
        except socket.timeout:
            return f"the monitor did not answer within {ANSWER_WITHIN:.0f} s"
        except OSError as exc:
            return f"the monitor cannot be reached ({exc.strerror or exc}): the run has ended, or it was killed"
