"""distill_tools.scripts: the Python helpers of the shell scripts here (the test totals line, the compression table)."""
