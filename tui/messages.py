"""Messages the dashboard's widgets and screens post (dataclasses, as Textual allows)."""

from dataclasses import dataclass

from textual.message import Message


@dataclass
class ApplyAdvice(Message):
    """The user asked to hot-apply this advice."""

    advice_id: str


@dataclass
class DismissAdvice(Message):
    """The user dismissed this advice: it is not shown as open, nor applied in auto mode."""

    advice_id: str


@dataclass
class RunEnded(Message):
    """The training process exited (posted by the worker that waits for it)."""

    exit_code: int
