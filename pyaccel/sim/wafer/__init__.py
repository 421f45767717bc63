"""Wafer-scale SRAM mesh engine (Cerebras WSE-2/WSE-3 and CS systems): ``engine`` (passes
through PE regions), ``cost`` (per-op costs on a region; ``attention``: attention's), ``tasks``
(PE tasks, op costs by resource and the collectives after them), ``mesh`` (link-by-link
collectives), ``bound`` (the lower bound's rates).

The package is the kind's engine as the kind registry names it; it exports the engine contract
(:mod:`pyaccel.sim.contract`).
"""

from .bound import rates
from .engine import ASSUMPTIONS, PIPELINE, RESOURCES, WHAT_IF, n_stages, pass_model

__all__ = ["ASSUMPTIONS", "PIPELINE", "RESOURCES", "WHAT_IF", "n_stages", "pass_model", "rates"]
