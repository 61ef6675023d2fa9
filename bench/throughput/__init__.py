"""distill_tools.throughput: distill against plain-PyTorch training loops (scripts/bench-throughput)."""
