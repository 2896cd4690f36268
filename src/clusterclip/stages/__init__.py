"""The pipeline stages: one module per stage, its options and ``run(w, options)``."""
