"""Collectives of a tensor-parallel group that spans several nodes of one rack (wide TP).

A group of ``tp = g x m`` chips is ``g`` whole nodes of ``m`` chips (``chips_per_node``); rank
``a * m + r`` is chip ``r`` of the group's node ``a``. Inside a node the chips are fully
connected (local links); between two nodes of a rack the Dragonfly gives ``hop_ports`` direct
global ports (:class:`~pyaccel.sim.lpu.net.Network`). Every transfer here uses a *physical*
link, one id per (direction, chip pair) or per global port, so transfers that share a link
queue on it in the compiler's order (the ``lpu_link_schedule`` kernel): this is where the
chunks of a wide all-reduce contend for a node pair's few ports.

Port numbering (lpu.dragonfly_ports): a node's ``chips_per_node x global_links`` ports are
numbered chip after chip (chip ``c`` owns ports ``c * global_links ...``); the ports toward
its ``d``-th rack peer (peers counted in node order, skipping itself) are numbers
``d * hop_ports ...``. A chunk from chip ``r`` of node ``a`` to node ``b`` takes port
``r mod hop_ports`` of the pair: relayed to that port's owner over a local link, across the
global port to the chip owning the matching port in ``b``, and on to its target chip there
(cut-through relays).

The all-reduce is hierarchical, as a compiler would schedule it for links this uneven (local
pairs ``local_links_per_peer`` links, global ports a share of the spare links): a
reduce-scatter inside each node (chunks ``n/m``), an all-reduce of each chunk among the ``g``
chips of the same rank (one-shot or reduce-scatter + all-gather, the faster), then an
all-gather inside each node. Before its first transfer across nodes every chip realigns to
global time (lpu.cross_node_deskew: ``deskew_cycles``).
"""

from __future__ import annotations

from . import transfers


class _Wide:
    """The transfer list of one wide collective on the physical links of ``g`` nodes."""

    def __init__(self, net, tp: int):
        self.net, self.m = net, net.chips_per_node
        self.g = tp // self.m
        self.b = transfers.Builder()
        self._links: dict = {}

    def link(self, key, bpc: float, lat: int) -> int:
        """The id of physical link ``key`` (made on first use)."""
        if key not in self._links:
            self._links[key] = self.b.new_link(bpc, lat)
        return self._links[key]

    def local(self, node: int, i: int, j: int, n_bytes: int, deps=(), cut=False) -> int:
        """``n_bytes`` from chip ``i`` to chip ``j`` of the group's node ``node``."""
        lk = self.link(("local", node, i, j), self.net.local_bpc, self.net.latency)
        return self.b.send(
            lk, n_bytes, node * self.m + i, deps, cut, slot=transfers.peer_slot(i, j)
        )

    def vxm(self, rank: int, cycles: int, deps) -> int:
        """A chip's own VXM summing partials, as a 1 B/cycle link with the VXM pass latency."""
        lk = self.link(("vxm", rank), 1.0, self.net.vxm_latency)
        return self.b.send(lk, max(1, cycles), rank, deps)

    def deskew(self, rank: int, deps) -> list[int]:
        """The chip's DESKEW before its first transfer across nodes: it waits ``deskew``
        cycles to realign to global time (lpu.cross_node_deskew); none when zero."""
        if self.net.deskew <= 0:
            return list(deps)
        return [self.b.send(self.link(("deskew", rank), 1.0, 0), self.net.deskew, rank, deps)]

    def port(self, node: int, peer: int, k: int) -> tuple[int, int]:
        """(owning chip, link slot) of port ``k`` of node ``node`` toward node ``peer``."""
        d = peer if peer < node else peer - 1
        q = d * self.net.hop_ports + k
        gl = self.net.global_links
        return (q // gl) % self.m, self.m - 1 + q % gl

    def cross(self, a: int, r: int, bn: int, t: int, n_bytes: int, deps) -> int:
        """``n_bytes`` from chip ``r`` of node ``a`` to chip ``t`` of node ``bn``; returns the
        last transfer (its arrival is the data's)."""
        k = r % self.net.hop_ports
        own, slot = self.port(a, bn, k)
        land, _ = self.port(bn, a, k)
        deps, cut = list(deps), False
        if own != r:
            deps, cut = [self.local(a, r, own, n_bytes, deps)], True
        lk = self.link(("global", a, bn, k), self.net.global_bpc, self.net.latency)
        last = self.b.send(lk, n_bytes, a * self.m + own, deps, cut, slot=slot)
        if land != t:
            last = self.local(bn, land, t, n_bytes, [last], cut=True)
        return last

    def finish(self, kind: str, n_bytes: int) -> transfers.Collective:
        vxm = {v for k, v in self._links.items() if k[0] == "vxm"}
        on_chip = {v for k, v in self._links.items() if k[0] in ("vxm", "deskew")}
        return transfers.finish(kind, self.b, self.g * self.m, n_bytes, self.net.vector_bytes,
                                on_chip, vxm)  # fmt: skip


def allreduce(net, tp: int, n_bytes: int, reduce_cycles: int) -> transfers.Collective:
    """Hierarchical all-reduce of ``n_bytes`` over ``tp`` chips of ``tp / m`` nodes (see
    module); ``reduce_cycles`` as :meth:`Network.allreduce` (VXM cycles per ``n/tp`` chunk)."""
    one = _allreduce(net, tp, n_bytes, reduce_cycles, one_shot=True)
    two = _allreduce(net, tp, n_bytes, reduce_cycles, one_shot=False)
    return one if one.cycles <= two.cycles else two


def _allreduce(net, tp: int, n_bytes: int, red: int, one_shot: bool) -> transfers.Collective:
    w = _Wide(net, tp)
    m, g = w.m, w.g
    c1 = -(-n_bytes // m)  # a node's reduce-scatter chunk (g units of n/tp)
    # 1. reduce-scatter inside every node: chip j sums the m partials of chunk j
    held = {}
    for a in range(g):
        into = {j: [w.local(a, i, j, c1) for i in range(m) if i != j] for j in range(m)}
        for j in range(m):
            held[a, j] = w.deskew(a * m + j, [w.vxm(a * m + j, red * g, into[j])])
    # 2. chunk j all-reduced among the g chips of rank j
    if one_shot:
        got = _to_peers(w, c1, held)
        done = {key: [w.vxm(key[0] * m + key[1], red * g, got[key] + held[key])] for key in got}
    else:
        part = _to_peers(w, -(-c1 // g), held)
        red2 = {key: [w.vxm(key[0] * m + key[1], red, part[key] + held[key])] for key in part}
        done = _to_peers(w, -(-c1 // g), red2)
        for key in done:
            done[key] += red2[key]
    # 3. all-gather inside every node
    for a in range(g):
        for i in range(m):
            for j in range(m):
                if i != j:
                    w.local(a, i, j, c1, done[a, i])
    return w.finish("allreduce", n_bytes)


def _to_peers(w: _Wide, n_bytes: int, after: dict) -> dict:
    """Every chip sends ``n_bytes`` to the chip of its rank in every other node once
    ``after[node, rank]`` is done; returns the transfers arriving at each (node, rank)."""
    got = {(bn, j): [] for bn in range(w.g) for j in range(w.m)}
    for a in range(w.g):
        for j in range(w.m):
            for bn in range(w.g):
                if bn != a:
                    got[bn, j].append(w.cross(a, j, bn, j, n_bytes, after[a, j]))
    return got


def allgather(net, tp: int, n_bytes_per_chip: int) -> transfers.Collective:
    """Every chip's ``n_bytes_per_chip`` to every chip: gathered inside each node, then each
    chip sends its node's gathered bytes to the chip of its rank in every other node and on
    to the rest of that node's chips by the local all-gather's links."""
    w = _Wide(net, tp)
    m, g = w.m, w.g
    got = {(a, j): w.deskew(a * m + j, [w.local(a, i, j, n_bytes_per_chip)
                                        for i in range(m) if i != j])
           for a in range(g) for j in range(m)}  # fmt: skip
    for a in range(g):
        for j in range(m):
            for bn in range(g):
                if bn != a:
                    last = w.cross(a, j, bn, j, m * n_bytes_per_chip, got[a, j])
                    for t in range(m):
                        if t != j:
                            w.local(bn, j, t, m * n_bytes_per_chip, [last], cut=True)
    return w.finish("allgather", n_bytes_per_chip * tp)


def broadcast(net, tp: int, n_bytes: int) -> transfers.Collective:
    """Chip 0 of the group sends ``n_bytes`` to its node peers and to one chip of every other
    node (the owner of the landing port), which relays it to its node peers cut-through."""
    w = _Wide(net, tp)
    m, g = w.m, w.g
    for j in range(1, m):
        w.local(0, 0, j, n_bytes)
    sync = w.deskew(0, [])
    for bn in range(1, g):
        land, _ = w.port(bn, 0, 0)
        last = w.cross(0, 0, bn, land, n_bytes, sync)
        for t in range(m):
            if t != land:
                w.local(bn, land, t, n_bytes, [last], cut=True)
    return w.finish("broadcast", n_bytes)


def stage_hop(net, tp_from: int, tp_to: int, n_bytes: int) -> transfers.Collective:
    """Activations from a stage of ``tp_from`` chips to the next of ``tp_to`` (either wider
    than a node): every node of the next stage takes the bytes over ``hop_ports`` parallel
    global ports from one node of the sending stage (its nodes taken in turn), each part
    landing on the port's chip and relayed cut-through to that node's other chips; the
    sending chips are the ports' owners (every chip of a stage holds the activations)."""
    m = net.chips_per_node
    b = transfers.Builder()
    g_from, g_to = -(-tp_from // m), -(-tp_to // m)
    paths = max(1, min(m, net.hop_ports))
    chunk = -(-n_bytes // paths)
    for d in range(g_to):
        a = d % g_from
        for k in range(paths):
            own = min(k, tp_from - a * m - 1) if tp_from < m else k % m
            land = k % min(m, tp_to)
            slot = m - 1 + k % net.global_links
            first = b.send(b.new_link(net.global_bpc, net.latency), chunk, a * m + own, slot=slot)
            for t in range(min(m, tp_to)):
                if t != land:
                    b.send(b.new_link(net.local_bpc, net.latency), chunk,
                           tp_from + d * m + land, [first], cut=True,
                           slot=transfers.peer_slot(land, t))  # fmt: skip
    return transfers.finish("stage_hop", b, tp_from + tp_to, n_bytes, net.vector_bytes)
