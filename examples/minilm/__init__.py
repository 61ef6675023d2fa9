"""distill_tools.minilm: the sentence-encoder demo (all-MiniLM-L6-v2 teacher, BERT encoder, WordNet and GCIDE corpora)."""
