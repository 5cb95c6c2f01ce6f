"""lrtune stage package: policies (see DESIGN.md §1)."""
