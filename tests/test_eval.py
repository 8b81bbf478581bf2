"""Evaluation (chapters 43, 44, 60, 61): checkpoint I/O, export to transformers, our `mtnlg` harness backend against the
harness's own `hf` backend on every local task (0- and 1-shot), `lm_eval --model mtnlg` from the shell, and bad
input."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
FIXTURES = ROOT / "tests" / "fixtures" / "eval"
DATA_ROOT = FIXTURES.parent  # what --data-dir names: the root that holds eval/ (chapter 03)
from mtnlg.evaluate import offline_environment

offline_environment()  # explicit (importing mtnlg sets nothing): these tests never download


# checkpoint, hf_dir, backends: session fixtures in conftest.py (chapter 72's bias tasks use the same model)


def test_export_hf_logits_match(checkpoint, hf_dir):
    from mtnlg.export_hf import logits_difference

    cfg = json.loads((hf_dir / "config.json").read_text())
    assert cfg["activation_function"] == "gelu" and cfg["vocab_size"] == 2048 and cfg["n_positions"] == 128
    assert (hf_dir / "model.safetensors").is_file() and (hf_dir / "tokenizer.json").is_file()
    assert logits_difference(checkpoint, hf_dir, seed=1) <= 1e-4


@pytest.mark.parametrize("shots", ["0", "1"])
def test_crosscheck_with_hf_backend(backends, shots):
    "Every local task: same accuracy, and every request's log-likelihood within 1e-4, ours vs the harness's hf backend."
    from mtnlg.tasks import TASKS, evaluate_tasks

    ours, hf = backends
    a = evaluate_tasks(ours, ["all"], [shots], FIXTURES, log_samples=True)
    b = evaluate_tasks(hf, ["all"], [shots], FIXTURES, log_samples=True)
    assert sorted(a["tasks"]) == sorted(TASKS)
    for name in TASKS:
        x, y = a["samples"][f"{name}/{shots}"], b["samples"][f"{name}/{shots}"]
        assert len(x) == len(y) == a["tasks"][name]["n"] >= 8, name
        assert [len(r) for r in x] == [len(r) for r in y], name
        diffs = [abs(u - v) for p, q in zip(x, y) for u, v in zip(p, q)]
        assert max(diffs) <= 1e-4, (name, max(diffs))
        assert a["tasks"][name]["acc"] == b["tasks"][name]["acc"], name
    assert ours.boundary_fixes == 0


def test_packed_rows_score_as_plain_rows(backends, monkeypatch):
    """Every local task's 0-shot requests: the packed rows (each context once) give every log-likelihood within 1e-5 of
    one plain causal row per window and the same greedy flags, and run fewer tokens."""
    import mtnlg.evaluate as evaluate
    from mtnlg.tasks import TASKS, local_task

    ours, _ = backends
    reqs = []
    for name in TASKS:
        t = local_task(name, FIXTURES, 0)
        t.build_all_requests(limit=8, rank=0, world_size=1)
        reqs += [r for r in t.instances if r.request_type == "loglikelihood"]
    tokens = {}
    pack = evaluate.pack_pieces

    def counted(pieces, max_length, share=True):
        rows = pack(pieces, max_length, share)
        tokens[share] = sum(len(r.tokens) for r in rows)
        return rows

    monkeypatch.setattr(evaluate, "pack_pieces", counted)
    packed = ours.loglikelihood(reqs, disable_tqdm=True)
    monkeypatch.setattr(evaluate, "pack_pieces", lambda pieces, n, share=True: counted(pieces, n, False))
    plain = ours.loglikelihood(reqs, disable_tqdm=True)
    assert len(reqs) > 100 and max(abs(a[0] - b[0]) for a, b in zip(packed, plain)) <= 1e-5
    assert [a[1] for a in packed] == [b[1] for b in plain]
    assert tokens[True] < 0.9 * tokens[False], tokens


def test_every_result_records_the_environment_collected_once(backends):
    """run_task: each harness result still carries torch's environment report, the same one a direct call gives,
    collected once per process (not `pip list` per task); torch's function is itself again afterwards."""
    import torch.utils.collect_env as collect_env
    from mtnlg.tasks import local_task, run_task, _ENV_INFO

    original = collect_env.get_pretty_env_info
    _ENV_INFO.clear()
    first, second = (run_task(backends[0], local_task("wic", FIXTURES), limit=2) for _ in range(2))
    assert collect_env.get_pretty_env_info is original
    assert first["pretty_env_info"] == second["pretty_env_info"] == _ENV_INFO["info"] == original()
    assert "PyTorch version" in first["pretty_env_info"]


def test_loglikelihood_rolling_and_generation_match_hf(backends):
    from lm_eval.api.instance import Instance

    ours, hf = backends
    text = json.loads((ROOT / "tests/fixtures/corpus/wiki_valid.jsonl").read_text().splitlines()[0])["text"][:1500]
    req = [Instance("loglikelihood_rolling", {}, (text,), 0)]
    assert len(ours.tok_encode(text)) > ours.max_length  # several windows
    assert abs(ours.loglikelihood_rolling(req)[0] - hf.loglikelihood_rolling(req)[0]) < 1e-3
    gen = [Instance("generate_until", {}, ("The city of", {"until": ["."], "max_gen_toks": 16}), 0)]
    assert ours.generate_until(gen) == hf.generate_until(gen)


@pytest.mark.slow  # make test: MtnlgLM against lm-eval's hf backend (above), the plugin registering it (chapter 60)
def test_lm_eval_shell_model_mtnlg(checkpoint, tmp_path):
    "`lm_eval --model mtnlg --model_args checkpoint=DIR` works from the shell (the .pth hook registers it)."
    from mtnlg.evaluate import install_lm_eval_plugin
    from mtnlg.tasks import write_task_yamls

    install_lm_eval_plugin()
    tasks = write_task_yamls(tmp_path / "tasks", FIXTURES)
    env = {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "hf-cache")}
    r = subprocess.run(
        [
            str(BIN / "lm_eval"),
            "--model",
            "mtnlg",
            "--model_args",
            f"checkpoint={checkpoint}",
            "--batch_size",
            "16",
            "--include_path",
            str(tasks),
            "--tasks",
            "boolq_local,hans_local",
            "--limit",
            "4",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "boolq_local" in r.stdout and "hans_local" in r.stdout and "acc" in r.stdout


def test_imports_have_no_side_effects():
    """Importing our evaluation modules (after the libraries, which set their own filters) changes no env var, warning
    filter,"""
    "import hook or harness registry, and does not load `datasets`; register_lm() is what registers `mtnlg`."
    probe = """
import os, sys, warnings
import lm_eval, lm_eval.api.model, transformers, megatron.core, mtnlg.model
env, n, hooks = dict(os.environ), len(warnings.filters), list(sys.meta_path)
import mtnlg.checkpoint, mtnlg.export_hf, mtnlg.evaluate, mtnlg.tasks
assert dict(os.environ) == env, set(os.environ) ^ set(env)
assert len(warnings.filters) == n and sys.meta_path == hooks
assert "datasets" not in sys.modules
from lm_eval.api.registry import model_registry
assert "mtnlg" not in model_registry
assert mtnlg.evaluate.register_lm() is model_registry.get("mtnlg") is mtnlg.evaluate.MtnlgLM
"""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")}
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]


def test_checkpoints_root_and_step_dir_are_the_same_checkpoint(checkpoint, tmp_path, capsys):
    "A run's checkpoints/ root reads its `latest` step: same weights, and `mtnlg eval` gives identical results, written"
    "by default to the run's eval/ (beside checkpoints/) and naming the step directory it read."
    import torch
    from mtnlg.checkpoint import FORMAT, check_checkpoint, load_state_dict

    step = check_checkpoint(checkpoint)
    assert step == checkpoint / "step-0000040" and (checkpoint / "latest").read_text().strip() == step.name
    a, b = load_state_dict(checkpoint), load_state_dict(step)
    assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
    args = ["--tasks", "boolq", "--shots", "0", "--limit", "6", "--data-dir", str(DATA_ROOT)]
    code, err = _run_cli(["eval", "--checkpoint", str(checkpoint), *args], capsys)
    assert code == 0, err
    code, err = _run_cli(["eval", "--checkpoint", str(step), "--out", str(tmp_path), *args], capsys)
    assert code == 0, err
    x, y = (json.loads((d / "results.json").read_text()) for d in (checkpoint.parent / "eval", tmp_path))
    assert x == y and x["checkpoint"] == str(step.resolve())
    assert x["meta"] == json.loads((step / "meta.json").read_text()) and x["meta"]["format"] == FORMAT


@pytest.mark.slow  # make test: TP 2 reads (test_parallel_inference), the 1-process export (test_export_hf_logits_match)
def test_export_and_eval_a_tp2_checkpoint(tmp_path):
    "A checkpoint straight from a TP 2 run (2 processes) is exported and evaluated as it is, no consolidation step. Its"
    "vocabulary of 2100 is padded to 2304 rows (a multiple of 128 x 2, where a one-device run would have 2176): both"
    "backends keep all 2304 trained rows, and agree."
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM
    from mtnlg.checkpoint import Checkpoint
    from mtnlg.evaluate import MtnlgLM
    from mtnlg.export_hf import export_hf

    run = tmp_path / "tp2"
    r = subprocess.run(
        [
            str(BIN / "mtnlg"),
            "train",
            "--config",
            str(ROOT / "scaled_configs" / "tiny.yaml"),
            "--nproc",
            "2",
            "--set",
            "parallel.tensor_parallel=2",
            "--set",
            "model.vocab_size=2100",
            "--set",
            "schedule.train_iters=4",
            "--set",
            "schedule.eval_iters=1",
            "--run-dir",
            str(run),
            "--no-progress",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    ckpt = Checkpoint(run / "checkpoints")
    assert (ckpt.layout.tp, len(ckpt.meta["shards"]), ckpt.full("embedding.tokens.weight").shape[0]) == (2, 2, 2304)
    hf_dir = export_hf(run / "checkpoints", tmp_path / "hf")  # checks the logits agree within 1e-4
    assert json.loads((hf_dir / "config.json").read_text())["vocab_size"] == 2304
    ours = MtnlgLM(str(run / "checkpoints"), batch_size=8)
    theirs = HFLM(pretrained=str(hf_dir), device="cpu", dtype="float32", batch_size=8)
    reqs = [
        Instance("loglikelihood", {}, p, i)
        for i, p in enumerate(
            [("", "The"), ("The city of", " London is large."), ("Question: Is water wet?\nAnswer:", " yes")]
        )
    ]
    a, b = ours.loglikelihood(reqs), theirs.loglikelihood(reqs)
    assert max(abs(x[0] - y[0]) for x, y in zip(a, b)) <= 1e-4 and [x[1] for x in a] == [y[1] for y in b]


def _run_cli(args, capsys):
    from mtnlg.cli import main

    code = main(args)
    return code, capsys.readouterr().err


def test_bad_input_unknown_task(checkpoint, capsys):
    code, err = _run_cli(
        ["eval", "--checkpoint", str(checkpoint), "--tasks", "boolq,squad", "--data-dir", str(DATA_ROOT)], capsys
    )
    assert code == 2 and "unknown task 'squad'" in err and "winogrande" in err


def test_bad_input_missing_data_file(checkpoint, tmp_path, capsys):
    (tmp_path / "eval").mkdir()
    code, err = _run_cli(
        ["eval", "--checkpoint", str(checkpoint), "--tasks", "wic", "--data-dir", str(tmp_path)], capsys
    )
    assert code == 2 and "wic/validation.jsonl" in err and "not found" in err and "--data-dir" in err
    # HANS: not in the full offline sets (`mtnlg hans` generates it), a generated slice in the fixtures. Both cases:
    code, err = _run_cli(
        ["eval", "--checkpoint", str(checkpoint), "--tasks", "hans", "--data-dir", str(tmp_path)], capsys
    )
    assert code == 2 and "hans/validation.jsonl" in err and "mtnlg hans --out ROOT" in err
    out = tmp_path / "hans-eval"
    code, err = _run_cli(
        [
            "eval",
            "--checkpoint",
            str(checkpoint),
            "--tasks",
            "hans",
            "--shots",
            "0",
            "--limit",
            "2",
            "--data-dir",
            str(DATA_ROOT),
            "--out",
            str(out),
        ],
        capsys,
    )
    assert code == 0, err
    assert json.loads((out / "results.json").read_text())["tasks"]["hans"]["n"] == 2


def test_bad_input_malformed_row(checkpoint, tmp_path, capsys):
    shutil.copytree(FIXTURES / "piqa", tmp_path / "eval" / "piqa")
    rows = (tmp_path / "eval" / "piqa" / "validation.jsonl").read_text().splitlines()
    rows[4] = rows[4][:-20]  # a truncated line
    (tmp_path / "eval" / "piqa" / "validation.jsonl").write_text("\n".join(rows) + "\n")
    code, err = _run_cli(
        ["eval", "--checkpoint", str(checkpoint), "--tasks", "piqa", "--data-dir", str(tmp_path)], capsys
    )
    assert code == 2 and "validation.jsonl:5: malformed JSON" in err and "fix or delete that line" in err
    rows[4] = json.dumps({"goal": "g", "sol1": "a", "sol2": "b"})  # valid JSON, no label
    (tmp_path / "eval" / "piqa" / "validation.jsonl").write_text("\n".join(rows) + "\n")
    code, err = _run_cli(
        ["eval", "--checkpoint", str(checkpoint), "--tasks", "piqa", "--data-dir", str(tmp_path)], capsys
    )
    assert code == 2 and "validation.jsonl:5: row lacks field(s) ['label']" in err


def test_bad_input_broken_checkpoints(checkpoint, tmp_path, capsys):
    "A step dir without meta.json, a missing rank file, a root holding only an interrupted save, an older format,"
    "a missing path: `mtnlg eval` and `mtnlg export-hf` exit 2 with chapter 43's message, and write nothing."
    step = checkpoint / "step-0000040"
    root = tmp_path / "checkpoints"
    shutil.copytree(step, root / step.name)
    incomplete = shutil.copytree(step, root / "step-0000060")
    (incomplete / "meta.json").unlink()
    missing = shutil.copytree(step, tmp_path / "missing" / step.name)
    (missing / "rank-00000.pt").unlink()
    killed = shutil.copytree(step, tmp_path / "killed" / ".step-0000040.tmp")
    (killed / "meta.json").unlink()
    older = shutil.copytree(step, tmp_path / "older" / step.name)
    (older / "meta.json").write_text(json.dumps({"layout": "tp1-pp1", "step": 40}))
    for bad, expected in [
        (incomplete, "partial copy); use step-0000040 beside it"),
        (missing, "lacks rank-00000.pt"),
        (tmp_path / "killed", "holds no complete checkpoint"),
        (older, "from before sharded checkpoints"),
        (tmp_path / "nowhere", "not found"),
    ]:
        for cmd in (
            [
                "eval",
                "--checkpoint",
                str(bad),
                "--tasks",
                "boolq",
                "--data-dir",
                str(DATA_ROOT),
                "--out",
                str(tmp_path / "eval"),
            ],
            ["export-hf", str(bad), str(tmp_path / "out")],
        ):
            code, err = _run_cli(cmd, capsys)
            assert code == 2 and expected in err and err.count("\n") == 1, (cmd, err)
    assert not (tmp_path / "eval").exists() and not (tmp_path / "out").exists()


def test_mtnlg_eval_writes_results(checkpoint, tmp_path, capsys):
    from mtnlg.cli import main

    assert (
        main(
            [
                "eval",
                "--checkpoint",
                str(checkpoint),
                "--tasks",
                "boolq,hans",
                "--shots",
                "0,few",
                "--data-dir",
                str(DATA_ROOT),
                "--out",
                str(tmp_path),
            ]
        )
        == 0
    )
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["meta"]["layout"] == {"tp": 1, "pp": 1, "dp": 1} and res["meta"]["step"] == 40
    assert res["checkpoint"] == str((checkpoint / "step-0000040").resolve()) and set(res["tasks"]) == {"boolq", "hans"}
    boolq = res["tasks"]["boolq"]
    assert set(boolq["acc"]) == {"0", "few"} and boolq["paper"] == {"0": 0.782, "1": 0.825, "few": 0.848}
    assert boolq["chance"] == 0.5 and boolq["k"] == 32 and boolq["k_used"] == 8  # the fixture pool has 8
    table = (tmp_path / "results.md").read_text()
    n = len((FIXTURES / "boolq" / "validation.jsonl").read_text().splitlines())  # every row of the slice
    assert boolq["n"] == n == 28 and f"| BoolQ | validation | {n} | 0.500 |" in table and "/ 0.848 (K=8)" in table
    assert res["tasks"]["hans"]["k"] == 4 and "/ 0.702 (K=4)" in table  # HANS at the paper's four shots
    assert (tmp_path / "results.png").stat().st_size > 10_000


def test_mtnlg_export_hf_cli(checkpoint, tmp_path, capsys):
    from mtnlg.cli import main

    assert main(["export-hf", str(checkpoint), str(tmp_path / "hf")]) == 0
    out = capsys.readouterr().out
    assert "max |logits ours - transformers|" in out and (tmp_path / "hf" / "config.json").is_file()
    record = json.loads((tmp_path / "hf" / "mtnlg_export.json").read_text())  # the step directory read, and its meta
    assert record["source_checkpoint"] == str((checkpoint / "step-0000040").resolve())
    assert record["meta"] == json.loads((checkpoint / "step-0000040" / "meta.json").read_text())


def test_mtnlg_generate_cli(checkpoint, capsys):
    "`mtnlg generate`: one JSON line per prompt; a seed fixes sampled continuations; bad sampling arguments exit 2."
    from mtnlg.cli import main

    args = [
        "generate",
        "--checkpoint",
        str(checkpoint),
        "--prompt",
        "The river",
        "--prompt",
        "In 1887 the",
        "--max-new-tokens",
        "8",
        "--temperature",
        "0.9",
        "--top-p",
        "0.95",
    ]
    runs = []
    for seed in ("3", "3", "4"):
        assert main(args + ["--seed", seed]) == 0
        runs.append([json.loads(l) for l in capsys.readouterr().out.splitlines()])
    assert [r["prompt"] for r in runs[0]] == ["The river", "In 1887 the"]
    assert runs[0] == runs[1] != runs[2]
    code, err = _run_cli(["generate", "--checkpoint", str(checkpoint), "--prompt", "x", "--top-p", "0"], capsys)
    assert code == 2 and "top_p must be in (0, 1]" in err
