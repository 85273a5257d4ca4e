"""What a dashboard panel declares, so that the app needs no line of its own for it."""

from __future__ import annotations


class Panel:
    """Mixed into a widget (``class HostPanel(Panel, Static)``): ``signature(snap)``, a
    value compared with == that changes when what the panel shows does, and
    ``show(snap)``, which draws it. The app calls ``show`` on every mounted panel whose
    signature changed since it last drew, inside one batch update. ``panel_id`` is its
    CSS id. Where it sits is one entry in ``fastmon.tui.app``'s ``LEFT`` or ``BESIDE``:
    its module's name, whose ``PANEL`` is the class (ARCHITECTURE.md, "A new panel, a worked example")."""

    panel_id = ""

    def signature(self, snap) -> object:
        raise NotImplementedError

    def show(self, snap) -> None:
        raise NotImplementedError
