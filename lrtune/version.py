"""lrtune's version (a leaf: read by the package and by files lrtune writes)."""

__version__ = "0.1.0"
