"""Plans numbered by value within one LPU engine: the per-step path's program keys hold these
numbers, which hash at once, rather than nested plan tuples, which hash step by step."""

from __future__ import annotations


class PlanNumbers:
    """Each distinct plan (a tuple of canonical steps) and the number it was given, first seen
    first; equal plans share a number."""

    def __init__(self) -> None:
        self._number: dict[tuple, int] = {}
        self.plans: list[tuple] = []  # by number
        self._by_object: dict[int, tuple] = {}  # id(plan) -> (plan, its number)

    def of(self, plan: tuple) -> int:
        """The number of ``plan`` (given on first sight)."""
        hit = self._number.get(plan)
        if hit is None:
            hit = self._number[plan] = len(self.plans)
            self.plans.append(plan)
        return hit

    def of_all(self, plans: tuple) -> tuple[int, ...]:
        """The numbers of ``plans``; a plan object seen before is found by identity, not
        hashed again (the table holds it, so its id stays its own)."""
        by_object, out = self._by_object, []
        for plan in plans:
            hit = by_object.get(id(plan))
            if hit is None:
                hit = by_object[id(plan)] = (plan, self.of(plan))
            out.append(hit[1])
        return tuple(out)
