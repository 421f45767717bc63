"""Only job: build the C kernels with cffi (everything else is in pyproject.toml)."""

from setuptools import setup

setup(cffi_modules=["csrc/build_ffi.py:ffibuilder"])
