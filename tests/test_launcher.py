"""One error, one exit code, from N processes (chapter 10's `run_ranks`, chapter 99's `main`): real torchrun jobs whose
ranks go through `mtnlg.cli.main`; one rank crashes, or a signal ends one. The job prints one line naming the rank and
the first line of its error, and exits with that rank's code. (The user-error cases — a missing dataset, a corrupt shard
of a TP 2 x PP 2 x DP 2 checkpoint, with `mtnlg train --nproc 8` — are in test_checkpoint.py.)"""
import subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RANK = '''
import os, signal, sys, time
from mtnlg.cli import COMMANDS, main
rank = int(os.environ["RANK"])
def work(args):
    if rank == 2 and args.how == "crash": raise RuntimeError(f"boom on rank {rank}\\nsecond line")
    if rank == 1 and args.how == "kill": os.kill(os.getpid(), signal.SIGKILL)
    if rank == 0 and args.how == "user": raise FileNotFoundError("data.curated: 'x' not found")
    time.sleep(120)                                   # the others wait until torchrun stops them
COMMANDS["work"] = (lambda p: (p.add_argument("how"), p.set_defaults(func=work)), "a rank that fails one way")
sys.exit(main(["work", sys.argv[1]]))
'''

def job(tmp_path, how: str) -> subprocess.CompletedProcess:
    script = tmp_path / "rank.py"; script.write_text(RANK)
    launch = f"import sys; from mtnlg.topology import run_ranks; sys.exit(run_ranks([{str(script)!r}, {how!r}], 3, 'python'))"
    return subprocess.run([sys.executable, "-c", launch], cwd=ROOT, capture_output=True, text=True, timeout=300)

def last_line(r) -> str: return r.stderr.strip().splitlines()[-1]

def test_a_crash_on_one_rank_names_the_rank_and_its_first_line(tmp_path):
    r = job(tmp_path, "crash")
    assert r.returncode == 1, r.stderr[-2000:]
    assert last_line(r) == "python: rank 2 failed: RuntimeError: boom on rank 2 (its traceback is above)", r.stderr[-2000:]
    assert "Traceback" in r.stderr and "ChildFailedError" not in r.stderr      # the rank's traceback; not torchrun's report

def test_a_rank_ended_by_a_signal_is_named(tmp_path):
    r = job(tmp_path, "kill")
    assert (r.returncode, r.stderr) == (137, "python: rank 1 was ended by SIGKILL and left no error\n"), r.stderr[-2000:]

def test_a_user_error_on_rank_0_is_one_line_exit_2(tmp_path):
    r = job(tmp_path, "user")
    assert (r.returncode, r.stderr) == (2, "python: data.curated: 'x' not found\n"), r.stderr[-2000:]
