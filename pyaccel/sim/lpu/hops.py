"""The hops between an LPU placement's pipeline stages: after each stage, its activations go to
the next stage's chips over C2C links (the last stage sends the sampled token back to the first),
and each hop's crossing is what the driver's simulated schedule relays (lpu.stage_link_pipeline).
Times are in chip cycles."""

from __future__ import annotations

from ...model.ops import ACT_BYTES, TOKEN_ID_BYTES
from .kinds import TRANSITS_PER_C2C
from .net import hop_crossing


class StageHops:
    """The transfer after every stage (None when one stage holds everything), its cycles and
    its crossing. ``stages``: (chips, layers) per stage (:func:`~.stages.stages_of`)."""

    def __init__(self, graph, net, chip, stages: list, node_size: int):
        self.net, self.chip, self.stages, self.node_size = net, chip, stages, node_size
        self.rows = graph.workload.rows  # a verify step carries step_tokens rows a sequence
        self.sampled = graph.workload.logit_rows  # a prefill chunk samples one row a sequence
        self.hidden = graph.hidden
        self.hops = [self._hop(i) for i in range(len(stages))]
        # cycles of each hop: it leaves through the C2C ports at the chip edge and lands on the
        # next stage's VXM (stream transit at both ends)
        self.totals = [h.cycles + TRANSITS_PER_C2C * chip.transit if h else 0 for h in self.hops]
        self._links_in: tuple | None = None  # the crossing into each stage, made once a run

    def _hop(self, i: int):
        """The transfer after stage ``i``: activations to the next stage, or the sampled token
        back to the first stage (none when one stage holds everything)."""
        n = len(self.stages)
        if n == 1:
            return None
        nxt = (i + 1) % n
        a, b = self.stages[i][0], self.stages[nxt][0]
        same = a[0] // self.node_size == b[0] // self.node_size
        n_bytes = ACT_BYTES * self.rows * self.hidden if nxt else TOKEN_ID_BYTES * self.sampled
        return self.net.stage_hop(len(a), len(b), n_bytes, same)

    def total(self, i: int) -> int:
        """Cycles of the hop after stage ``i`` (``totals``)."""
        return self.totals[i]

    def crossings(self, totals) -> tuple[tuple[int, ...], tuple | None]:
        """(each stage's own cycles, the crossing into each stage) from stage totals that
        include the hop after each (lpu.stage_link_pipeline); no links (the closed form) when
        one stage holds everything."""
        n = len(self.stages)
        if n == 1:
            return tuple(totals), None
        if self._links_in is None:  # the hops are fixed: their crossings once for the run
            out = [self._crossing(i) for i in range(n)]
            self._links_in = tuple(out[-1:] + out[:-1])  # into stage s: the hop after s - 1
        own = tuple(t - h for t, h in zip(totals, self.totals, strict=True))
        return own, self._links_in

    def _crossing(self, i: int) -> tuple[int, int, int, int]:
        """The crossing of the hop after stage ``i`` (:func:`~.net.hop_crossing`)."""
        return hop_crossing(self.hops[i], len(self.stages[i][0]), self.chip.transit,
                            self.total(i))  # fmt: skip
