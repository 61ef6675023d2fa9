"""distill_tools.text_bench: the sentence-encoder benchmark (scripts/bench-text): metrics, report."""
