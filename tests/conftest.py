import os, re, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent

@pytest.fixture
def root(): return ROOT


# -- chapter 60's tiny model, shared by the evaluation tests (test_eval.py, test_bias_tasks.py): trained once a session ----
@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory) -> Path:
    "A tiny model trained for 40 steps (in a subprocess, so this process keeps no training state): its checkpoints/ root."
    import subprocess
    run = tmp_path_factory.mktemp("tiny-eval")
    subprocess.run([str(Path(sys.executable).parent / "mtnlg"), "train", "--config", str(ROOT / "scaled_configs" / "tiny.yaml"),
                    "--set", "schedule.train_iters=40", "--run-dir", str(run), "--no-progress"],
                   cwd=ROOT, check=True, capture_output=True)
    return run / "checkpoints"


@pytest.fixture(scope="session")
def hf_dir(checkpoint, tmp_path_factory) -> Path:
    from mtnlg.export_hf import export_hf
    return export_hf(checkpoint, tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="session")
def backends(checkpoint, hf_dir):
    "Our `mtnlg` harness backend and the harness's own `hf` backend on the same weights."
    from mtnlg.evaluate import MtnlgLM, offline_environment
    from lm_eval.models.huggingface import HFLM
    offline_environment()
    return MtnlgLM(str(checkpoint), batch_size=64), HFLM(pretrained=str(hf_dir), device="cpu", dtype="float32", batch_size=64)


# -- `make test` runs on two workers (pytest -n 2 --dist loadgroup): what shares state runs on one worker, in order --------
SHARED_FIXTURE_FILES = {"test_eval.py", "test_bias_tasks.py"}          # the session fixtures above: built once, on one worker

def notebook_groups(notebooks) -> dict:
    "Chapters that write or read the same `../runs/<dir>` (a stand-in model one trains and the next reuses) -> one group."
    dirs = {nb.stem: set(re.findall(r"\.\./runs/([\w-]+)", nb.read_text())) - {"tiny-3d"} for nb in notebooks}  # tiny-3d: make demo's, read only
    group = {stem: stem for stem in dirs}
    for a in dirs:
        for b in dirs:
            if a < b and dirs[a] & dirs[b]:
                old, new = group[b], group[a]
                group = {k: (new if v == old else v) for k, v in group.items()}
    return group

def pytest_collection_modifyitems(config, items):
    groups = notebook_groups(sorted((ROOT / "nbs").glob("[0-9]*.ipynb")))
    for item in items:
        file = item.path.name
        if file == "test_notebooks.py" and item.originalname == "test_notebook_runs":
            stem = item.callspec.id
            item.add_marker(pytest.mark.xdist_group("notebooks-" + groups.get(stem, stem)))
        else:                                                          # a file's module fixtures are built once
            item.add_marker(pytest.mark.xdist_group("shared-fixtures" if file in SHARED_FIXTURE_FILES else file))
