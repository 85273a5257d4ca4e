"""The dashboard: a Textual app over a live session or a recorded run.

Widgets live in ``widgets/``, modal screens in ``screens/``, styles in ``fastmon.tcss``.
The app reads a snapshot of the run on a timer (a few Hz) and redraws inside
``batch_update``: step records are never pushed at the screen one by one.

May import: textual, textual-plotext, rich, ``fastmon`` (session, records, summary, report,
advisor window, and the watch's line to a monitor: ``fastmon.watch_link``). Never torch, and never anything that patches it (tests check it).
"""
