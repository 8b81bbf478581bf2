"""Chapter 65: a checkpoint read split tensor x pipeline x data parallel over gloo processes reads like one process —
every request's log-likelihood within 1e-5 (fp32) of chapter 60's single-process reader, the same greedy flags, the same
greedy and seeded-sampled generations, each rank holding exactly the bytes chapter 50 counts for its slice (and no
other live tensor memory to speak of) — on every TP, PP, DP in {1, 2} and one sequence-parallel layout (`make test`:
TP 2 x PP 2; `make test-full`: the rest), from a checkpoint of another layout too; `mtnlg eval`, `generate` and `bias`
with `--nproc N --set parallel.*`: the same tables and texts as one process, bad layouts refused in one line
(`make test-full`: DP 2, PP 2 x DP 2, TP 2 x PP 2 x DP 2, `generate` and `bias`; `make test` keeps the bad layouts).
In bf16: chapter 50's bytes in bf16 on every rank, the load's peak within the weights plus one slice (a reader of
whole tensors refused), scores bitwise equal to the single-process bf16 reader at TP 1 x DP 1 and within 2^-8 (relative)
on the others (`make test`: TP 2, PP 2, TP 2 x PP 2; `make test-full`: all of {1,2}^3); the reader verifies only the
files it reads."""

import json
import os
import subprocess
import sys
from pathlib import Path
import pytest
from mtnlg import testing
from mtnlg.topology import launch, launch_each

ROOT = Path(__file__).resolve().parent.parent
MTNLG = str(Path(sys.executable).parent / "mtnlg")
DATA = ROOT / "tests" / "fixtures"  # the root that holds eval/ (chapter 03)
LIVE_SLACK = 64 * 1024  # bytes of live CPU tensors beyond the weights (RNG states and such)

FAST = {(2, 2, 1, False)}  # make test: TP and PP at once; DP 2 replicas: the `mtnlg eval` tables below (test-full)
LAYOUTS = [(tp, pp, dp, False) for tp in (1, 2) for pp in (1, 2) for dp in (1, 2) if tp * pp * dp > 1] + [
    (2, 2, 1, True)
]
CASES = [
    pytest.param(
        *c, marks=() if c in FAST else pytest.mark.slow, id=f"tp{c[0]}-pp{c[1]}-dp{c[2]}" + ("-sp" if c[3] else "")
    )
    for c in LAYOUTS
]


def read_call(checkpoint, reference, tp, pp, sp=False, dtype="auto") -> tuple:
    "Chapter 65's reader on this layout (None, None: chapter 60's single-process reader), as a `launch_each` call."
    return testing.parallel_reader_worker, (str(checkpoint), tp, pp, sp, *reference[:2], 8, dtype)


def load_call(checkpoint, whole: bool) -> tuple:
    "TP 2's `load_stage` in bf16; `whole`: with a reader that reads each tensor whole, then cuts its slice."
    return testing.stage_load_worker, (str(checkpoint), 2, 1, "bfloat16", whole)


@pytest.fixture(scope="module")
def reference(checkpoint):
    """The requests, the prompts, what chapter 60's single-process reader makes of them, and the same reader in bf16
    (the whole GPT read in fp32, then cast): one process, both reads in turn."""
    requests, prompts = testing.reader_requests(str(checkpoint))
    calls = [read_call(checkpoint, (requests, prompts), None, None, dtype=d) for d in ("auto", "bfloat16")]
    fp32, bf16 = launch_each(calls, 1)
    return requests, prompts, fp32[0], bf16[0]


@pytest.fixture(scope="module")
def reads(checkpoint, reference):
    """`reads(key)`: every rank's result of one job of this file, keyed ("fp32" | "bf16", tp, pp, dp, sp) or ("load",
    whole). `make test`'s jobs of one world size share one launch (`launch_each`: a spawn costs each process seconds of
    imports, a call in running processes none), made the first time a test asks for one of them; any other job (the
    slow cases) is a launch of its own."""
    calls = {
        ("fp32", 2, 2, 1, False): read_call(checkpoint, reference, 2, 2),
        ("bf16", 1, 2, 1, False): read_call(checkpoint, reference, 1, 2, dtype="bfloat16"),
        ("bf16", 2, 1, 1, False): read_call(checkpoint, reference, 2, 1, dtype="bfloat16"),
        ("bf16", 2, 2, 1, False): read_call(checkpoint, reference, 2, 2, dtype="bfloat16"),
        ("load", False): load_call(checkpoint, False),
        ("load", True): load_call(checkpoint, True),
    }
    world = lambda key: 2 if key[0] == "load" else key[1] * key[2] * key[3]
    done = {}

    def of(key):
        if key not in calls:  # a slow case: a launch of its own
            kind, tp, pp, dp, sp = key
            fn, args = read_call(checkpoint, reference, tp, pp, sp, "bfloat16" if kind == "bf16" else "auto")
            return launch(fn, tp * pp * dp, *args)
        if key not in done:
            batch = [k for k in calls if world(k) == world(key)]
            done.update(zip(batch, launch_each([calls[k] for k in batch], world(key))))
        return done[key]

    return of


def assert_reads_like_one_process(ranks: list, reference: tuple):
    requests, _, ref = reference[:3]
    flags = [g for _, g in ref["scores"]]
    assert (
        any(flags) and not all(flags) and len(set(map(tuple, ref["sampled"]))) == len(ref["sampled"])
    )  # a test that can fail
    for r in ranks:
        diffs = [abs(a[0] - b[0]) for a, b in zip(r["scores"], ref["scores"])]
        assert len(diffs) == len(ref["scores"]) > len(requests) and max(diffs) <= 1e-5, max(diffs)
        assert [g for _, g in r["scores"]] == [g for _, g in ref["scores"]]
        assert r["greedy"] == ref["greedy"] and r["sampled"] == ref["sampled"]
        assert r["held"] == r["predicted"], (r["held"], r["predicted"])  # chapter 50's count, to the byte
        assert r["live"] - r["held"] <= LIVE_SLACK, (r["live"], r["held"])  # no other copy of any weight is alive


@pytest.mark.parametrize("tp,pp,dp,sp", CASES)
def test_every_layout_reads_like_one_process(reads, reference, tp, pp, dp, sp):
    ranks = reads(("fp32", tp, pp, dp, sp))
    assert_reads_like_one_process(ranks, reference)
    if tp * pp > 1:
        assert max(r["held"] for r in ranks) < reference[2]["held"]  # no rank holds the whole model


BF16_FAST = {(2, 1, 1), (1, 2, 1), (2, 2, 1)}
BF16_CASES = [
    pytest.param(tp, pp, dp, marks=() if (tp, pp, dp) in BF16_FAST else pytest.mark.slow, id=f"tp{tp}-pp{pp}-dp{dp}")
    for tp in (1, 2)
    for pp in (1, 2)
    for dp in (1, 2)
]
BF16_TOL = 2**-8  # bf16's rounding step, relative: |Δ log P| <= BF16_TOL x max(1, |log P|) (measured: 8.6e-4 at TP 2)


@pytest.mark.parametrize("tp,pp,dp", BF16_CASES)
def test_bf16_reads_like_one_bf16_process(reads, reference, tp, pp, dp):
    """Read in bf16 (what a GPU run selects): every rank holds chapter 50's bytes in bf16, took at most its weights plus
    one slice in flight while loading, and scores like the single-process bf16 reader: bitwise at TP 1 with one replica
    (the same products in the same order, on the same batches), within bf16's rounding step otherwise (TP 2 adds
    partial sums across ranks; DP 2 splits the requests, so each replica's batches are other shapes)."""
    ranks, reference_bf16 = reads(("bf16", tp, pp, dp, False)), reference[3]
    ref = reference_bf16["scores"]
    assert max(abs(a[0] - b[0]) for a, b in zip(ref, reference[2]["scores"])) > 1e-3  # bf16 is not fp32
    for r in ranks:
        assert r["held"] == r["predicted"], (r["held"], r["predicted"])  # chapter 50's count in bf16, to the byte
        assert r["held"] <= r["load_peak"] <= r["held"] + r["load_slack"], r
        assert len(r["scores"]) == len(ref)
        if tp == dp == 1:
            assert r["scores"] == ref and r["greedy"] == reference_bf16["greedy"]
            assert r["sampled"] == reference_bf16["sampled"]
        worst = max(abs(a[0] - b[0]) / max(1.0, abs(b[0])) for a, b in zip(r["scores"], ref))
        assert worst <= BF16_TOL, worst
    if tp * pp == 1:
        assert ranks[0]["held"] == reference_bf16["held"]


def test_a_reader_that_holds_whole_tensors_fails_the_load_guard(reads):
    "TP 2: reading each tensor whole, then cutting the slice, ends with the same bytes but fails the peak guard."
    fine, whole = reads(("load", False)), reads(("load", True))
    for r, w in zip(fine, whole):
        assert r["peak"] == r["held"] + r["slack"], r  # the weights and exactly one slice in flight
        assert (
            f"while loading: more than its weights ({r['held']:,}) and one slice in flight ({r['slack']:,})"
            in w["error"]
        ), w


@pytest.mark.slow
def test_a_checkpoint_of_another_layout_reads_the_same(checkpoint, reference, tmp_path):
    """Trained TP 1 and resharded to TP 2 x PP 2 (its vocabulary padded for TP 2), then read as TP 1 x PP 2 and TP 2 x
    DP 2."""
    run(
        [
            MTNLG,
            "reshard",
            str(checkpoint),
            str(tmp_path),
            "--set",
            "parallel.tensor_parallel=2",
            "--set",
            "parallel.pipeline_parallel=2",
            "--nproc",
            "4",
        ]
    )
    for tp, pp, dp in [(1, 2, 1), (2, 1, 2)]:
        assert_reads_like_one_process(
            launch(testing.parallel_reader_worker, tp * pp * dp, str(tmp_path), tp, pp, False, *reference[:2]),
            reference,
        )


def run(argv, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900, **kw)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def eval_results(checkpoint, out: Path, *extra) -> dict:
    run(
        [
            MTNLG,
            "eval",
            "--checkpoint",
            str(checkpoint),
            "--data-dir",
            str(DATA),
            "--tasks",
            "all",
            "--shots",
            "0,few",
            "--limit",
            "8",
            "--out",
            str(out),
            *extra,
        ]
    )
    return json.loads((out / "results.json").read_text())


def same_table(a: dict, b: dict):
    assert a["tasks"].keys() == b["tasks"].keys() and len(a["tasks"]) >= 9
    for name in a["tasks"]:
        assert a["tasks"][name]["acc"] == b["tasks"][name]["acc"], name
    assert (Path(a["out"]) / "results.md").read_text() == (Path(b["out"]) / "results.md").read_text()


@pytest.fixture(scope="module")
def one_process_results(checkpoint, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("eval-one")
    return {**eval_results(checkpoint, out), "out": str(out)}


@pytest.mark.parametrize(
    "nproc,sets",
    [  # make test-full: the CLI's replicas (the model-parallel reads are the launches above, on the same `MtnlgLM`)
        pytest.param(2, [], marks=pytest.mark.slow),
        pytest.param(4, ["parallel.pipeline_parallel=2"], marks=pytest.mark.slow),
        pytest.param(8, ["parallel.tensor_parallel=2", "parallel.pipeline_parallel=2"], marks=pytest.mark.slow),
    ],
    ids=["dp2", "pp2-dp2", "tp2-pp2-dp2"],
)
def test_mtnlg_eval_on_n_processes_prints_the_same_table(checkpoint, one_process_results, tmp_path, nproc, sets):
    "The nine tasks' metrics identical on the fixture sets; the replicas split the requests (DP 2) and change nothing."
    res = eval_results(checkpoint, tmp_path, "--nproc", str(nproc), *[a for s in sets for a in ("--set", s)])
    same_table({**res, "out": str(tmp_path)}, one_process_results)
    assert res["layout"].endswith("x DP 2") and one_process_results["layout"] == "TP 1 x PP 1 x DP 1"


def generated(checkpoint, *extra) -> list:
    r = run(
        [
            MTNLG,
            "generate",
            "--checkpoint",
            str(checkpoint),
            "--prompt",
            "The river",
            "--prompt",
            "In 1887 the city of",
            "--max-new-tokens",
            "12",
            *extra,
        ]
    )
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


@pytest.mark.slow  # make test keeps the in-process generations' equality above; the CLI over two processes: test-full
def test_mtnlg_generate_on_two_processes_writes_the_same_text(checkpoint):
    one = generated(checkpoint, "--temperature", "0.8", "--seed", "5")
    assert len(one) == 2
    assert (
        generated(
            checkpoint, "--temperature", "0.8", "--seed", "5", "--nproc", "2", "--set", "parallel.pipeline_parallel=2"
        )
        == one
    )


@pytest.mark.parametrize(
    "argv,message,own_process",
    [
        (
            ["--nproc", "3", "--set", "parallel.pipeline_parallel=2"],
            "3 processes do not split into replicas of TP 1 x PP 2",
            True,
        ),
        (["--nproc", "3", "--set", "parallel.tensor_parallel=3"], "4 heads do not split over TP 3", False),
        (
            ["--nproc", "2", "--set", "model.hidden_size=64"],
            "--set model.hidden_size: reading a checkpoint takes only",
            False,
        ),
    ],
    ids=["world", "heads", "not-a-layout"],
)
def test_a_layout_that_cannot_read_the_checkpoint_is_one_line_before_any_rank(
    checkpoint, capsys, argv, message, own_process
):
    """`mtnlg eval` refuses in one line, exit 2, before it starts a rank: the first case as a user runs it (a process of
    its own, so nothing else reaches stderr: no warning, no launcher), the others through `mtnlg.cli.main` in this
    process (the same check, without a second start-up's imports)."""
    from mtnlg.cli import main

    argv = ["eval", "--checkpoint", str(checkpoint), "--data-dir", str(DATA), *argv]
    if own_process:
        r = subprocess.run([MTNLG, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)
        code, err = r.returncode, r.stderr
    else:
        code, err = main(argv), capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err[-2000:]


@pytest.mark.slow
def test_mtnlg_bias_on_n_processes_writes_the_same_report(checkpoint, tmp_path):
    """Chapter 70's probes (log-likelihoods, sampled continuations) and chapter 72's benchmarks, read PP 2 x DP 2: the
    same report."""

    def report(out, *extra):
        run(
            [
                MTNLG,
                "bias",
                "--checkpoint",
                str(checkpoint),
                "--data-dir",
                str(DATA),
                "--samples",
                "2",
                "--max-new-tokens",
                "8",
                "--benchmarks-limit",
                "6",
                "--out",
                str(out),
                *extra,
            ]
        )
        return json.loads((out / "bias.json").read_text())["sections"]

    one = report(tmp_path / "one")
    assert_close(report(tmp_path / "four", "--nproc", "4", "--set", "parallel.pipeline_parallel=2"), one)


def assert_close(a, b, where="", tol=1e-4):
    "Equal structures; numbers within `tol` (sums of log-likelihoods in fp32, summed in another order), all else equal."
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_close(a[k], b[k], f"{where}.{k}", tol)
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_close(x, y, f"{where}[{i}]", tol)
    elif isinstance(a, float) and isinstance(b, float):
        assert abs(a - b) <= tol or a == b, (where, a, b)
    else:
        assert a == b, (where, a, b)


@pytest.mark.slow
def test_lm_eval_model_mtnlg_under_torchrun_names_the_layout(checkpoint, tmp_path):
    """`torchrun ... lm_eval --model mtnlg --model_args checkpoint=DIR,tensor_parallel=2`: TP 2 x DP 2, the same table
    as one process."""
    from mtnlg.evaluate import install_lm_eval_plugin
    from mtnlg.tasks import write_task_yamls
    from mtnlg.topology import free_port

    install_lm_eval_plugin()
    tasks = write_task_yamls(tmp_path / "tasks", DATA / "eval")
    env = {
        **os.environ,
        "HF_DATASETS_CACHE": str(tmp_path / "hf-cache"),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
    }

    def table(nproc: int, model_args: str) -> list[str]:
        r = run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                str(nproc),
                "--master-port",
                str(free_port()),
                str(Path(sys.executable).parent / "lm_eval"),
                "--model",
                "mtnlg",
                "--model_args",
                model_args,
                "--batch_size",
                "16",
                "--include_path",
                str(tasks),
                "--tasks",
                "boolq_local,winogrande_local,hans_local",
                "--num_fewshot",
                "2",
                "--limit",
                "8",
            ],
            env=env,
        )
        return [line for line in r.stdout.splitlines() if line.startswith("|")]

    one = table(1, f"checkpoint={checkpoint}")
    assert len(one) == 5 and all(t in "\n".join(one) for t in ("boolq_local", "winogrande_local", "hans_local"))
    assert table(4, f"checkpoint={checkpoint},tensor_parallel=2") == one


@pytest.mark.slow
def test_mtnlg_eval_started_as_srun_starts_it(checkpoint, one_process_results, tmp_path):
    """Four ranks started as srun starts them (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; no torchrun): the same table,
    written once."""
    from mtnlg.topology import free_port

    port, n = free_port(), 4
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MTNLG_RANK_ERRORS")}
    argv = [
        MTNLG,
        "eval",
        "--checkpoint",
        str(checkpoint),
        "--data-dir",
        str(DATA),
        "--tasks",
        "all",
        "--shots",
        "0,few",
        "--limit",
        "8",
        "--out",
        str(tmp_path),
        "--set",
        "parallel.pipeline_parallel=2",
    ]
    procs = [
        subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={
                **env,
                "SLURM_PROCID": str(r),
                "SLURM_NTASKS": str(n),
                "SLURM_LOCALID": str(r),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            },
        )
        for r in range(n)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    assert [sum(line.startswith("wrote ") for line in out.splitlines()) for out, _ in outs] == [
        1,
        0,
        0,
        0,
    ]  # rank 0 alone
    same_table({**json.loads((tmp_path / "results.json").read_text()), "out": str(tmp_path)}, one_process_results)


def test_evaluation_verifies_what_it_reads_not_adams_states(checkpoint, tmp_path):
    """A DP 2 checkpoint (the fixture's step with a data-parallel replica's file added: Adam's states only, the model
    left out as a replica leaves it): the reader verifies the weights' file, config and tokenizer; a corrupt replica
    file is none of its business (`verify_all`, which a resume runs, refuses it), a corrupt weights file stops it."""
    import shutil
    from mtnlg.checkpoint import Checkpoint, CheckpointCorruptError, file_digest, seal_meta

    src = Checkpoint(checkpoint).dir
    step = tmp_path / src.name
    shutil.copytree(src, step)
    meta = json.loads((step / "meta.json").read_text())
    (first,) = meta["shards"]
    shutil.copy(step / first, step / "rank-00001.pt")  # its bytes do not matter here: only their checksum
    meta["shards"]["rank-00001.pt"] = {**meta["shards"][first], "coord": [0, 1, 0], "model": []}
    meta["layout"]["dp"] = 2
    meta.pop("meta_checksum", None)
    meta["checksums"]["files"] = {n: file_digest(step / n) for n in [*meta["shards"], "config.yaml", "tokenizer.json"]}
    (step / "meta.json").write_text(seal_meta(meta))

    def flip(name: str):
        data = bytearray((step / name).read_bytes())
        data[len(data) // 2] ^= 1
        (step / name).write_bytes(bytes(data))

    flip("rank-00001.pt")
    ckpt = Checkpoint(step)
    assert ckpt.model_files() == [first]
    ckpt.verify_files(["config.yaml", "tokenizer.json", *ckpt.model_files()])
    assert ckpt.verified == {"config.yaml", "tokenizer.json", first}
    with pytest.raises(CheckpointCorruptError, match="rank-00001.pt is corrupt"):
        Checkpoint(step).verify_all()
    flip(first)
    ckpt = Checkpoint(step)
    with pytest.raises(CheckpointCorruptError, match=f"{first} is corrupt"):
        ckpt.verify_files(ckpt.model_files())
