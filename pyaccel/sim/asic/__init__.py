"""Hardwired-weight ASIC engine (Taalas HC1, ``--etch`` dies): ``engine`` (the spatial
pipeline's blocks, one sequence's token through them).

The package is the kind's engine as the kind registry names it; it exports the engine contract
(:mod:`pyaccel.sim.contract`).
"""

from .bound import rates
from .engine import ASSUMPTIONS, PIPELINE, RESOURCES, WHAT_IF, n_stages, pass_model

__all__ = ["ASSUMPTIONS", "PIPELINE", "RESOURCES", "WHAT_IF", "n_stages", "pass_model", "rates"]
