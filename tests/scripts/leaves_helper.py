"""Starts a helper that outlives this script: on the stdout it inherited, it prints once
the file named by the first argument exists. Prints the helper's pid."""
import subprocess
import sys

HELPER = """import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
print('helper done', flush=True)
"""
helper = subprocess.Popen([sys.executable, "-c", HELPER, sys.argv[1]])
print("helper", helper.pid, flush=True)
