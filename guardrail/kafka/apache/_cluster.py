"""A replicated Apache Kafka cluster on loopback: N combined KRaft nodes.

Every node is controller and broker, with its own ports, log directory and
node id, one cluster id for all and every controller in
``controller.quorum.voters``; topics default to ``min(3, N)`` replicas and
``min.insync.replicas`` 2 (1 for a single node). Tests and benchmarks kill,
restart and pause nodes to see what a worker does when a broker fails::

    with ApacheKafkaCluster(workdir=tmp, size=3) as cluster:
        cluster.bootstrap               # "127.0.0.1:40123,127.0.0.1:40125,..."
        cluster.kill(2)                 # SIGKILL node 2
        cluster.restart(2)              # the same node again, its data kept
        cluster.pause(3); cluster.resume(3)   # SIGSTOP / SIGCONT

Three JVMs on two cores start slowly (a small heap each): start one cluster per
test session and name topics per test.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from ..._processes import free_port
from ._broker import ApacheKafkaBroker, Membership, new_cluster_id

__all__ = ["ApacheKafkaCluster"]


class ApacheKafkaCluster:
    """``size`` combined controller + broker nodes, numbered from 1."""

    def __init__(self, *, workdir: Path, size: int = 3, heap: str = "512m",
                 min_insync: int | None = None, config: dict[str, str] | None = None) -> None:
        if size < 1:
            raise ValueError("a cluster needs at least one node")
        self.workdir = Path(workdir)
        controllers = {n: free_port() for n in range(1, size + 1)}
        voters = ",".join(f"{n}@127.0.0.1:{port}" for n, port in controllers.items())
        replication = min(3, size)
        insync = min_insync if min_insync is not None else min(2, replication)
        cluster_id = new_cluster_id()
        self.nodes = {n: ApacheKafkaBroker(
            workdir=self.workdir / f"node-{n}", heap=heap, config=config,
            controller_port=controllers[n],
            membership=Membership(n, voters, cluster_id, replication, insync))
            for n in controllers}

    @property
    def size(self) -> int:
        return len(self.nodes)

    @property
    def bootstrap(self) -> str:
        """Every node's plaintext listener: clients find the cluster from any."""
        return ",".join(node.bootstrap for node in self.nodes.values())

    def start(self, timeout: float = 120.0) -> ApacheKafkaCluster:
        """Start every node, then wait until each answers (a node answers only
        once a majority of the controllers has elected a leader)."""
        for node in self.nodes.values():
            node.launch()
        try:
            for node in self.nodes.values():
                node.wait_ready(timeout)
        except Exception:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Each node's clean shutdown, SIGKILL past ``timeout`` (a throwaway
        cluster, as in the tests, need not wait: its data goes with it)."""
        for number in self.nodes:
            self.resume(number)  # a stopped process cannot take SIGTERM's shutdown
        for node in self.nodes.values():
            node.stop(timeout)

    def pid(self, number: int) -> int | None:
        process = self.nodes[number].process
        return process.pid if process is not None and process.poll() is None else None

    def kill(self, number: int) -> None:
        """SIGKILL node ``number``: no clean shutdown, as when a machine dies."""
        node = self.nodes[number]
        if node.process is not None:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(30)
        node.stop()

    def restart(self, number: int, timeout: float = 120.0) -> None:
        """Start node ``number`` again on its ports and data (after a kill or stop)."""
        node = self.nodes[number]
        if node.process is not None and node.process.poll() is None:
            raise RuntimeError(f"node {number} is running")
        node.launch()
        node.wait_ready(timeout)

    def shutdown(self, number: int, timeout: float = 60.0) -> None:
        """Stop node ``number`` cleanly (SIGTERM), as a rolling restart does:
        it hands its leaderships over before it exits."""
        self.resume(number)
        self.nodes[number].stop(timeout)

    def active_controller(self) -> int | None:
        """The node that leads the controller quorum, from the quorum state
        every node keeps on disk (the newest epoch wins); None before an
        election. Clients cannot ask: a KRaft broker names a random broker as
        "the controller" in its metadata answers."""
        newest: tuple[int, int] | None = None
        for node in self.nodes.values():
            path = node.workdir / "data" / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            epoch, leader = state.get("leaderEpoch", -1), state.get("leaderId", -1)
            if leader >= 0 and (newest is None or epoch > newest[0]):
                newest = (epoch, leader)
        return None if newest is None else newest[1]

    def pause(self, number: int) -> None:
        """SIGSTOP node ``number``: alive but silent, as a long GC pause or a hung host."""
        if (pid := self.pid(number)) is not None:
            os.kill(pid, signal.SIGSTOP)

    def resume(self, number: int) -> None:
        if (pid := self.pid(number)) is not None:
            os.kill(pid, signal.SIGCONT)

    def __enter__(self) -> ApacheKafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
