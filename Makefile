# The two commands of the README, and the chores behind them. Needs only python3 with pip (and make).
#   make quickstart   set up .venv and run the main job on the embedded default
#   make test         set up .venv with the dev tools and run every check and test
PY ?= python3
# uv, given this machine's pip configuration where it has one (local wheels and indexes: see .ci/uv).
UV = $(PY) .ci/uv
# nodus-runtimes' torch build: cpu by default; `make setup EXTRA=cuda` on a GPU host (CUDA torch and vLLM).
EXTRA ?= cpu
VENV = .venv
NODUS = $(VENV)/bin/nodus
MEMBERS = specs builder reconciler images/env-base runtimes
PROJECTS = pyproject.toml $(foreach m,$(MEMBERS),$(m)/pyproject.toml)

.PHONY: quickstart test setup bench schemas fmt

SYNCED = $(VENV)/.synced-$(EXTRA)

$(SYNCED): $(PROJECTS)
	@$(PY) -m uv --version >/dev/null 2>&1 || $(PY) -m pip install --quiet --disable-pip-version-check uv
	$(UV) sync --all-packages --compile-bytecode --quiet --extra $(EXTRA)
	@rm -f $(VENV)/.synced $(VENV)/.synced-*
	@touch $@

setup: $(SYNCED)

# The main job: the tiny model (built here, no hub), then `nodus apply` of examples/quickstart (an Environment and a
# GRPO-LoRA TrainingJob), then the before-and-after comparison the platform computed. examples/quickstart/nodus.lock
# (made here, not committed) makes that folder its own project, with its state in examples/quickstart/.nodus/.
QUICKSTART = examples/quickstart
quickstart: setup
	@.ci/system-packages quickstart
	@echo "== 1/3 the tiny model nodus/tiny-qwen3, warmed up on the quickstart's train split (no download)"
	$(VENV)/bin/python -m nodus.runtimes.tiny_model --warmup $(QUICKSTART)/env/reverse_words.py
	@test -f $(QUICKSTART)/nodus.lock || printf 'lockfileVersion: 1\nenvironments: {}\n' > $(QUICKSTART)/nodus.lock
	@echo "== 2/3 nodus apply $(QUICKSTART): build the Environment, then Baseline, Training, Evaluating, Exporting"
	cd $(QUICKSTART) && ../../$(NODUS) apply . --build --yes --wait --timeout 14m
	@echo "== 3/3 before and after, on the same held-out tasks (from the platform's record of the gradings)"
	@cd $(QUICKSTART) && ../../$(NODUS) describe tj/quickstart | sed -n '/^Results:/,/^Events:/p' | sed '$$d'
	@echo "== next: cd $(QUICKSTART) && ../../$(NODUS) get tj quickstart -o yaml; outputs in $(QUICKSTART)/.nodus/jobs/default/quickstart/outputs"

# pytest exits 5 when it collected nothing; that is not a failure of the checks themselves. Tests marked
# `exclusive` compare an estimate with measured running time: they run after the parallel run, on their own.
test: setup
	@rc=0; $(VENV)/bin/pytest -n 2 -q -m "not exclusive" || rc=$$?; [ $$rc -ne 5 ] || rc=0; \
	$(VENV)/bin/pytest -q -m exclusive || { r=$$?; [ $$r -eq 5 ] || rc=$$r; }; exit $$rc

bench: setup
	$(VENV)/bin/python bench/validate.py
	$(VENV)/bin/python bench/grading.py
	$(VENV)/bin/python bench/build.py
	$(VENV)/bin/python bench/plan.py
	$(VENV)/bin/python bench/train.py
	$(VENV)/bin/python bench/ray.py
	$(VENV)/bin/python bench/serving.py
	$(VENV)/bin/python bench/inference.py

schemas: setup
	$(VENV)/bin/python -m nodus.specs.schema_export

fmt: setup
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .
