# The README's two commands: `make demo` (the main job) and `make test` (the test suite).
# Both create .venv and install everything first; nothing but the package registries is needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install export clean

install: $(STAMP)

# torch first, pinned: here it is the local CPU build, on a GPU machine the CUDA build.
# Installing it before the package means no dependency can pull a second torch.
$(STAMP): setup.py settings.ini pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	@touch $(STAMP)

demo: install
	$(BIN)/mtnlg info --config scaled_configs/tiny.yaml
	$(BIN)/mtnlg train --config scaled_configs/tiny.yaml

test: install
	$(BIN)/python -m pytest tests

export: install
	$(BIN)/nbdev_export && $(BIN)/nbdev_clean

clean:
	rm -rf runs .pytest_cache
