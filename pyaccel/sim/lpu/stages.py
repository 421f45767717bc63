"""The pipeline stages of an LPU placement: each stage's chips (one tensor-parallel group) and
the layers it holds."""

from __future__ import annotations

from ...place.kinds.lpu import stage_of


def stages_of(placement) -> list[tuple[tuple[int, ...], list]]:
    """(chips, layer keys) of every pipeline stage, in order."""
    out: dict[int, tuple] = {}
    for s in placement.layers:
        st = stage_of(s)
        if st not in out:
            out[st] = (tuple(s.units), [])
        out[st][1].append(s.layer)
    return [out[k] for k in sorted(out)]


def n_stages(placement) -> int:
    """Pipeline stages a batch is split over."""
    return len(stages_of(placement))
