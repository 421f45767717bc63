"""The package version: the one place it is set (pyproject.toml reads it from here as dynamic
metadata, without importing the package)."""

__version__ = "0.1.0"
