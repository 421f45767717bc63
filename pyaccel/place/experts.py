"""Expert parallelism's placement arithmetic, shared by the placers: which unit holds each routed
expert, and how many each unit holds."""

from __future__ import annotations

from .common import split_even


def spread(n_experts: int, units: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """The unit of each of ``n_experts`` experts over ``units``, in contiguous blocks whose
    sizes differ by at most one (expert ``e`` on the block it falls in, as vLLM and SGLang
    number experts over EP ranks: rank ``r`` holds experts ``r*E/n .. (r+1)*E/n - 1``)."""
    out: list[int] = []
    for unit, count in zip(units, split_even(n_experts, len(units)), strict=True):
        out += [unit] * count
    return tuple(out)


def held(expert_units: tuple[int, ...], units: tuple[int, ...] | list[int]) -> list[int]:
    """How many experts each of ``units`` holds."""
    return [expert_units.count(u) for u in units]
