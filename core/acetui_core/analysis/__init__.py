"""Evidence, comparison and export: the comparison grid, intervals and tests, verdicts, CSV, LaTeX, Markdown and figures."""
