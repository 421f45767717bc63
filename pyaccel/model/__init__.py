"""Models: Hugging Face configs and the decode-step graph built from them."""

from .config import ModelConfig, load_model, preset_names
from .graph import DecodeGraph, Op, build_graph

__all__ = ["DecodeGraph", "ModelConfig", "Op", "build_graph", "load_model", "preset_names"]
