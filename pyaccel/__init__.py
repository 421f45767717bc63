"""pyaccel: cycle-approximate emulation of the machines behind fast LLM decoding (wafer-scale
SRAM meshes, LPU chip chains, hardwired-weight ASICs, GPUs) and reports of what bounds them."""

from ._version import __version__ as __version__
from .emulation import emulate
from .errors import (
    CapacityError,
    ConfigError,
    EngineNotBuiltError,
    PlacementError,
    PresetError,
    PyaccelError,
)
from .hw import HardwareSpec, System, load_spec, load_system
from .model import DecodeGraph, ModelConfig, Op, build_graph, load_model
from .place import LayerSlot, Placement
from .placing import place
from .report import Report
from .sim.roofline import roofline
from .sweep import sweep
from .trace import Trace
from .what_if import what_if_gains
from .workload import Workload

__all__ = [
    "CapacityError",
    "ConfigError",
    "DecodeGraph",
    "EngineNotBuiltError",
    "HardwareSpec",
    "LayerSlot",
    "ModelConfig",
    "Op",
    "Placement",
    "PlacementError",
    "PresetError",
    "PyaccelError",
    "Report",
    "System",
    "Trace",
    "Workload",
    "build_graph",
    "emulate",
    "load_model",
    "load_spec",
    "load_system",
    "place",
    "roofline",
    "sweep",
    "what_if_gains",
]
