"""The multi-node side of a session (``fastmon.job_link``): node 0's monitor gathers
every node's ranks live and sends its live changes to them; another node's monitor streams
its ranks to node 0 and follows node 0's changes. Its inputs run on the session's state
owner thread, as the session's own do."""

from __future__ import annotations

import json
import time

from fastmon.common.phases import StepRow
from fastmon.job_link import JobServer, NodeClient, NoSecret, job_nodes, job_secret, listen_host, node0_address, \
    node_rank
from fastmon.records import row_problem
from fastmon.report import node_lost_line

NODES_END_WAIT = 8.0  # seconds node 0's monitor waits at the end for the other nodes' last steps


class NodeHub:
    def __init__(self, session) -> None:
        self.session = session
        self.job_server: JobServer | None = None
        self.node_client: NodeClient | None = None
        self.nodes: dict[int, dict] = {}  # node 0: each other node's ranks and link, as seen
        self.rank_nodes: dict[int, int] = {}  # node 0: rank -> the node whose monitor sends it
        self.rejected = 0  # rows another node sent for a rank not its own
        self.refusals = 0  # connections to the job port refused, as the owner thread has heard

    def _notice(self, text: str) -> None:
        self.session._notice(text)

    def _post(self, work, *args) -> None:
        """``work`` on the session's state owner thread."""
        self.session._owner.post(work, *args)

    @property
    def linked(self) -> bool:
        return self.job_server is not None or self.node_client is not None

    def of_this_node(self, rank: int) -> bool:
        return self.rank_nodes.get(rank, 0) == 0

    def own_rank(self, rank: int) -> None:
        """A rank this node's probes sent."""
        self.rank_nodes.setdefault(rank, 0)

    def to_node0(self, message: dict) -> None:
        """Another node's: what node 0 hears of this node's ranks."""
        if self.node_client is not None:
            self.node_client.put(message)

    def to_nodes(self, message: dict) -> None:
        """Node 0's: a live change or a capture for every other node's ranks."""
        if self.job_server is not None:
            self.job_server.send({"t": "control", "message": message})

    def wait_for_nodes(self) -> None:
        """Node 0, at the end: the other nodes' last steps (they end with this one)."""
        if self.job_server is not None:
            deadline = time.monotonic() + NODES_END_WAIT
            while self.job_server.nodes() and time.monotonic() < deadline:
                time.sleep(0.05)

    def end(self, code: int) -> None:
        client = self.node_client
        if client is not None:
            client.close(code)
            if not client.ever_connected and not client.refused:
                self._notice(f"node {client.node} never reached node 0's monitor at {client.address[0]}:"
                                     f"{client.address[1]}: its ranks are in this node's record only")

    def close(self) -> None:
        if self.job_server is not None:
            self.job_server.close()

    def link(self) -> None:
        """A job of several nodes: node 0's monitor gathers every node's ranks live, the
        others stream theirs to it and follow its live changes (fastmon.job_link)."""
        torchrun = self.session.options.torchrun
        node = node_rank(torchrun)
        if job_nodes(torchrun) < 2 or not node.isdigit():
            return
        try:
            secret = job_secret()
        except NoSecret as exc:
            self._notice(f"{exc}: " + ("the other nodes' ranks are not shown here live" if node == "0" else
                                       f"node {node} does not stream its ranks to node 0's monitor")
                         + "; each node's record is whole (fastmon report NODE0 NODE1 ... merges them)")
            return
        address = node0_address(torchrun, self.session.options.job_port)
        if node != "0":
            self.node_client = NodeClient(address, int(node), secret,
                                          lambda message: self._post(self.take_node0_message, message),
                                          lambda text: self._notice(f"node {node}: {text}"))
            self.node_client.start()
            self._notice(f"node {node} follows node 0: live changes come from node 0's monitor, this one "
                         "advises and applies none")
            return
        host, where = listen_host(address[0], self.session.options.job_addr)
        try:
            self.job_server = JobServer(
                secret, host, address[1], lambda n, message: self._post(self.take_node_message, n, message),
                lambda n, when: self._post(self.node_lost, n, when),
                lambda host: self._post(self.link_refused, host))
        except OSError as exc:
            self._notice(f"the live view across nodes is off: port {address[1]} cannot be listened on "
                         f"({exc.strerror or exc}; --job-port names another, the same on every node)")
            return
        self.job_server.start()
        self._post(self.session._state.facts.__setitem__, "job_nodes", job_nodes(torchrun))  # for the status line
        self._notice(f"node 0: the other nodes' monitors stream their ranks to port {self.job_server.port} "
                     f"on {where}")

    def take_node_message(self, node: int, message: dict) -> None:
        kind = message.get("t")
        info = self.node(node)
        if kind == "joined":
            info.update(joined=time.time(), lost=None, address=message.get("address"))
            self.record_event(node, "node_joined", {"address": message.get("address")})
            self._notice(f"node {node} joined the live view (from {message.get('address')})")
        elif kind == "rows":
            for values in message.get("rows") or ():
                self.take_node_row(node, info, values)
        elif kind == "bye" and self.rank_nodes.get(message.get("rank")) == node:
            self.session.steps_made[message["rank"]] = message.get("steps")
        elif kind in ("applied", "reverted"):
            self.session.recorder.put("events", (time.time(), message.get("rank", 0), message.get("step"), kind,
                                                 json.dumps(message, default=str)))
            self.session.experiments.on_ack(message)
        elif kind == "end":
            info.update(ended=time.time(), exit_code=message.get("exit_code"),
                        unsent_rows=message.get("unsent_rows", 0))
            self.record_event(node, "node_ended", {"exit_code": message.get("exit_code"),
                                                    "unsent_rows": message.get("unsent_rows", 0)})

    def take_node_row(self, node: int, info: dict, values) -> None:
        """A step row another node's monitor recorded: taken as its own, once, for a rank
        of that node's alone."""
        if not isinstance(values, list) or len(values) != len(StepRow._fields) or row_problem(values):
            self.rejected += 1
            return
        row = StepRow._make(values)
        owner = self.rank_nodes.setdefault(row.rank, node)
        rank_state = self.session._state.ranks.get(row.rank)
        if owner != node or (rank_state and rank_state.rows and row.step <= rank_state.rows[-1].step):
            self.rejected += owner != node
            return
        if row.rank not in info["ranks"]:
            info["ranks"] = sorted([*info["ranks"], row.rank])
        self.session._take_row(row)

    def node(self, node: int) -> dict:
        """What node 0 knows of ``node``, kept for the record's job link (``figures``)."""
        return self.nodes.setdefault(node, {"ranks": [], "joined": None, "lost": None, "ended": None,
                                            "exit_code": None, "address": None})

    def node_lost(self, node: int, when: float) -> None:
        info = self.node(node)
        info["lost"] = when
        last = {rank: self.session._state.ranks[rank].rows[-1].step for rank in info["ranks"]
                if self.session._state.ranks.get(rank) and self.session._state.ranks[rank].rows}
        self.record_event(node, "node_lost", {"at": when, "last_steps": last})
        self._notice(node_lost_line(node, when, last))

    def link_refused(self, host: str) -> None:
        self.refusals += 1  # counted here: the server's own count may be past 1 when this runs
        if self.refusals == 1:
            self._notice(f"a connection from {host} to the job's link did not prove the job's secret: refused "
                         "(the record counts every one)")

    def record_event(self, node: int, kind: str, data: dict) -> None:
        event = {"kind": kind, "node": node, **data}
        self.session._state.events.append(event)
        self.session.recorder.put("events", (time.time(), 0, None, kind, json.dumps(event, default=str)))

    def take_node0_message(self, message: dict) -> None:
        """Node 0's monitor, to a node's: a live change or a capture for this node's ranks."""
        if message.get("t") == "control" and isinstance(message.get("message"), dict) and self.session.channel:
            self.session.channel.send(message["message"])

    def unlinked(self) -> str | None:
        """Why a live change cannot go to every rank of a multi-node job now, or None: it
        must reach every node, or none."""
        if self.node_client is not None:
            return "node 0's monitor applies live changes for the whole job"
        nodes = job_nodes(self.session.options.torchrun)
        if nodes < 2 or not node_rank(self.session.options.torchrun).isdigit():
            return None
        linked = len(self.job_server.nodes()) + 1 if self.job_server is not None else 1
        if linked < nodes:
            return (f"a live change must reach every node, and {linked} of {nodes} are linked to this monitor"
                    + ("" if self.job_server is not None else " (no job secret)"))
        return None

    def figures(self) -> dict:
        if self.node_client is not None:
            client = self.node_client
            return {"node": client.node, "to": f"{client.address[0]}:{client.address[1]}", "refused": client.refused,
                    "reached": client.ever_connected, "rows_sent": client.rows_sent, "unsent_rows": client.unsent_rows}
        return {"node": 0, "port": self.job_server.port, "nodes": {str(n): i for n, i in sorted(self.nodes.items())},
                "refused": self.job_server.refused, "rejected_rows": self.rejected}
