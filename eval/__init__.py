"""lrtune stage package: eval (see DESIGN.md §1)."""
