"""Hardware: specs of the emulated machines and their presets."""

from .io import apply_overrides, load_spec, load_system, preset_names
from .spec import HardwareSpec, System

__all__ = ["HardwareSpec", "System", "apply_overrides", "load_spec", "load_system", "preset_names"]
