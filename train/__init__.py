"""lrtune stage package: train (see DESIGN.md §1)."""
