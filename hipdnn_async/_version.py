"""The package version (a leaf: modules that report it import it from here)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
