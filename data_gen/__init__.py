"""lrtune stage package: data_gen (see docs/design.md §1)."""
