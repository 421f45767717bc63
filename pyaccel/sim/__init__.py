"""Timing: the step driver (``driver``) and its contract with engines (``contract``), one engine
sub-package per machine kind (``wafer``, ``lpu``, ``asic``, ``gpu``), the lower bound
(``roofline``) and the pipeline arithmetic the driver uses (``pipeline``). :func:`pyaccel.emulate`
(``pyaccel/emulation.py``) runs them."""
