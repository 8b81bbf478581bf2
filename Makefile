# The README's two commands: `make demo` (the main job) and `make test` (the test suite).
# Both create .venv and install everything first; nothing but the package registries is needed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-full install export clean lab docs lint

install: $(STAMP)

# torch first, pinned: here it is the local CPU build, on a GPU machine the CUDA build.
# Installing it before the package means no dependency can pull a second torch.
$(STAMP): setup.py settings.ini pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/python -c "import mtnlg.evaluate as e; e.install_lm_eval_plugin()"   # lets `lm_eval --model mtnlg` find us
	$(BIN)/python -c "from mtnlg import minhash, decontaminate; minhash.compile_minhash_kernels(); decontaminate.compile_ngram_kernels()"   # curation's numba kernels, compiled once into their cache
	@touch $(STAMP)

# Data: the full public sets wherever $MTNLG_DATA points (`mtnlg data` lists them), else the slices committed in
# tests/fixtures — the same setting for every command and chapter (nbs/03_catalog).

# The whole book on a CPU: curate real text, train a 3D-parallel model on it, evaluate it, report.
demo: install
	$(BIN)/mtnlg info --config scaled_configs/mtnlg-530b.yaml
	$(BIN)/mtnlg data
	$(BIN)/mtnlg curate --config scaled_configs/curate-demo.yaml --fresh
	$(BIN)/mtnlg train --config scaled_configs/tiny-3d.yaml --nproc 8
	$(BIN)/mtnlg eval --checkpoint runs/tiny-3d/checkpoints --tasks all --shots 0,1,few --limit 40
	$(BIN)/mtnlg eval --checkpoint runs/tiny-3d/checkpoints --tasks all --shots 0,1,few --limit 40 --out runs/tiny-3d/eval-3d --nproc 8 --set parallel.tensor_parallel=2 --set parallel.pipeline_parallel=2
	cmp runs/tiny-3d/eval/results.md runs/tiny-3d/eval-3d/results.md && echo "the same table, the model read split TP 2 x PP 2 x DP 2 over 8 processes (chapter 65)"
	$(BIN)/mtnlg bias --checkpoint runs/tiny-3d/checkpoints
	$(BIN)/mtnlg plan --config scaled_configs/mtnlg-530b.yaml --gpus 2240 --top 5
	$(BIN)/mtnlg curate --plan --nodes 1,64   # the paper's two Common Crawl snapshots, from bench/curate_validate.py's measured rates (bench/results/)
	@echo "demo done: runs/curate-demo (curated data), runs/tiny-3d (metrics.jsonl, loss.png, tensorboard/, checkpoints/, eval/results.md, eval-3d/results.md, bias/bias.md)"

# two workers (pytest-xdist): each test file, and each group of chapters sharing a run directory, stays on one worker.
test: install lint
	$(BIN)/python -m pytest tests -n 2 --dist loadscope --durations=15

# Style, checked before the tests: ruff's linter and formatter over the chapters, tests and benchmarks (pyproject.toml),
# nbdev_clean leaving the notebooks as committed, and mtnlg/ being exactly what nbdev_export makes of them
lint: install
	$(BIN)/ruff check nbs tests bench docs
	$(BIN)/ruff format --check nbs tests bench docs
	@before=$$(git diff -- nbs mtnlg | md5sum); $(BIN)/nbdev_clean && $(BIN)/nbdev_export; \
	  [ "$$before" = "$$(git diff -- nbs mtnlg | md5sum)" ] || { git --no-pager diff --stat -- nbs mtnlg; \
	  echo "make lint: nbdev_clean/nbdev_export changed the files above (now rewritten): review and commit them"; exit 1; }

# what CI runs (.ci/run): the README's `make test` itself, then the cases marked slow (e.g. kill -9 and bitwise resume
# on TP 2 x PP 2 x DP 2), so no test is left to rot
# and the book's website (tests/test_site.py, marked `book`), built from the chapters `make test` executed (runs/book/),
# opened page by page in a headless Chromium (Debian's chromium, installed by the test if missing)
test-full: test
	$(BIN)/python -m pytest tests -m slow -n 2 --dist loadscope --durations=15
	$(BIN)/python -m pytest tests -m book --durations=5

# Read the book: JupyterLab on nbs/ with this project's kernel, "mtnlg (.venv)"
lab: install
	$(BIN)/python -m ipykernel install --sys-prefix --name mtnlg --display-name "mtnlg (.venv)"
	$(BIN)/jupyter lab nbs/ $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# The book as a static website in runs/site/ (open runs/site/index.html): Sphinx + myst-nb, from the chapters as the
# tests executed them (runs/book/; a chapter without an executed copy is executed first), math by offline MathJax
docs: install
	$(BIN)/python docs/site.py build

export: install
	$(BIN)/nbdev_export && $(BIN)/nbdev_clean

clean:
	rm -rf runs .pytest_cache
