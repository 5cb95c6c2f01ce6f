"""lrtune stage package: train (see docs/design.md §1)."""
