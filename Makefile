# Two commands on a fresh machine: `make demo` and `make test`. Each bootstraps .venv from requirements.lock.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo demo-prometheus test lint package-check dagster-ui dashboard clean

$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/gpumeter demo

# The demo read back from a real local Prometheus (needs the Debian package prometheus); 1 day by default.
demo-prometheus: $(STAMP)
	$(BIN)/gpumeter demo --prometheus --out .gpumeter/demo-prometheus

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

# Build the wheel, install it in a clean virtualenv and run a one-day demo from outside the checkout.
package-check: $(STAMP)
	bash .ci/package-check

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

dagster-ui: $(STAMP)
	DAGSTER_HOME=$(CURDIR)/.gpumeter/dagster GPUMETER_CONFIG=$(CURDIR)/.gpumeter/demo/config.yaml \
	  $(BIN)/dagster dev -m gpumeter.pipelines.definitions -h 127.0.0.1 -p 3000

# The Streamlit dashboard on the demo's warehouse, in local mode unless .streamlit/secrets.toml has [auth].
dashboard: $(STAMP)
	@test -f .gpumeter/demo/config.yaml || { echo "no demo data: run \`make demo\` first"; exit 1; }
	GPUMETER_CONFIG=$(CURDIR)/.gpumeter/demo/config.yaml \
	  $(BIN)/gpumeter dashboard

clean:
	rm -rf $(VENV) .gpumeter
