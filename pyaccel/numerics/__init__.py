"""Number formats (bit widths and storage now; encode/decode arrives with functional emulation)."""

from .formats import FORMATS, Format, get_format

__all__ = ["FORMATS", "Format", "get_format"]
