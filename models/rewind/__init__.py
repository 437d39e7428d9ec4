"""Rewind and compare: which rows of a correlation's log a copy takes as recorded, which it is
sent again and which it makes anew (`plan`), and two correlations side by side (`diff`)."""
