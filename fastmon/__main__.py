from fastmon.cli import entry

entry()
