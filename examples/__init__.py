"""Example training scripts, bundled so that `fastmon demo` finds them after install.

Each one runs as a plain script (`python examples/starved.py`); nothing here imports fastmon.
"""
