"""Compile one chip's share of a pipeline stage into TSP instructions and list-schedule them.

Resources of one chip (each a functional slice with its own in-order instruction queue):

- ``install[p]`` (class ``lpu_mem``): MEM reads streamed into MXM plane ``p``'s weight buffer,
  ``wi`` vectors per cycle (``weight_install_streams``, capped by the streams of a direction
  shared by the hemisphere's planes and by the MEM slices that can read a vector per cycle);
- ``mxm[p]`` (``lpu_mxm``): the plane computing, one activation vector per cycle; weight-stationary
  with ``weight_buffers_per_plane`` weight buffers (two: block ``j+2`` may install while block
  ``j`` computes);
- ``vxm`` (``lpu_vxm``): 16 ALUs per lane, a chain of ``c`` ALU ops on ``v`` vectors occupies
  ceil(v c / 16) cycles;
- ``sxm`` (``lpu_sxm``): shifts/transposes for cross-lane reductions;
- ``memio`` (``lpu_mem``): activation and KV-cache vectors written to MEM.

Data handed from one functional slice to another crosses ``transit`` cycles of stream
(``mem_slices / hemispheres`` slice hops across a hemisphere plus the ripple of the instruction
down the ``superlanes``, ``stream_hop_cycles`` each: lpu.stream_transit). A C2C transfer crosses
it ``TRANSITS_PER_C2C`` times: from the producing slice to the chip-edge ports, and from the
ports to the receiving slice. A collective is a delay whose length the network's transfer
schedule gives (:mod:`pyaccel.sim.lpu.net`), beside the stream and VXM work it does on the chip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from ...kernels import get as get_kernel
from ...model.ops import ACT_BYTES
from .kinds import _GEMV_BLOCK, TRANSITS_PER_C2C, kind_codes
from .scheduled import Scheduled

INPUT = -2  # a fragment's dependency on the previous op's output, filled in when joined


def _is_dep(d) -> bool:
    """Whether ``d`` names an instruction to wait for (an index, or ``INPUT``; None and -1,
    "nothing yet", do not)."""
    return d is not None and (d >= 0 or d == INPUT)


def _ceil(x: float) -> int:
    return int(math.ceil(x - 1e-9)) if x > 0 else 0


_CHIPS: dict = {}  # each distinct ChipModel, by its fields (ChipModel.from_params)


@dataclass(frozen=True)
class ChipModel:
    """Timing constants of one chip derived from its parameters (integer cycles)."""

    planes: int
    block_weights: int  # weights held by one plane's block in the operand format
    install_cycles: int  # cycles to install one block
    mxm_latency: int
    vxm_latency: int
    sxm_latency: int
    sxm_pass: int  # cycles one transpose occupies the SXM (at least 1)
    ops_per_elem: tuple  # (pass name, VXM ALU ops per element) of the passes the preset names
    transit: int
    weight_buffers: int  # weight blocks a plane holds (lpu.double_buffered_weights)
    alus: int
    elems_per_vector: int
    vector_bytes: int
    reduce_rounds: int
    memio_vectors_per_cycle: int
    operand_bytes: int
    # for the lower bound (sim/lpu/bounds.py): one block's install at the most streams one
    # plane can take alone, a block's vectors, and the whole chip's install vectors per cycle
    install_cycles_alone: int = 1
    block_install_vectors: float = 0.0
    install_vectors_per_cycle: float = 1.0

    @classmethod
    def from_params(cls, p) -> ChipModel:
        """Derive the constants; what-if factors may have made integer fields fractional, so
        counts round down and latencies round up."""
        planes = max(1, int(p.mxm_planes))
        op_bytes = max(1, int(p.mxm_operand_bytes))
        side = max(1, int(p.mxm_dim) // op_bytes)
        vec = int(p.vector_bytes)
        # install vectors per cycle per plane: its own streams, a hemisphere's streams shared by
        # its planes, and MEM slices each reading one vector per cycle
        hemis = max(1, int(p.hemispheres))
        per_hemi = max(1, planes // hemis)
        slices_per_hemi = int(p.mem_slices) // hemis
        wi = min(
            float(p.weight_install_streams),
            float(p.streams_per_direction) / per_hemi,
            float(p.mem_slices) / planes,
        )
        install = _ceil(side * side * op_bytes / (wi * vec))
        # the most a plane could take alone (its own streams, a direction's, every MEM slice)
        # and the chip's total: the lower bound's rates, which more planes never lower
        wi_alone = min(float(p.weight_install_streams), float(p.streams_per_direction),
                       float(p.mem_slices))  # fmt: skip
        wi_chip = min(planes * float(p.weight_install_streams),
                      hemis * float(p.streams_per_direction), float(p.mem_slices))  # fmt: skip
        lanes = max(2, vec // max(1, int(p.superlanes)))  # lanes of one superlane
        elems = max(1, vec // ACT_BYTES)
        rounds, span = 0, 1
        while span < elems:  # transposes of lanes x lanes blocks until one lane holds the sum
            span *= lanes
            rounds += 1
        made = cls(
            planes=planes,
            block_weights=side * side,
            install_cycles=max(1, install),
            mxm_latency=_ceil(float(p.mxm_latency_cycles)),
            vxm_latency=_ceil(float(p.vxm_latency_cycles)),
            sxm_latency=_ceil(float(p.sxm_latency_cycles)),
            sxm_pass=max(1, _ceil(float(p.sxm_pass_cycles))),
            transit=_ceil(float(p.stream_hop_cycles) * (slices_per_hemi + int(p.superlanes))),
            weight_buffers=max(1, int(p.weight_buffers_per_plane)),
            ops_per_elem=(
                ("norm", max(1, int(p.norm_vxm_ops_per_elem))),
                ("softmax_exp", max(1, int(p.softmax_exp_vxm_ops_per_elem))),
                ("softmax_scale", max(1, int(p.softmax_scale_vxm_ops_per_elem))),
            ),
            alus=max(1, int(p.vxm_alus_per_lane)),
            elems_per_vector=elems,
            vector_bytes=vec,
            reduce_rounds=rounds,
            memio_vectors_per_cycle=max(1, int(p.streams_per_direction)),
            operand_bytes=op_bytes,
            install_cycles_alone=max(1, _ceil(side * side * op_bytes / (wi_alone * vec))),
            block_install_vectors=side * side * op_bytes / vec,
            install_vectors_per_cycle=wi_chip,
        )
        # one object per distinct chip in a process: the fragment and plan caches key on it,
        # and a key found by identity is not compared field by field
        return _CHIPS.setdefault(made, made)

    def __hash__(self) -> int:
        # kept: every cache lookup of a fragment or plan hashes its chip
        hit = self.__dict__.get("_hash")
        if hit is None:
            hit = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", hit)
        return hit

    def __getstate__(self) -> dict:
        # the kept hash is this process's (str hashes are salted per process): never carried
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def n_resources(self) -> int:
        """install[0..P), mxm[0..P), vxm, sxm, memio."""
        return 2 * self.planes + 3


class Program:
    """Instructions of one chip in the compiler's list order; ``op`` indexes ``op_names``."""

    def __init__(self, chip: ChipModel):
        self.chip = chip
        self.res: list[int] = []
        self.kind: list[str] | None = []  # None once joined (kind_code holds them)
        self.dur: list[int] = []
        self.lat: list[int] = []
        self.n_deps: list[int] = []  # dependencies of each instruction, flat in dep_idx
        self.dep_idx: list[int] = []
        self.op: list[int] = []
        self.nbytes: list[int] = []
        self.op_names: list[tuple] = []  # (layer, name, kind)
        self.collectives: dict[int, object] = {}  # instruction -> Collective
        self._cur = -1
        self._csr: tuple | None = None  # (dep_ptr, dep_idx) of a program joined from fragments
        self._link_busy: tuple | None = None  # collectives' link windows (link_busy)
        self.kind_code: np.ndarray | None = None  # a joined program's kinds (kind_codes)

    # resource ids
    def r_install(self, p):
        return p

    def r_mxm(self, p):
        return self.chip.planes + p

    @property
    def r_vxm(self):
        return 2 * self.chip.planes

    @property
    def r_sxm(self):
        return 2 * self.chip.planes + 1

    @property
    def r_memio(self):
        return 2 * self.chip.planes + 2

    def begin_op(self, layer, name: str, kind: str) -> None:
        """Following instructions belong to this graph op."""
        self.op_names.append((layer, name, kind))
        self._cur = len(self.op_names) - 1

    def add(self, res, kind, dur, lat, deps, n_bytes=0) -> int:
        """Append one instruction; returns its index."""
        self.res.append(res)
        self.kind.append(kind)
        self.dur.append(int(dur))
        self.lat.append(int(lat))
        kept = [d for d in deps if _is_dep(d)]
        self.n_deps.append(len(kept))
        self.dep_idx.extend(kept)
        self.op.append(self._cur)
        self.nbytes.append(int(n_bytes))
        return len(self.res) - 1

    def _add_many(self, res, kinds, dur, lat, n_deps, dep_idx, n_bytes) -> None:
        """Append instructions given as arrays (``dep_idx`` flat, ``n_deps`` per instruction,
        both already filtered as :meth:`add` filters them)."""
        self.res.extend(res.tolist())
        self.kind.extend(kinds)
        self.dur.extend(dur.tolist())
        self.lat.extend(lat.tolist())
        self.n_deps.extend(n_deps.tolist())
        self.dep_idx.extend(dep_idx.tolist())
        self.op.extend([self._cur] * len(kinds))
        self.nbytes.extend(n_bytes.tolist())

    # ---- instruction patterns ----

    def blocks(self, n_weights: int) -> int:
        """MXM weight blocks holding ``n_weights`` weights."""
        return max(1, -(-n_weights // self.chip.block_weights))

    def vectors(self, n_elems: int) -> int:
        """Activation vectors holding ``n_elems`` bf16 values."""
        return max(1, -(-n_elems // self.chip.elems_per_vector))

    def vxm_cycles(self, vectors: int, ops_per_elem: int) -> int:
        """VXM occupancy of ``ops_per_elem`` chained ALU ops over ``vectors`` vectors."""
        return max(1, _ceil(vectors * max(1, ops_per_elem) / self.chip.alus))

    def gemv(self, blocks: int, m_vectors, inp) -> int:
        """A weight-stationary matrix-vector product over ``blocks`` weight blocks round-robin
        over the planes, each installed (double-buffered) then fed ``m_vectors`` activation
        vectors (one count for all blocks, or an int64 array, one a block); the result leaves
        ``mxm_latency`` + transit after the last block."""
        c = self.chip
        base, b = len(self.res), np.arange(blocks, dtype=np.int64)
        held = c.weight_buffers * c.planes  # blocks installed before one must be freed
        per = len(_GEMV_BLOCK)  # instructions a block: its install, then its compute
        ins = base + per * b
        comp = ins + 1
        # install b waits for block b - held's compute to free its buffer; compute b waits for
        # its install and the input vector
        deps = np.stack([comp - per * held, ins, np.full(blocks, inp if _is_dep(inp) else 0)], 1)
        keep = np.stack([b >= held, np.ones(blocks, bool), np.full(blocks, _is_dep(inp))], 1)
        p = b % c.planes
        pair = np.ones((blocks, per), dtype=np.int64)
        self._add_many(
            res=np.stack([self.r_install(p), self.r_mxm(p)], 1).ravel(),
            kinds=list(_GEMV_BLOCK) * blocks,
            dur=np.stack(
                [pair[:, 0] * c.install_cycles, np.maximum(1, m_vectors) * pair[:, 1]], 1
            ).ravel(),  # fmt: skip
            lat=np.zeros(per * blocks, dtype=np.int64),
            n_deps=np.stack([keep[:, 0], keep[:, 1:].sum(1)], 1).ravel(),
            dep_idx=deps[keep],
            n_bytes=(pair * [c.block_weights * c.operand_bytes, 0]).ravel(),
        )
        # the result leaves after the last block of each plane
        last = [int(comp[q + c.planes * ((blocks - 1 - q) // c.planes)])
                for q in range(min(blocks, c.planes))]  # fmt: skip
        return self.add(-1, "delay", 0, c.mxm_latency + c.transit, last)

    def xgemv(self, blocks_per_expert: int, rows: tuple, inp) -> int:
        """A routed-expert GEMV: ``blocks_per_expert`` blocks of each routed expert, one expert
        after another, each block fed only the ``rows[e]`` vectors of its expert ``e`` (as
        :meth:`gemv` otherwise)."""
        m = np.repeat(np.asarray(rows, dtype=np.int64), blocks_per_expert)
        return self.gemv(blocks_per_expert * len(rows), m, inp)

    def vector(self, cycles: int, inp) -> int:
        """A VXM pass occupying ``cycles`` (see :meth:`vxm_cycles`)."""
        c = self.chip
        return self.add(self.r_vxm, "vxm", cycles, c.vxm_latency + c.transit, [inp])

    def reduce(self, cycles: int, inp) -> int:
        """A reduction to one value per lane group: VXM partial sums across vectors (``cycles``),
        then rounds of SXM transpose + VXM add across lanes, each a round trip on the streams."""
        c = self.chip
        cur = self.add(self.r_vxm, "vxm", cycles, c.vxm_latency, [inp])
        for _ in range(c.reduce_rounds):
            cur = self.add(self.r_sxm, "sxm", c.sxm_pass, c.sxm_latency + c.transit, [cur])
            cur = self.add(self.r_vxm, "vxm", 1, c.vxm_latency + c.transit, [cur])
        return cur

    def memio(self, n_bytes: int, inp) -> int:
        """Vectors written to (or read from) MEM: ``memio_vectors_per_cycle`` per cycle."""
        c = self.chip
        vecs = max(1, -(-n_bytes // c.vector_bytes))
        dur = max(1, -(-vecs // c.memio_vectors_per_cycle))
        return self.add(self.r_memio, "memio", dur, c.transit, [inp], n_bytes)

    def collective(self, coll, inp) -> int:
        """A network collective as a delay of the cycles its transfer schedule takes, plus the
        stream transit from the producing slice to the chip's C2C ports (on the SXM at the
        chip's edge) and from the ports back to the VXM; beside it, what it occupies on the
        chip (lpu.collective_on_chip): its sent vectors on the streams (the ``memio``
        resource) as it starts, and its partial sums on the VXM at the times its schedule
        gives. The result is ready when both are: a chip whose VXM or streams are busy with
        other work delays the collective."""
        c = self.chip
        lat = coll.cycles + TRANSITS_PER_C2C * c.transit if coll.cycles else 0
        i = self.add(-1, "c2c", 0, lat, [inp], coll.n_bytes)
        self.collectives[i] = coll
        self._link_busy = None
        if not coll.cycles or not (coll.send_vectors or coll.vxm_busy):
            return i
        dur = max(1, -(-coll.send_vectors // c.memio_vectors_per_cycle))
        cur, t = self.add(self.r_memio, "memio", dur, 0, [inp]), dur
        for a, b in coll.vxm_busy:  # cycles from the collective's first transfer
            wait = self.add(-1, "delay", 0, max(0, c.transit + a - t), [cur])
            cur, t = self.add(self.r_vxm, "vxm", b - a, 0, [wait]), max(t, c.transit + a) + b - a
        side = self.add(-1, "delay", 0, max(0, lat - t), [cur])
        return self.add(-1, "delay", 0, 0, [i, side])

    # ---- fragments: one op compiled once, joined into many programs ----

    @classmethod
    def join(cls, chip: ChipModel, fragments) -> Program:
        """The program whose ops are ``fragments`` in order, each fragment's ``INPUT``
        dependency taken by the previous fragment's output: the same instructions, in the same
        order, as compiling the ops one after another into one program (a stage has at least
        one op, so ``fragments`` is never empty)."""
        prog = cls(chip)
        n = np.array([len(f.res) for f in fragments], dtype=np.int64)
        base = np.concatenate(([0], np.cumsum(n)[:-1])).astype(np.int64)
        n_deps = np.array([len(f.idx) for f in fragments], dtype=np.int64)
        dep_base = np.concatenate(([0], np.cumsum(n_deps)[:-1])).astype(np.int64)
        outs = base + np.array([f.out for f in fragments], dtype=np.int64)
        local = np.concatenate([f.idx for f in fragments]).astype(np.int64)
        idx = local + np.repeat(base, n_deps)
        takes = local == INPUT  # the previous fragment's output (-1 before the first)
        idx[takes] = np.repeat(np.concatenate(([-1], outs[:-1])), n_deps)[takes]
        ptr = np.concatenate([f.ptr[1:] for f in fragments]) + np.repeat(dep_base, n)
        for i, f in enumerate(fragments):
            for j, coll in f.collectives.items():
                prog.collectives[int(base[i]) + j] = coll
        prog.op_names = [(None, str(i), "") for i in range(len(fragments))]
        prog.res = np.concatenate([f.res for f in fragments])
        prog.dur = np.concatenate([f.dur for f in fragments])
        prog.lat = np.concatenate([f.lat for f in fragments])
        prog.nbytes = np.concatenate([f.nbytes for f in fragments])
        prog.op = np.repeat(np.arange(len(fragments), dtype=np.int64), n)
        prog.kind = None  # the kinds as event codes instead (a joined program is not extended)
        prog.kind_code = np.concatenate([f.kind_code for f in fragments])
        prog.n_deps = prog.dep_idx = None  # held as CSR below
        prog._csr = (np.concatenate((np.zeros(1, dtype=np.int64), ptr)), idx)
        return prog

    def link_busy(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every collective's ``link_busy`` windows as arrays: (instruction, start, end), the
        cycles from the instruction's start before the stream transit (made once)."""
        if self._link_busy is None:
            rows = [(i, a, b) for i, coll in self.collectives.items() for a, b in coll.link_busy]
            cols = list(zip(*rows, strict=True)) if rows else [(), (), ()]
            self._link_busy = tuple(np.array(c, dtype=np.int64) for c in cols)
        return self._link_busy

    def fragment(self, out: int) -> Fragment:
        """This one-op program as a fragment whose output is instruction ``out``."""
        res, dur, lat, ptr, idx = self.arrays()
        return Fragment(res, dur, lat, np.array(self.nbytes, dtype=np.int64), kind_codes(self.kind),
                        ptr, idx, out, dict(self.collectives),
                        bool((idx == INPUT).any()))  # fmt: skip

    # ---- scheduling ----

    def arrays(self):
        """(resource, duration, latency, dep_ptr, dep_idx) as int64 arrays."""
        if self._csr is not None:
            return (np.asarray(self.res), np.asarray(self.dur), np.asarray(self.lat), *self._csr)
        ptr = np.zeros(len(self.n_deps) + 1, dtype=np.int64)
        ptr[1:] = np.cumsum(self.n_deps)
        idx = np.array(self.dep_idx, dtype=np.int64)
        return (
            np.array(self.res, dtype=np.int64),
            np.array(self.dur, dtype=np.int64),
            np.array(self.lat, dtype=np.int64),
            ptr,
            idx,
        )

    def schedule(self, backend: str | None = None) -> Scheduled:
        """List-schedule the program (the hot loop; NumPy twin in reference_lpu)."""
        res, dur, lat, ptr, idx = self.arrays()
        start = get_kernel("lpu_list_schedule", backend)(
            res, dur, lat, ptr, idx, self.chip.n_resources
        )
        ready = start + dur + lat
        return Scheduled(self, np.asarray(start), dur, lat, int(ready.max()) if len(ready) else 0)


@dataclass(frozen=True)
class Fragment:
    """One op's instructions compiled on their own (dependencies local, ``INPUT`` for the
    previous op's output), ready to be joined into stage programs (:meth:`Program.join`)."""

    res: np.ndarray
    dur: np.ndarray
    lat: np.ndarray
    nbytes: np.ndarray
    kind_code: np.ndarray  # each instruction's kind (kind_codes)
    ptr: np.ndarray
    idx: np.ndarray
    out: int
    collectives: dict
    has_input: bool
