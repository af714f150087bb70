# The two commands of the README, and the chores behind them. Needs only python3 with pip (and make).
#   make quickstart   set up .venv and run the main job on the embedded default
#   make test         set up .venv with the dev tools and run every check and test
PY ?= python3
UV = $(PY) -m uv
VENV = .venv
NODUS = $(VENV)/bin/nodus
MEMBERS = specs builder reconciler images/env-base runtimes
PROJECTS = pyproject.toml $(foreach m,$(MEMBERS),$(m)/pyproject.toml)

.PHONY: quickstart test setup bench schemas fmt

$(VENV)/.synced: $(PROJECTS)
	@$(PY) -m uv --version >/dev/null 2>&1 || $(PY) -m pip install --quiet --disable-pip-version-check uv
	$(UV) sync --all-packages --compile-bytecode --quiet
	@touch $@

setup: $(VENV)/.synced

# Until the training job lands (issue 6), the main job checks every example repository of examples/.
quickstart: setup
	@echo "== nodus validate: every example repository under examples/"
	@for dir in $$(find examples -name '*.yaml' -printf '%h\n' | sort -u); do \
		printf '%-40s ' "$$dir"; out=$$($(NODUS) validate "$$dir"); rc=$$?; \
		echo "$$out" | tail -n 1; [ $$rc -eq 0 ] || { echo "$$out"; exit 1; }; \
	done
	@printf '%-40s ' catalog; $(NODUS) validate catalog | tail -n 1
	@echo "== next: $(NODUS) env test catalog/arithmetic, $(NODUS) validate PATH, $(NODUS) schema KIND (see README.md)"

# pytest exits 5 when it collected nothing; that is not a failure of the checks themselves.
test: setup
	$(VENV)/bin/pytest -n 2 -q; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; rc=0; fi; exit $$rc

bench: setup
	$(VENV)/bin/python bench/validate.py
	$(VENV)/bin/python bench/grading.py
	$(VENV)/bin/python bench/build.py
	$(VENV)/bin/python bench/plan.py

schemas: setup
	$(VENV)/bin/python -m nodus.specs.schema_export

fmt: setup
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .
