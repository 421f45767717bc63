"""Packing of number formats and functional emulation.

- ``codecs``: encode/decode of the SPEC §6 formats (published rounding rules, packed storage);
  the format vocabulary itself (bits, scales, which codec) is :mod:`pyaccel.formats`;
- ``weights``: HF safetensors folders (lazy) or seeded random models;
- ``reference``: the fp32 NumPy decode forward pass with KV cache (golden-tested against HF);
- ``execute``: the decode through a placement in a machine's formats and reduction order
  (``functional_metrics``, called by ``emulate(..., functional=True)``);
- ``executor``: the interface of one machine kind's arithmetic (splits, partial-sum reduction,
  activation operands); ``executors``: one module per kind, named in the kind registry
  (kind -> class) that a new kind joins with one entry;
- ``gemv``: packed low-bit GEMV kernels over the packed bytes.
"""

from .codecs import decode, encode, quantize

__all__ = ["decode", "encode", "quantize"]
