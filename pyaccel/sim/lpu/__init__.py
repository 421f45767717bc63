"""LPU engine (Groq TSP): ``engine`` (stage programs and passes), ``program`` (instructions of
the functional slices, list-scheduled), ``net`` (C2C transfer schedules).

The package is the kind's engine as the kind registry names it; it exports the engine contract
(:mod:`pyaccel.sim.contract`).
"""

from .engine import ASSUMPTIONS, PIPELINE, RESOURCES, WHAT_IF, n_stages, pass_model, rates

__all__ = ["ASSUMPTIONS", "PIPELINE", "RESOURCES", "WHAT_IF", "n_stages", "pass_model", "rates"]
