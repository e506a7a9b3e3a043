# `make run` and `make test` do all the set-up on a fresh machine (DESIGN.md, README.md).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
NATIVE_SRC := $(wildcard native/*.c native/*.h native/bench/*.c)

.PHONY: run test test-spark spark-example bench-spark native bench clean

$(VENV)/.base: pyproject.toml setup.py $(NATIVE_SRC)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	$(PY) setup.py --quiet build_ext --inplace
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

native: $(VENV)/.base

run: $(VENV)/.base
	$(VENV)/bin/appliance run $(ARGS)

# Two pytest-xdist workers, a test file's tests kept together (module fixtures start clusters once).
TEST_WORKERS ?= 2

test: $(VENV)/.test
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The Spark data source (appliance[spark]): its tests need pyspark and Java 17; a missing pyspark fails here.
$(VENV)/.spark: $(VENV)/.test
	$(PY) -m pip install --quiet -e '.[test,spark]'
	touch $@

test-spark: $(VENV)/.spark
	APPLIANCE_REQUIRE_SPARK=1 PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q tests/spark $(PYTEST_ARGS)

bench-spark: $(VENV)/.spark
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) benchmarks/spark.py $(ARGS)

spark-example: $(VENV)/.spark
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) examples/spark_pipeline.py $(ARGS)

bench: $(VENV)/.test
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(PY) -m appliance.bench.compare $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info appliance/_native*.so appliance/bench/_loadgen*.so
