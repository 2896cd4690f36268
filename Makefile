# Two entry points for a fresh machine: `make demo` and `make test`.
# torch is pinned to the CPU build before the package is installed, so that
# pip never resolves an unpinned torch to a multi-GB CUDA build.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_PIN ?= torch==2.13.0

.PHONY: demo test lint bench clean

$(VENV)/.base:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH_PIN)
	touch $@

$(VENV)/.all: $(VENV)/.base pyproject.toml
	$(PIP) install -q -e '.[all]'
	touch $@

$(VENV)/.test: $(VENV)/.base pyproject.toml
	$(PIP) install -q -e '.[all,test]'
	touch $@

demo: $(VENV)/.all
	$(VENV)/bin/clusterclip demo --out demo-out

test: $(VENV)/.test
	$(VENV)/bin/ruff check src tests benchmarks
	$(PY) -m pytest

bench: $(VENV)/.test
	$(PY) benchmarks/bench_sampler.py
	$(PY) benchmarks/bench_kmeans.py
	$(PY) benchmarks/bench_embed.py

clean:
	rm -rf $(VENV) demo-out
