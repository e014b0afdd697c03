# Every target runs inside the uv workspace; `uv run` syncs all members first.
UV ?= uv
PYTEST ?= $(UV) run pytest
PACKAGES := retrain-core retrain-kernels retrain-backends-local retrain-backends-tinker \
            retrain-backends-unsloth retrain-envs retrain-cli

.PHONY: setup lint typecheck test test-all docs bench demo clean $(addprefix test-,$(PACKAGES)) test-workspace

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

test:
	$(PYTEST) -n 2

$(addprefix test-,$(PACKAGES)): test-%:
	$(PYTEST) packages/$*/tests

test-workspace:
	$(PYTEST) tests

docs:
	$(UV) run python scripts/gen_config_docs.py --check
	$(UV) run mkdocs build --strict --site-dir site

# Benchmarks print one JSON object each; they are never part of the test suite.
bench:
	@for script in scripts/bench/*.py; do echo "== $$script" >&2; $(UV) run python $$script || exit 1; done

demo:
	$(UV) run retrain

clean:
	rm -rf site dist .pytest_cache .mypy_cache .ruff_cache
