# The README, CI (.ci/run) and developers run the same commands.
PY ?= python

.PHONY: check lint test demo bench

check: lint test

lint:
	$(PY) -m ruff check .
	$(PY) -m mypy

test:
	$(PY) -m pytest -q

demo:
	jurygraph demo

# performance harness (benchmarks/README.md): BENCH_ARGS=--quick for a smoke run
bench:
	$(PY) benchmarks/run.py $(BENCH_ARGS)
