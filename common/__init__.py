"""The vocabulary every side of fastmon shares: the phases of a step, the channel's wire
format, the step event log, how samples are counted, verdict words, device peaks.

Imported by the probe (in the training process), the advisor, the monitor and the
dashboard; imports none of them, nor torch or textual: only the standard library and
its own modules (checked by tests/test_layering.py).
"""
