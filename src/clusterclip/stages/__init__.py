"""The stages of a work directory: each module's options dataclass and ``run(w, options)``."""
