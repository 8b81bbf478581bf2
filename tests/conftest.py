import os
import sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent

# -- `make test` runs two workers on two cores: each gets its share of the cores (and so do the notebook kernels and
# subprocesses it starts, through the environment). Two processes of 2 OpenMP threads each on 2 cores spin against each
# other: a training loop ran 2.8x slower that way than with 1 thread each (measured here, 68 s vs 24 s).
if (_workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))) > 1:
    _threads = max(1, (os.cpu_count() or 1) // _workers)
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = str(_threads)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(_threads)


@pytest.fixture
def root():
    return ROOT


# -- chapter 60's tiny model, shared by the evaluation tests (test_eval.py, test_bias_tasks.py, test_parallel_inference)
# trained and exported once a run: under `make test`'s two workers, by whichever asks first, the other waiting on a lock
def shared_across_workers(tmp_path_factory, name: str, make) -> Path:
    """`make(path)` once per pytest run, `path` in the folder every xdist worker of the run shares (pytest's base
    temporary folder, or its parent under xdist): the first worker to ask makes it, holding a file lock, the other finds
    it made. The tests that use it read it, or copy it before they change it."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    base = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path, done = base / name, base / f"{name}.done"
    with FileLock(str(base / f"{name}.lock")):
        if not done.is_file():
            if path.exists():  # a worker that failed midway left it
                import shutil

                shutil.rmtree(path)
            make(path)
            done.touch()
    return path


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny model trained for 40 steps (in a subprocess, so this process keeps no training state): its checkpoints/
    root."""
    from tiny_runs import train_tiny

    train = lambda run: train_tiny(run, **{"schedule.train_iters": 40})
    return shared_across_workers(tmp_path_factory, "tiny-eval", train) / "checkpoints"


@pytest.fixture(scope="session")
def hf_dir(checkpoint, tmp_path_factory) -> Path:
    from mtnlg.export_hf import export_hf

    return shared_across_workers(tmp_path_factory, "hf", lambda path: export_hf(checkpoint, path))


@pytest.fixture(scope="session")
def backends(checkpoint, hf_dir):
    "Our `mtnlg` harness backend and the harness's own `hf` backend on the same weights."
    from mtnlg.evaluate import MtnlgLM, offline_environment
    from lm_eval.models.huggingface import HFLM

    offline_environment()
    return MtnlgLM(str(checkpoint), batch_size=64), HFLM(
        pretrained=str(hf_dir), device="cpu", dtype="float32", batch_size=64
    )


# -- `make test` runs on two workers (pytest -n 2 --dist loadscope): a scope (a test file, or a class of chapters in ---
# test_notebooks.py) stays on one worker. The longest scopes start first, so neither worker is left with a long one at
# the end (longest-processing-time first); the rest keep their order.
LONGEST_FIRST = [
    "test_kernels.py",
    "TestChapters_41_train",
    "test_launcher.py",
    "test_parallel_inference.py",
    "test_checkpoint.py",
    "test_engine.py",
    "TestChapters_62_generate",
    "TestChapters_60_evaluate",
    "test_rank_errors.py",
    "test_eval.py",
    "test_rehearsal.py",
    "TestChapters_20_kernels",
    "test_slurm.py",
    "test_bench_gpu.py",
    "test_memory.py",
    "test_deterministic.py",
    "test_bias_tasks.py",
    "test_architecture.py",
    "test_recompute.py",
]


def scope_of(item) -> str:
    return item.cls.__name__ if item.cls else item.path.name


def pytest_collection_modifyitems(config, items):
    rank = {s: i for i, s in enumerate(LONGEST_FIRST)}
    order = sorted(range(len(items)), key=lambda i: (rank.get(scope_of(items[i]), len(rank)), i))
    items[:] = [items[i] for i in order]
