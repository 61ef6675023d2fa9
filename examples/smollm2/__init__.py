"""distill_tools.smollm2: the causal-LM demo (SmolLM2-135M teacher, Llama decoder, KJV corpus)."""
