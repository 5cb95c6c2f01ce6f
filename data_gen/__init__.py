"""lrtune stage package: data_gen (see DESIGN.md §1)."""
