"""lrtune stage package: eval (see docs/design.md §1)."""
