"""Number formats and functional emulation.

- ``formats``: the SPEC §6 formats (bits and byte accounting) and their encode/decode
  (``codecs``: published rounding rules, packed storage);
- ``weights``: HF safetensors folders (lazy) or seeded random models;
- ``reference``: the fp32 NumPy decode forward pass with KV cache (golden-tested against HF);
- ``execute``: the decode through a placement in a machine's formats and reduction order
  (``functional_metrics``, called by ``emulate(..., functional=True)``);
- ``executor``: the interface of one machine kind's arithmetic (splits, partial-sum reduction,
  activation operands); ``executors``: one module per kind and the registry ``EXECUTORS``
  (kind -> class) that a new kind joins with one entry;
- ``gemv``: packed low-bit GEMV kernels over the packed bytes.
"""

from .formats import FORMATS, Format, decode, encode, get_format, quantize

__all__ = ["FORMATS", "Format", "decode", "encode", "get_format", "quantize"]
