"""A monitor's server (``channel`` or ``job``) in a process of ``--fds`` file descriptors
at most (``ulimit -n``), as a monitor under the default limit: prints what a client needs
as one JSON line with its CPU seconds so far, then each peer's message, and at the end
its CPU seconds again."""

import argparse
import json
import resource
import sys
import time

from fastmon.channel import ChannelServer
from fastmon.job_link import JobServer

parser = argparse.ArgumentParser()
parser.add_argument("kind", choices=("channel", "job"))
parser.add_argument("--fds", type=int, default=1024)
parser.add_argument("--seconds", type=float, default=30)
parser.add_argument("--secret", default="s3cret")
args = parser.parse_args()
resource.setrlimit(resource.RLIMIT_NOFILE, (args.fds, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def heard(*message):
    print(json.dumps(message[-1]), flush=True)


if args.kind == "channel":
    server = ChannelServer(heard)
    ready = {"path": server.path, "secret": server.secret}
else:
    server = JobServer(args.secret, "127.0.0.1", 0, heard, lambda node, when: None, lambda host: None)
    ready = {"port": server.port}
server.start()
print(json.dumps(dict(ready, cpu=sum(resource.getrusage(resource.RUSAGE_SELF)[:2]))), flush=True)
end = time.monotonic() + args.seconds
for line in sys.stdin:  # "stop" ends it early
    if line.strip() == "stop" or time.monotonic() > end:
        break
print(json.dumps({"cpu": sum(resource.getrusage(resource.RUSAGE_SELF)[:2])}), flush=True)
server.close()
