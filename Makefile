# Two entry points for a fresh machine: `make demo` and `make test`.
# torch is installed (pinned) before the package, from the index pip is configured
# with: on Linux x86-64 PyPI serves the CUDA build (some GB with its nvidia-*
# packages; it runs on a CPU too). For the small CPU-only build, once, from scratch:
#   make clean && make TORCH_INDEX=https://download.pytorch.org/whl/cpu test
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH_PIN ?= torch==2.13.0
TORCH_INDEX ?=
# A separate virtual environment with the real mosaicml-streaming, for the test that reads
# `export --format mds` with streaming.StreamingDataset (its pins, numpy<2.2 and
# transformers<5, would downgrade ours: it never goes into $(VENV)). Versions: the constraints file.
MDS_VENV ?= .venv-mds
MDS_PIN ?= mosaicml-streaming==0.13.0
MDS_CONSTRAINTS := tests/mds-venv-constraints.txt

.PHONY: demo test lint bench docs clean browser

$(VENV)/.base:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) $(TORCH_PIN)
	touch $@

# setup.py and the C sources (sampler, fast embedder): a changed kernel is rebuilt by the
# editable install.
KERNEL_SRC := setup.py src/clusterclip/sampling/_kernel.c src/clusterclip/embedding/_static.c

$(VENV)/.all: $(VENV)/.base pyproject.toml $(KERNEL_SRC)
	$(PIP) install -q -e '.[all]'
	touch $@

$(VENV)/.test: $(VENV)/.base pyproject.toml $(KERNEL_SRC)
	$(PIP) install -q -e '.[all,test]'
	touch $@

$(MDS_VENV)/.ok: $(MDS_CONSTRAINTS)
	rm -rf $(MDS_VENV)
	$(PYTHON) -m venv $(MDS_VENV)
	$(MDS_VENV)/bin/python -m pip install -q --upgrade pip
	$(MDS_VENV)/bin/python -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) $(TORCH_PIN)
	$(MDS_VENV)/bin/python -m pip install -q $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) -c $(MDS_CONSTRAINTS) $(TORCH_PIN) $(MDS_PIN)
	touch $@

demo: $(VENV)/.all
	$(VENV)/bin/clusterclip demo --out demo-out

# The report page is tested in headless Chromium with the system chromedriver (Debian's
# chromium and chromium-driver). As root with apt-get they are installed when missing; else
# the page tests skip, and `-rs` prints why at the end of the run.
browser:
	@if ! command -v chromium >/dev/null 2>&1 || [ ! -x /usr/bin/chromedriver ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; \
	  else \
	    echo "make test: no chromium/chromedriver and not root: the page tests will skip (apt-get install chromium chromium-driver)"; \
	  fi; \
	fi

test: $(VENV)/.test $(MDS_VENV)/.ok browser
	$(VENV)/bin/ruff check src tests benchmarks
	CLUSTERCLIP_MDS_PYTHON=$(abspath $(MDS_VENV))/bin/python $(PY) -m pytest -n 2 --dist loadfile -rs

bench: $(VENV)/.test
	$(PY) benchmarks/bench_sampler.py
	$(PY) benchmarks/bench_kmeans.py
	$(PY) benchmarks/bench_embed.py

# The documentation site, offline, warnings as errors: open site/index.html.
docs: $(VENV)/.test
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(MDS_VENV) demo-out site
