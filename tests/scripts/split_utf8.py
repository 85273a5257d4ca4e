"""Writes multi-byte characters in pieces, as a buffered writer may cut them."""
import os
import time

for word in ("café", "naïve", "日本"):
    data = (word + "\n").encode()
    os.write(1, data[:-2])
    time.sleep(0.15)  # the monitor reads the first piece on its own
    os.write(1, data[-2:])
