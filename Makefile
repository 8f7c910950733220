# Two commands on a fresh machine: `make demo` and `make test`. Each bootstraps .venv from requirements.lock.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo demo-prometheus test lint package-check dagster-ui dashboard screenshots clean focus-validator

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

# The FinOps Foundation's FOCUS validator in a virtualenv of its own (it needs Python 3.12; the product's is
# 3.11): tests/test_focus_official.py runs it on FOCUS exports. Python: $FOCUS_PYTHON, else pyenv's newest
# 3.12, else python3.12 on PATH. Its numpy must stay < 2, which pyarrow 22 and later refuse: pyarrow is pinned.
FOCUS_VENV := .venv-focus
FOCUS_PINS := focus-validator==2.2.1 pyarrow==21.0.0 numpy==1.26.4 duckdb==1.5.6 polars==1.44.2 pandas==2.3.3

focus-validator:
	@if [ "$$(cat $(FOCUS_VENV)/.installed 2>/dev/null)" = "$(FOCUS_PINS)" ]; then \
	  echo "focus-validator: $(FOCUS_VENV) is up to date"; exit 0; fi; \
	py=""; \
	for c in "$${FOCUS_PYTHON:-}" $$(ls -d "$${PYENV_ROOT:-$$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V -r) python3.12; do \
	  if [ -n "$$c" ] && "$$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then py="$$c"; break; fi; \
	done; \
	if [ -z "$$py" ]; then \
	  echo "focus-validator: no Python 3.12 found (set FOCUS_PYTHON, or install 3.12 with pyenv or as python3.12)" >&2; \
	  exit 1; fi; \
	echo "focus-validator: building $(FOCUS_VENV) with $$py"; \
	rm -rf $(FOCUS_VENV) && "$$py" -m venv $(FOCUS_VENV) && \
	$(FOCUS_VENV)/bin/pip install -q --disable-pip-version-check $(FOCUS_PINS) && \
	echo "$(FOCUS_PINS)" > $(FOCUS_VENV)/.installed

# Build the wheel, install it in a clean virtualenv and run a one-day demo from outside the checkout.
package-check: $(STAMP)
	bash .ci/package-check

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Dagster's UI on the runs `make demo` recorded: the demo's DAGSTER_HOME is .gpumeter/demo/dagster.
dagster-ui: $(STAMP)
	DAGSTER_HOME=$(CURDIR)/.gpumeter/demo/dagster GPUMETER_CONFIG=$(CURDIR)/.gpumeter/demo/config.yaml \
	  $(BIN)/dagster dev -m gpumeter.pipelines.definitions -h 127.0.0.1 -p 3000

# docs/img/: every dashboard page of the demo in headless Chromium, as finance and as a tenant (docs/dashboard.md).
screenshots: $(STAMP)
	$(BIN)/python -m tests.dashboard_screenshots --config .gpumeter/demo/config.yaml --out docs/img

# The Streamlit dashboard on the demo's warehouse, in local mode unless .streamlit/secrets.toml has [auth].
dashboard: $(STAMP)
	@test -f .gpumeter/demo/config.yaml || { echo "no demo data: run \`make demo\` first"; exit 1; }
	GPUMETER_CONFIG=$(CURDIR)/.gpumeter/demo/config.yaml \
	  $(BIN)/gpumeter dashboard

clean:
	rm -rf $(VENV) .gpumeter
