"""C2C network of an LPU system: explicit, compiler-ordered transfer schedules (no contention
surprises) for the collectives of a tensor-parallel group and the hops between pipeline stages.

Topology (named assumptions in the preset): chips of a node are fully connected with
``local_links_per_peer`` links per pair; the node's remaining links form ``global_links`` ports per
chip into a Dragonfly whose groups are racks of ``chips_per_rack`` active chips. Consecutive
pipeline stages sit on nodes joined directly by global ports: a node's ``global_links x
chips_per_node`` ports reach its ``nodes_per_rack - 1`` rack peers (and, for the rack's boundary
node, the next rack) with an equal share each. Every transfer pays its serialisation on its link
(bytes / link rate) and one hop latency (``c2c_latency_s``).
"""

from __future__ import annotations

import math

from ...errors import ConfigError
from . import wide
from .transfers import Builder, Collective, finish, peer_slot

# Transfer schedules, shared by every Network of a process with the same rates and topology
# (``Network.key``): a schedule is a pure function of those and its arguments, and a wide
# tensor-parallel all-reduce takes milliseconds to build, so a run's what-ifs and later runs
# of the same system reuse what an earlier one built.
_SCHEDULES: dict = {}
_SCHEDULES_MAX = 4096  # entries; a run needs a few dozen


def _memo(method):
    """Cache a Network method's result per the network's ``key`` and the arguments."""

    def wrapper(self, *args):
        key = (self.key, method.__name__, args)
        hit = _SCHEDULES.get(key)
        if hit is None:
            if len(_SCHEDULES) >= _SCHEDULES_MAX:
                _SCHEDULES.clear()
            hit = _SCHEDULES[key] = method(self, *args)
        return hit

    wrapper.__name__, wrapper.__doc__ = method.__name__, method.__doc__
    return wrapper


class Network:
    """Link rates and latencies of one system (cycles of its clock) and the transfer schedules
    of the collectives its tensor-parallel groups and pipeline stages need."""

    def __init__(self, params, clock_hz: float):
        p = params
        self.vector_bytes = int(p.vector_bytes)
        self.latency = math.ceil(float(p.c2c_latency_s) * clock_hz)
        node = int(p.chips_per_node)
        per_peer = int(p.local_links_per_peer)
        spare = int(p.c2c_links) - per_peer * (node - 1)
        if spare <= 0 or int(p.global_links) < 1:
            raise ConfigError(
                f"lpu topology: {int(p.c2c_links)} C2C links cannot give {per_peer} link(s) to "
                f"each of {node - 1} node peers and still feed {int(p.global_links)} global ports"
            )
        self.local_bpc = per_peer * float(p.c2c_bytes_per_s) / clock_hz
        self.global_bpc = spare * float(p.c2c_bytes_per_s) / int(p.global_links) / clock_hz
        if not math.isfinite(self.local_bpc) or not math.isfinite(self.global_bpc):
            raise ConfigError(
                f"lpu links: c2c_bytes_per_s={float(p.c2c_bytes_per_s):g} at clock_hz="
                f"{clock_hz:g} is not a finite number of bytes per cycle; the clock is too slow "
                "to resolve a transfer (check --set values)"
            )
        nodes_per_rack = max(1, int(p.chips_per_rack) // node)
        node_ports = int(p.global_links) * node
        # ports joining two nodes: the node's global ports shared over its rack peers (one rack
        # of one node still reaches the next rack over all its ports)
        self.hop_ports = max(1, node_ports // max(1, nodes_per_rack - 1))
        self.chips_per_node = node
        self.nodes_per_rack = nodes_per_rack
        self.global_links = int(p.global_links)
        self.deskew = math.ceil(float(p.deskew_cycles))
        # a chip's VXM summing partials: its pass latency follows the cycles it occupies
        self.vxm_latency = math.ceil(float(p.vxm_latency_cycles))
        # what a collective's schedule depends on besides its own arguments
        self.key = (self.vector_bytes, self.latency, self.local_bpc, self.global_bpc,
                    self.hop_ports, node, self.nodes_per_rack, self.global_links, self.deskew,
                    self.vxm_latency)  # fmt: skip

    # ---- collectives inside one tensor-parallel group (fully connected chips of a node, or
    # whole nodes of one rack: :mod:`pyaccel.sim.lpu.wide`) ----

    def _wide(self, tp: int) -> bool:
        """Whether a group of ``tp`` chips spans nodes (then ``tp`` is whole nodes of a rack)."""
        node = self.chips_per_node
        if tp <= node:
            return False
        if tp % node or tp // node > self.nodes_per_rack:
            raise ConfigError(
                f"lpu tensor-parallel group of {tp} chips: a group wider than a node "
                f"({node} chips) must be whole nodes of one rack ({self.nodes_per_rack} nodes)"
            )
        return True

    @_memo
    def allreduce(self, tp: int, n_bytes: int, reduce_cycles: int) -> Collective:
        """All-reduce of ``n_bytes`` partial sums over ``tp`` chips: the faster of one-shot
        (every chip sends its whole partial to every peer) and reduce-scatter + all-gather
        (chunks of n/tp; each chip reduces its chunk and sends it back to every peer), as a
        compiler would pick by message size. ``reduce_cycles``: cycles the VXM is busy summing
        the partials of one n/tp chunk (one-shot sums tp chunks' worth); each sum's result
        trails its last cycle by the VXM pass latency."""
        if tp <= 1:
            return Collective("allreduce", 0, n_bytes, (0,), (0,), (0,), 0)
        if self._wide(tp):
            return wide.allreduce(self, tp, n_bytes, reduce_cycles)
        one = self._one_shot(tp, n_bytes, reduce_cycles)
        two = self._rs_ag(tp, n_bytes, reduce_cycles)
        return one if one.cycles <= two.cycles else two

    def _one_shot(self, tp: int, n_bytes: int, reduce_cycles: int) -> Collective:
        b = Builder()
        links = {(i, j): b.new_link(self.local_bpc, self.latency) for i in range(tp)
                 for j in range(tp) if i != j}  # fmt: skip
        vxm = [b.new_link(1.0, self.vxm_latency) for _ in range(tp)]
        into = {j: [] for j in range(tp)}
        for i in range(tp):
            for j in range(tp):
                if i != j:
                    into[j].append(b.send(links[i, j], n_bytes, i, slot=peer_slot(i, j)))
        for j in range(tp):  # each chip sums the tp partials it now holds
            b.send(vxm[j], max(1, reduce_cycles * tp), j, into[j])
        return self._finish("allreduce", b, tp, n_bytes, skip_links=set(vxm))

    def _rs_ag(self, tp: int, n_bytes: int, reduce_cycles: int) -> Collective:
        b = Builder()
        links = {(i, j): b.new_link(self.local_bpc, self.latency) for i in range(tp)
                 for j in range(tp) if i != j}  # fmt: skip
        # the chip's own VXM reducing its chunk, as a 1 B/cycle "link" with the pass latency
        vxm = [b.new_link(1.0, self.vxm_latency) for _ in range(tp)]
        chunk = -(-n_bytes // tp)
        into = {j: [] for j in range(tp)}
        for i in range(tp):
            for j in range(tp):
                if i != j:
                    into[j].append(b.send(links[i, j], chunk, i, slot=peer_slot(i, j)))
        reduced = [b.send(vxm[j], max(1, reduce_cycles), j, into[j]) for j in range(tp)]
        for j in range(tp):
            for i in range(tp):
                if i != j:
                    b.send(links[j, i], chunk, j, [reduced[j]], slot=peer_slot(j, i))
        return self._finish("allreduce", b, tp, n_bytes, skip_links=set(vxm))

    @_memo
    def allgather(self, tp: int, n_bytes_per_chip: int) -> Collective:
        """Every chip sends its ``n_bytes_per_chip`` to every peer (direct, fully connected)."""
        if tp <= 1:
            return Collective("allgather", 0, n_bytes_per_chip, (0,), (0,), (0,), 0)
        if self._wide(tp):
            return wide.allgather(self, tp, n_bytes_per_chip)
        b = Builder()
        for i in range(tp):
            for j in range(tp):
                if i != j:
                    b.send(b.new_link(self.local_bpc, self.latency), n_bytes_per_chip, i,
                           slot=peer_slot(i, j))  # fmt: skip
        return self._finish("allgather", b, tp, n_bytes_per_chip * tp)

    @_memo
    def broadcast(self, tp: int, n_bytes: int) -> Collective:
        """Chip 0 of the group sends ``n_bytes`` to each peer over its own link to it."""
        if tp <= 1:
            return Collective("broadcast", 0, n_bytes, (0,), (0,), (0,), 0)
        if self._wide(tp):
            return wide.broadcast(self, tp, n_bytes)
        b = Builder()
        for j in range(1, tp):
            b.send(b.new_link(self.local_bpc, self.latency), n_bytes, 0, slot=peer_slot(0, j))
        return self._finish("broadcast", b, tp, n_bytes)

    # ---- hops between pipeline stages ----

    @_memo
    def stage_hop(self, tp_from: int, tp_to: int, n_bytes: int, same_node: bool) -> Collective:
        """Activations from one stage (every chip holds them after its all-reduce) to the next:
        split over ``ports`` parallel paths (global ports between nodes, or local links inside
        one node), each landing on one chip of the next stage, which relays its part to the
        stage's other chips (cut-through over local links): two hops per byte."""
        if tp_from > self.chips_per_node or tp_to > self.chips_per_node:
            return wide.stage_hop(self, tp_from, tp_to, n_bytes)
        b = Builder()
        bpc = self.local_bpc if same_node else self.global_bpc
        ports = max(1, min(tp_from, tp_to, self.hop_ports if not same_node else tp_from))
        chunk = -(-n_bytes // ports)
        for r in range(ports):
            port = (
                peer_slot(r, r + 1)
                if same_node
                else self.chips_per_node - 1 + r % self.global_links
            )
            first = b.send(b.new_link(bpc, self.latency), chunk, r, slot=port)
            for j in range(tp_to):
                if j != r:
                    link = b.new_link(self.local_bpc, self.latency)
                    b.send(link, chunk, tp_from + r, [first], cut=True, slot=peer_slot(r, j))
        return self._finish("stage_hop", b, tp_from + tp_to, n_bytes)

    def _finish(self, kind, b: Builder, n_chips: int, n_bytes: int, skip_links=()):
        return finish(kind, b, n_chips, n_bytes, self.vector_bytes, skip_links)


def hop_crossing(hop, n_from: int, transit: int, total: int) -> tuple[int, int, int, int]:
    """``(busy, latency, relay_offset, relay_busy)`` of a stage hop whose sending chips' first
    ``n_from`` ranks send through the ports (the rest relay) and that takes ``total`` cycles:
    it holds its ports from the first sending chip's start to the last one's end, so the next
    micro-batch's hop waits only for the ports; the next stage's chips then relay it over that
    stage's own links (lpu.relay_gap_fill) from the first relaying chip's start to the last
    one's end, after the stream ``transit`` to the ports; the rest is latency."""
    windows = zip(hop.send_start, hop.send_end, hop.send_bytes, strict=True)
    sends = [(rank >= n_from, a, b) for rank, (a, b, nb) in enumerate(windows) if nb]
    port = [(a, b) for is_relay, a, b in sends if not is_relay]
    relay = [(a, b) for is_relay, a, b in sends if is_relay]
    busy = max(b for _, b in port) - min(a for a, _ in port) if port else 0
    if not relay:
        return busy, total - busy, 0, 0
    r0 = transit + min(a for a, _ in relay)
    r1 = transit + max(b for _, b in relay)
    return busy, total - r1, r0, r1 - r0
