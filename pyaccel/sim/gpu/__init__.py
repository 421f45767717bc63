"""GPU/HBM engine (H100/H200/B200): ``engine`` (kernels of a pass on a TP x PP layout).

The package is the kind's engine as the kind registry names it; it exports the engine contract
(:mod:`pyaccel.sim.contract`), with the optional ``host_step`` and ``data_parallel``.
"""

from .engine import (
    ASSUMPTIONS,
    PIPELINE,
    RESOURCES,
    WHAT_IF,
    data_parallel,
    host_step,
    n_stages,
    pass_model,
    rates,
)

__all__ = [
    "ASSUMPTIONS",
    "PIPELINE",
    "RESOURCES",
    "WHAT_IF",
    "data_parallel",
    "host_step",
    "n_stages",
    "pass_model",
    "rates",
]
