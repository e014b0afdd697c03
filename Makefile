# Every target runs inside the uv workspace; `uv run` syncs all members first, except
# test-<member>, which installs that member alone (see below).
UV ?= uv
PYTEST ?= $(UV) run pytest
PACKAGES := retrain-core retrain-kernels retrain-backends-local retrain-backends-tinker \
            retrain-backends-unsloth retrain-envs retrain-cli

# Test tiers (docs/development.md): `slow` tests are deselected by default (pyproject.toml's
# addopts), so `make test` and every test-<member> run the fast tier; ALL_TIERS selects both.
ALL_TIERS := -m "slow or not slow"
PYTEST_ARGS ?=

REF ?=

.PHONY: setup lint typecheck test test-slow test-all docs bench bench-compare demo clean $(addprefix test-,$(PACKAGES)) \
        test-packages test-workspace

setup:
	$(UV) sync --all-packages

lint:
	$(UV) run ruff check packages scripts tests

format:
	$(UV) run ruff format packages scripts tests
	$(UV) run ruff check --fix packages scripts tests

# Strict on retrain-core (the torch-free contracts); the other members are checked too.
typecheck:
	$(UV) run mypy --strict packages/retrain-core/src/retrain
	$(UV) run mypy packages/retrain-cli/src/retrain

# The README's command: the fast tier (every test not marked slow).
test:
	$(PYTEST) -n 2 $(PYTEST_ARGS)

# The slow tier alone: training subprocesses, servers, torchrun, Ray, nested pytest, peer venvs.
test-slow:
	$(PYTEST) -n 2 -m slow $(PYTEST_ARGS)

# Everything, both tiers.
test-all:
	$(PYTEST) -n 2 $(ALL_TIERS) $(PYTEST_ARGS)

# One member's tests with only what it declares installed: its dependencies and its own `dev`
# group, synced from uv.lock into .venvs/<member> so the workspace's .venv stays whole. A test
# that imports an undeclared member fails here, not in the workspace run. The fast tier, like
# `make test`; PYTEST_ARGS='$(ALL_TIERS)' runs the member's slow tests too.
$(addprefix test-,$(PACKAGES)): test-%:
	UV_PROJECT_ENVIRONMENT="$(CURDIR)/.venvs/$*" $(UV) sync --package $* --locked --quiet
	"$(CURDIR)/.venvs/$*/bin/python" -m pytest -n 2 $(PYTEST_ARGS) packages/$*/tests

test-packages: $(addprefix test-,$(PACKAGES))

test-workspace:
	$(PYTEST) $(PYTEST_ARGS) tests

docs:
	$(UV) run python scripts/gen_config_docs.py --check
	$(UV) run mkdocs build --strict --site-dir site

# Benchmarks print one JSON object each; they are never part of the test suite.
# compare.py needs a commit to compare against: `make bench-compare REF=<git ref>`.
bench:
	@for script in scripts/bench/*.py; do [ "$$script" = scripts/bench/compare.py ] && continue; \
	  echo "== $$script" >&2; $(UV) run python $$script || exit 1; done

# This tree against REF, side by side in one run: the demo, the SmolLM2 profile, sampling.
bench-compare:
	@[ -n "$(REF)" ] || { echo "usage: make bench-compare REF=<git ref> [COMPARE_ARGS=...]" >&2; exit 2; }
	$(UV) run python scripts/bench/compare.py --ref $(REF) $(COMPARE_ARGS)

demo:
	$(UV) run retrain

clean:
	rm -rf site dist .venvs .pytest_cache .mypy_cache .ruff_cache
