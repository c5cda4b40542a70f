# envkit: `make demo` builds the example team end to end; `make test` runs the whole suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The host's CPU build of torch, used to test the payload outside images (a local wheel here).
TORCH_TEST ?= torch==2.13.0
# Two workers; tests sharing an image stay on one (tests/conftest.py). XDIST= runs in one process.
XDIST ?= -n 2 --dist loadgroup --no-loadscope-reorder

.PHONY: venv engine slurm sif-tools podman demo check test unit integration lint clean schema docs

$(BIN)/envkit: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q '$(TORCH_TEST)' || echo "note: $(TORCH_TEST) not installed; payload tests will be skipped"
	touch $@

venv: $(BIN)/envkit

engine:
	./scripts/ensure-engine.sh

# Slurm's daemons and clients and munge (Debian's slurm-wlm): the fleet tests start a private cluster with them.
slurm:
	./scripts/ensure-slurm.sh

# skopeo, umoci, squashfs-tools and siftool (Debian's): `envkit export sif` assembles a SIF with them, and its test
# reads one back. Apptainer, which runs a SIF, has no Debian package and is not installed.
sif-tools:
	./scripts/ensure-sif-tools.sh

# Debian's podman: one test builds the same lock on a Podman engine of its own (another engine and builder); where it
# cannot be installed (not root, not Debian) that test is skipped.
podman:
	./scripts/ensure-podman.sh || echo "note: no podman; the Podman test will be skipped"

demo: venv engine
	$(BIN)/envkit doctor
	$(BIN)/envkit build examples/team.yaml

# ruff and mypy over envkit/ (pyproject.toml: [tool.ruff], [tool.mypy]); the payload, a program of its own that images
# run on Python 3.9+ and whose modules import one another by bare name, in a second mypy run rooted at its directory
# (3.10: the oldest Python mypy checks against).
PAYLOAD := envkit/payload/envkit_check
check: venv
	$(BIN)/ruff check envkit
	$(BIN)/mypy
	MYPYPATH=$(PAYLOAD) $(BIN)/mypy --explicit-package-bases --python-version 3.10 $(PAYLOAD)/*.py

test: venv engine slurm sif-tools podman check
	./scripts/ensure-browser.sh || echo "note: no chromium; the HTML report browser test will be skipped"
	TESTCONTAINERS_RYUK_DISABLED=true $(BIN)/python -m pytest -q $(XDIST) --durations=25 tests

unit: venv
	$(BIN)/python -m pytest -q tests/unit

integration: venv engine slurm sif-tools podman
	TESTCONTAINERS_RYUK_DISABLED=true $(BIN)/python -m pytest -q $(XDIST) --durations=25 tests/integration

# hadolint (with .hadolint.yaml's reasons) over the committed Dockerfiles and freshly rendered ones; then `check`.
lint: venv check
	$(BIN)/hadolint --config .hadolint.yaml dockerfiles/*/Dockerfile
	$(BIN)/python -m pytest -q tests/unit/render/test_lint.py

schema: venv
	$(BIN)/envkit schema > schema/team.schema.json

# docs/commands.md from the CLI's own help (tests/unit/test_commands_doc.py fails when it is stale).
docs: venv
	$(BIN)/python scripts/gen_commands.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
