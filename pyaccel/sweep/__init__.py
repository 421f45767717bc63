"""Design-space sweeps: many runs over a grid of systems, models, workloads and overrides, on a
Dask cluster (this machine's cores, or a cluster's scheduler), cached per point, gathered into
one table (:func:`sweep`; ``pyaccel sweep GRID.toml``)."""

from .grid import points
from .runner import sweep

__all__ = ["points", "sweep"]
