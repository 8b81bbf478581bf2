"""One error, one exit code, from N processes (chapter 10's `run_ranks`, chapter 99's `main`): real torchrun jobs whose
ranks go through `mtnlg.cli.main`; one rank crashes, or a signal ends one. The job prints one line naming the rank that
failed first and the first line of its error (and one more for the ranks that failed after it), and exits with that
rank's code. Ctrl-C (SIGINT) and SIGTERM on the launcher stop every rank (one line, 130 / 143); a launcher killed by
SIGKILL leaves no rank running either; the error folder is gone on every path. Under srun (no `run_ranks`) the rank
that failed first prints its error, the others nothing. Chapter 98's `torchrun_script` shows a failed rank's own last
lines. A rank ends by chapter 10's `leave_job`, not the interpreter's teardown, which crashes while a gloo worker is
still busy. (The user-error cases — a missing dataset, a corrupt shard of a TP 2 x PP 2 x DP 2 checkpoint, with
`mtnlg train --nproc 8` — are in test_checkpoint.py.)"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
RANK = '''
import os, signal, sys, time
from pathlib import Path
from mtnlg.cli import COMMANDS, main
from mtnlg.topology import launcher_env
rank = launcher_env()["rank"]
Path(sys.argv[2], f"rank{rank}").write_text(os.environ.get("MTNLG_RANK_ERRORS", ""))   # the test's view of the job
def work(args):
    if args.how in ("collective", "raise-in-collective", "srun-user", "srun-crash"):
        import torch, torch.distributed as dist
        env = launcher_env()                          # torchrun's variables or srun's, as init_distributed reads them
        for k in ("rank", "world_size", "master_addr", "master_port"): os.environ[k.upper()] = str(env[k])
        dist.init_process_group("gloo")               # (without megatron-core's groups: a faster start)
        dist.barrier()                                # every rank is in: now one fails while the others wait in gloo
        if rank == 1 and args.how == "collective": os.kill(os.getpid(), signal.SIGKILL)
        if rank == 2 and args.how == "raise-in-collective": raise RuntimeError("boom on rank 2")
        if rank == 2 and args.how == "srun-user": raise FileNotFoundError("data.curated: 'x' not found")
        if rank == 1 and args.how == "srun-crash": raise RuntimeError("boom on rank 1")
        dist.all_reduce(torch.ones(4))
        return 0
    if args.how == "lagging":                         # every collective done; gloo's worker still busy as main returns
        exec(LAGGING, globals())                      # its group a global, as megatron-core keeps its groups
        return 0
    if rank == 2 and args.how == "crash": raise RuntimeError(f"boom on rank {rank}\\nsecond line")
    if rank == 1 and args.how == "kill": os.kill(os.getpid(), signal.SIGKILL)
    if rank == 0 and args.how == "user": raise FileNotFoundError("data.curated: 'x' not found")
    time.sleep(120)                                   # the others wait until torchrun stops them
LAGGING = """
import time, torch, torch.distributed as dist
from mtnlg.topology import end_distributed
dist.init_process_group("gloo")
# held by Python until the teardown, as megatron-core holds its groups
g = dist.new_group(list(range(dist.get_world_size())))
fut = dist.all_reduce(torch.ones(1 << 16), group=g, async_op=True).get_future()
fut.then(lambda f: time.sleep(1))                 # runs in gloo's worker thread, after the result is ready
fut.wait(); end_distributed(); print("done", flush=True)
"""
COMMANDS["work"] = (lambda p: (p.add_argument("how"), p.set_defaults(func=work)), "a rank that fails one way")
sys.exit(main(["work", sys.argv[1]]))
'''


def launcher(tmp_path, how: str, nproc: int = 3) -> subprocess.Popen:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    (tmp_path / "seen").mkdir(exist_ok=True)
    launch = (
        f"import sys; from mtnlg.topology import run_ranks; "
        f"sys.exit(run_ranks([{str(script)!r}, {how!r}, {str(tmp_path / 'seen')!r}], {nproc}, 'python'))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", launch], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def error_folders(tmp_path) -> set[str]:
    "The launcher's error folder, as its ranks saw it."
    return {p.read_text() for p in (tmp_path / "seen").glob("rank*")}


def assert_nothing_left(tmp_path, wait_s: float = 0):
    "No process started under the job's error folder is alive, and the folder is gone (within `wait_s`)."
    from mtnlg.topology import ranks_of

    folders = error_folders(tmp_path)
    assert len(folders) == 1 and folders != {""}, folders
    where = folders.pop()
    deadline = time.time() + wait_s
    while (ranks_of(where) or Path(where).exists()) and time.time() < deadline:
        time.sleep(0.1)
    assert ranks_of(where) == [] and not Path(where).exists(), (ranks_of(where), where)


def job(tmp_path, how: str, nproc: int = 3) -> subprocess.CompletedProcess:
    p = launcher(tmp_path, how, nproc)
    out, err = p.communicate(timeout=300)
    assert_nothing_left(tmp_path)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def last_line(r) -> str:
    return r.stderr.strip().splitlines()[-1]


def launcher_lines(r) -> list[str]:
    return [l for l in r.stderr.splitlines() if l.startswith("python: ")]


def test_a_crash_on_one_rank_names_the_rank_and_its_first_line(tmp_path):
    r = job(tmp_path, "crash")
    assert r.returncode == 1, r.stderr[-2000:]
    assert last_line(r) == "python: rank 2 failed: RuntimeError: boom on rank 2 (its traceback is above)", r.stderr[
        -2000:
    ]
    assert "Traceback" in r.stderr and "ChildFailedError" not in r.stderr  # the rank's traceback; not torchrun's report


@pytest.mark.slow  # make test: a rank killed inside a collective is named the same way (below)
def test_a_rank_ended_by_a_signal_is_named(tmp_path):
    r = job(tmp_path, "kill")
    assert (r.returncode, r.stderr) == (137, "python: rank 1 was ended by SIGKILL and left no error\n"), r.stderr[
        -2000:
    ]


@pytest.mark.slow  # make test: test_checkpoint's `mtnlg train --nproc 8` with missing data, one line and exit 2
def test_a_user_error_on_rank_0_is_one_line_exit_2(tmp_path):
    r = job(tmp_path, "user")
    assert (r.returncode, r.stderr) == (2, "python: data.curated: 'x' not found\n"), r.stderr[-2000:]


def test_a_rank_killed_inside_a_collective_is_named_not_its_peers(tmp_path):
    """Rank 1 is SIGKILLed (as the OOM killer does) while ranks 0 and 2 wait for it in a gloo all-reduce: a peer that
    sees the connection drop fails with "Connection closed by peer" and leaves that error; rank 1 left none. Rank 1 is
    named, and the peers that failed after it are summarised. How many of them fail before torchrun stops them (SIGTERM,
    within milliseconds of rank 1's death) is a race: on a busy machine one or both are stopped first, and a rank the
    launcher stopped is not a rank that failed. So: each summarised peer is 0 or 2, with gloo's words, and the count
    matches the ranks named (chapter 10 checks the count itself on fixed exit codes and times: two failed, one
    stopped)."""
    r = job(tmp_path, "collective")
    lines = launcher_lines(r)
    assert r.returncode == 137 and lines[0] == "python: rank 1 was ended by SIGKILL and left no error", r.stderr[-3000:]
    assert len(lines) in (1, 2), lines
    if len(lines) == 2:  # grouped by gloo's words for what they saw ("Connection closed by peer", "... reset by peer")
        ranks = named_ranks(lines[1])
        n = len(ranks)
        assert ranks in ([0], [2], [0, 2]) and "Connection" in lines[1], lines
        assert lines[1].startswith(f"python: {n} other rank{'s' * (n > 1)} failed after it: "), lines


def named_ranks(summary: str) -> list[int]:
    return sorted(int(r) for group in re.findall(r"(?:^|; |: )ranks? ([\d, ]+): ", summary) for r in group.split(", "))


def test_a_rank_that_raises_while_the_others_wait_is_named(tmp_path):
    r = job(tmp_path, "raise-in-collective")
    lines = launcher_lines(r)
    assert (
        r.returncode == 1 and lines[0] == "python: rank 2 failed: RuntimeError: boom on rank 2 (its traceback is above)"
    ), r.stderr[-3000:]
    assert len(lines) == 1 or (len(lines) == 2 and set(named_ranks(lines[1])) <= {0, 1}), (
        lines
    )  # its peers, if they failed first


@pytest.mark.parametrize(
    "sig,code",
    [
        (signal.SIGINT, 130),
        pytest.param(signal.SIGTERM, 143, marks=pytest.mark.slow),  # as SIGINT
        pytest.param(signal.SIGKILL, -9, marks=pytest.mark.slow),  # make test: SIGINT, and kill -9 of a rank above
    ],
    ids=["SIGINT", "SIGTERM", "SIGKILL"],
)
def test_a_signal_to_the_launcher_stops_every_rank_and_leaves_nothing(tmp_path, sig, code):
    p = launcher(tmp_path, "wait", nproc=2)
    deadline = time.time() + 120
    while len(error_folders(tmp_path)) == 0 or len(list((tmp_path / "seen").glob("rank*"))) < 2:
        assert time.time() < deadline and p.poll() is None, p.communicate()
        time.sleep(0.1)
    p.send_signal(sig)
    out, err = p.communicate(timeout=120)
    assert p.returncode == code, err[-2000:]
    if sig != signal.SIGKILL:
        assert err == f"python: stopped by {sig.name}; every rank ended\n", err[-2000:]
    assert_nothing_left(tmp_path, wait_s=10 if sig == signal.SIGKILL else 0)  # SIGKILL: the reaper ends them


def srun_job(tmp_path, how: str, n: int = 3) -> list[subprocess.CompletedProcess]:
    "n ranks started as srun starts them (SLURM_PROCID / SLURM_NTASKS, no torchrun, no `run_ranks`)."
    from mtnlg.topology import free_port

    script = tmp_path / "rank.py"
    script.write_text(RANK)
    (tmp_path / "seen").mkdir(exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MTNLG_RANK_ERRORS")}
    port = str(free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), how, str(tmp_path / "seen")],
            cwd=ROOT,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={
                **base,
                "SLURM_PROCID": str(i),
                "SLURM_NTASKS": str(n),
                "SLURM_LOCALID": str(i),
                "SLURM_JOB_NODELIST": "localhost",
                "MASTER_PORT": port,
                "OMP_NUM_THREADS": "1",
            },
        )
        for i in range(n)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    return [subprocess.CompletedProcess(p.args, p.returncode, *out) for p, out in zip(procs, outs)]


def test_under_srun_a_user_error_is_printed_once_by_the_rank_that_found_it(tmp_path):
    ranks = srun_job(tmp_path, "srun-user")
    assert [r.returncode for r in ranks] == [1, 1, 2], [
        r.stderr[-1000:] for r in ranks
    ]  # 0, 1: their all-reduce lost rank 2
    assert "".join(r.stderr for r in ranks) == "mtnlg: rank 2: data.curated: 'x' not found\n", [
        r.stderr[-1000:] for r in ranks
    ]


@pytest.mark.slow  # make test: the user error above takes the same path
def test_under_srun_a_crash_is_printed_once(tmp_path):
    ranks = srun_job(tmp_path, "srun-crash")
    err = "".join(r.stderr for r in ranks)
    assert [r.returncode for r in ranks] == [1, 1, 1] and err.count("Traceback") == 1, err[-3000:]
    assert (
        err.strip().splitlines()[-1]
        == "mtnlg: rank 1 failed first: RuntimeError: boom on rank 1 (its traceback is above)"
    ), err[-3000:]
    assert ranks[1].stderr == err  # all of it from rank 1


ABORTS = """
import os, sys
rank = os.environ["RANK"]
print(f"rank {rank}: my own last words", file=sys.stderr)
if rank == "1": os.abort()
"""


@pytest.mark.slow  # make test: a crash on one rank names the rank and its first line (above)
def test_a_failed_script_shows_the_failing_ranks_own_lines(tmp_path):
    from mtnlg.testing import torchrun_script

    script = tmp_path / "aborts.py"
    script.write_text(ABORTS)
    with pytest.raises(AssertionError) as e:
        torchrun_script(script, 2, cwd=ROOT, timeout=120)
    msg = str(e.value)
    assert "--- rank 1 exit code -6 (SIGABRT); its last lines:\nrank 1: my own last words" in msg, msg
    assert "rank 0: my own last words" not in msg, msg  # rank 0 succeeded: not in the way
    ok = torchrun_script(
        tmp_path / "aborts.py", 1, cwd=ROOT, timeout=120
    )  # one rank, no abort: its output, rank by rank
    assert ok.returncode == 0 and ok.stderr.startswith("rank 0: my own last words\n"), ok.stderr


def plain_teardown_while_gloo_is_busy(tmp_path) -> subprocess.CompletedProcess:
    "The same 2-rank job as a plain torchrun script: each rank ends through the interpreter's teardown."
    from mtnlg.topology import free_port

    plain = tmp_path / "plain.py"
    plain.write_text(RANK.split('LAGGING = """')[1].split('"""')[0])
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        str(free_port()),
    ]
    return subprocess.run([*torchrun, str(plain)], cwd=ROOT, capture_output=True, text=True, timeout=120)


@pytest.mark.slow  # the hazard itself; make test: the job through `mtnlg.cli.main` (below) succeeds
def test_a_plain_teardown_while_gloo_is_still_busy_crashes_after_the_work(tmp_path):
    """In this torch a plain script's teardown usually crashes its ranks after they printed "done" (SIGABRT or SIGSEGV,
    from gloo's worker thread). Whether it does is a race with that thread: on a loaded machine the callback can finish
    first and the job ends 0. What is always true: the work is done, and a failure is such a crash, after it."""
    r = plain_teardown_while_gloo_is_busy(tmp_path)
    assert r.stdout.count("done") == 2, (r.returncode, r.stderr[-2000:])
    if r.returncode != 0:  # (should a later torch end its workers safely, this never happens, and `leave_job` can go)
        assert re.search(r"exitcode\s*:\s*-(6|11) ", r.stderr), r.stderr[-2000:]


def test_a_rank_ends_cleanly_while_gloo_is_still_busy(tmp_path):
    """Every collective completed, but gloo's worker thread is still in the last one (a callback holds it for a second,
    as a loaded machine can): ranks going through `mtnlg.cli.main` leave by `leave_job`, not the teardown that can crash
    them (the test above), and the job succeeds."""
    ok = job(tmp_path, "lagging", nproc=2)
    assert ok.returncode == 0 and ok.stdout.count("done") == 2, (ok.returncode, ok.stderr[-2000:])
