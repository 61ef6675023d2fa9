"""The project's Python, as one installed package (`scripts/setup` installs it into `.venv` in
editable mode: `pip install --no-deps --no-build-isolation -e .`, from the repository root).

Shared helpers, here in `python/distill_tools/`:

- `benchmarks_md`: the one writer of a BENCHMARKS.md section between its markers.
- `machine`: the one description of the machine a figure was measured on (CPU model, cores,
  bf16 flags, GPU).
- `eager_result`: the one result line of the plain-PyTorch (eager) training loops that
  `bench/throughput/bench.py` compares distill against.

The examples and benchmarks stay where their commands live and are importable as sub-packages
(the folder each maps to is in the repository's `pyproject.toml`):

| package | folder |
|---|---|
| `distill_tools.minilm` | `examples/minilm` (BERT encoder, GCIDE and WordNet corpora) |
| `distill_tools.smollm2` | `examples/smollm2` (Llama decoder, KJV corpus) |
| `distill_tools.fashion_mnist` | `examples/fashion-mnist` (the teacher CNN) |
| `distill_tools.text_bench` | `bench/text` (sentence-encoder metrics and report) |
| `distill_tools.throughput` | `bench/throughput` (the eager loops distill is timed against) |
| `distill_tools.scripts` | `scripts` (the test totals line) |

Nothing imports by path: a script's imports name these packages, never an inserted import path.
"""
