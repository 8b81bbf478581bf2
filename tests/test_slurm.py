"""Every cluster script, for real (issue 11): `bash -n` and shellcheck on cluster/; the 530B dry runs' plans (training,
and evaluation: cluster/eval.sbatch, chapter 66); then a
two-node Slurm on this machine, this test run's own (cluster/local/up in a directory of the run's, on free ports, with
its own munged; torn down after; another run is refused it -- issue 46): `sbatch --wait cluster/scaled.sbatch` on TP 2
x PP 2 (2 nodes x 2 tasks, gloo; `make test-full`: TP 2 x PP 2 x DP 2 on 2 nodes x 4 tasks) trains bit for bit like
`mtnlg train --nproc 4` (torchrun); a job sent USR1 checkpoints, is requeued by Slurm under the same job id, resumes
and ends bit for bit like the uninterrupted job; cluster/curate.sbatch (Dask inside the allocation) writes what the
local process pool writes."""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
import pytest
from curate_digests import digests
from test_checkpoint import THREE_D, CURATED, run as run_train, losses, latest, assert_identical

ROOT = Path(__file__).resolve().parent.parent
MTNLG = str(Path(sys.executable).parent / "mtnlg")
SCRIPTS = sorted(ROOT.glob("cluster/*.sbatch")) + sorted((ROOT / "cluster/local").iterdir())
CONFIG = "scaled_configs/tiny.yaml"
# chapter 43's bitwise-resume settings on curated data (no tokenizer training per run); a checkpoint every 2 steps, so
# the preemption test signals at step 2 with 6 steps to spare
SETS = {
    **THREE_D,
    "checkpoint.save_interval": 2,
    "data.curated": CURATED,
    "data.train_files": "[]",
    "data.valid_files": "[]",
}
ARGS = [a for k, v in SETS.items() for a in ("--set", f"{k}={v}")]
NODES = 2  # simulated nodes: slurmctld on a port, node i on that port + i


def free_ports(n: int) -> int:
    """The first of n consecutive TCP ports nobody listens on, at random below the kernel's ephemeral range (as
    mtnlg.topology.free_port): slurmctld's, then one per simulated node. cluster/local/up refuses ports in use."""
    import random
    import socket
    from mtnlg.topology import _ephemeral_low

    rng = random.SystemRandom()
    for _ in range(200):
        first = rng.randrange(20000, _ephemeral_low() - n)
        try:
            for p in range(first, first + n):
                with socket.socket() as s:
                    s.bind(("", p))  # what slurmctld and slurmd bind: every address
            return first
        except OSError:
            continue
    raise OSError(f"no {n} consecutive free TCP ports")


def cannot_run_slurm() -> str | None:
    if os.geteuid() != 0:
        return "Slurm's daemons need root (cluster/local/up)"
    if not (shutil.which("sbatch") and shutil.which("slurmctld")) and not shutil.which("apt-get"):
        return "Slurm is not installed and there is no apt-get to install it"
    return None


def test_scripts_pass_bash_n_and_shellcheck():
    for s in SCRIPTS:
        r = subprocess.run(["bash", "-n", str(s)], capture_output=True, text=True)
        assert r.returncode == 0, f"{s}: {r.stderr}"
    if not shutil.which("shellcheck") and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "shellcheck"], capture_output=True)
    if not shutil.which("shellcheck"):
        pytest.skip("no shellcheck (apt-get install shellcheck)")
    r = subprocess.run(["shellcheck", *map(str, SCRIPTS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    assert len(SCRIPTS) == 7  # 530b, curate, eval, scaled, local/up, local/down, local/owner.sh


def dry_run(script="cluster/530b.sbatch", **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ROOT / script)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MTNLG_DRY_RUN": "1", "MTNLG_BIN": MTNLG, **env},
    )


def test_530b_dry_run_prints_the_job():
    r = dry_run()
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "280 nodes x 8 ranks = 2240 ranks; TP 8 x PP 35 x DP 8" in out
    assert "tensor-parallel groups: 280 of 8 ranks, 280 of them inside one node" in out
    assert "TP group 1: ranks 8-15 on node1" in out
    assert "stage 0: layers 1-3 + embedding; ranks 0-63 on node[0-7]" in out
    assert "stage 34: layers 103-105 + final norm, tied output head; ranks 2176-2239 on node[272-279]" in out
    assert 55 < float(re.search(r"expected: ([\d.]+) s per iteration", out).group(1)) < 65  # the paper: 60.1 s
    r = dry_run(MTNLG_NODES="420")  # the paper's 420-node run: DP 12, 44.4 s in its Table
    assert "3360 ranks; TP 8 x PP 35 x DP 12" in r.stdout, r.stderr
    assert 40 < float(re.search(r"expected: ([\d.]+) s per iteration", r.stdout).group(1)) < 48
    r = dry_run(MTNLG_NODES="300")
    assert r.returncode == 2 and "needs a multiple of 35" in r.stderr


def test_eval_dry_run_prints_the_plan():
    """cluster/eval.sbatch's dry run (chapter 66): the command it would run, where the ranks go, memory per rank,
    tokens, hours."""
    r = dry_run("cluster/eval.sbatch")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "dry run: sbatch --nodes=3 --ntasks-per-node=8 cluster/eval.sbatch; DP 1" in out
    assert (
        "would run: srun --distribution=block:block " in out
        and " eval --checkpoint ./runs/mtnlg-530b/checkpoints "
        "--set parallel.tensor_parallel=8 --set parallel.pipeline_parallel=3"
        in out
    )
    assert "3 nodes x 8 ranks = 24 ranks; TP 8 x PP 3 x DP 1" in out
    assert "stage 2: layers 71-105 + final norm, tied output head; ranks 16-23 on node2" in out
    assert "per iteration" not in out  # no training step in an evaluation's plan
    gib = float(re.search(r"fullest rank \(stage \d\): ([\d.]+) GiB", out).group(1))
    assert 50 < gib < 80  # fits an 80 GB A100
    assert "the paper's 27 settings of 9 tasks" in out
    hours = float(re.search(r"3 nodes: DP +1: ([\d.]+) h of evaluation", out).group(1))
    assert 5 < hours < 14
    r = dry_run("cluster/eval.sbatch", MTNLG_NODES="15")  # 5 replicas split the requests: a fifth of the time
    assert "15 nodes x 8 ranks = 120 ranks; TP 8 x PP 3 x DP 5" in r.stdout, r.stderr
    assert 0.18 < float(re.search(r"15 nodes: DP +5: ([\d.]+) h of evaluation", r.stdout).group(1)) / hours < 0.22
    r = dry_run("cluster/eval.sbatch", MTNLG_NODES="4")
    assert r.returncode == 2 and "need a multiple of 24 ranks" in r.stderr
    r = dry_run("cluster/eval.sbatch", MTNLG_EVAL_PP="2")
    assert r.returncode == 2 and "PP 2 does not split 105 layers evenly" in r.stderr


# ---------------------------------------------------------------- the local cluster
@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The local cluster up for this module (installed first if missing), down afterwards whatever happened. A cluster
    of this test run's own -- its directory under the run's temporary directory, free ports, its own munged -- so that
    two runs at once (two clones, a developer's beside CI's) never share one, nor stop each other's (issue 46)."""
    if reason := cannot_run_slurm():
        print(f"skipping the Slurm tests: {reason}")
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("slurm")
    env = {
        **os.environ,
        "MTNLG_SLURM_DIR": str(d),
        "MTNLG_SLURM_PORT": str(free_ports(NODES + 1)),
        "MTNLG_SLURM_NODES": str(NODES),
    }
    for k in ("MTNLG_SLURM_OWNER", "MTNLG_SLURM_ADOPT"):
        env.pop(k, None)  # the owner: this process (up's parent)
    try:
        r = subprocess.run([str(ROOT / "cluster/local/up")], env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr
        r2 = subprocess.run([str(ROOT / "cluster/local/up")], env=env, capture_output=True, text=True, timeout=120)
        assert r2.returncode == 0 and "already up" in r2.stdout, r2.stdout + r2.stderr  # idempotent
        runs = tmp_path_factory.mktemp("runs")
        yield {
            **env,
            "SLURM_CONF": f"{d}/slurm.conf",
            "MTNLG_BIN": MTNLG,
            "MTNLG_RUNS": str(runs),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
    finally:
        down = subprocess.run([str(ROOT / "cluster/local/down")], env=env, capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stderr
        again = subprocess.run([str(ROOT / "cluster/local/down")], env=env, capture_output=True, text=True, timeout=60)
        assert "nothing to stop" in again.stdout


def test_another_run_cannot_adopt_or_stop_the_cluster(slurm):
    "Another run (another owner) pointed at this cluster's directory is refused by `up` and `down`, unless it adopts."
    other = {**slurm, "MTNLG_SLURM_OWNER": "another test run"}
    for script in ("up", "down"):
        r = subprocess.run(
            [str(ROOT / f"cluster/local/{script}")], env=other, capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 1 and "was started by another run, which is still running" in r.stderr, (
            r.stdout + r.stderr
        )
        assert "MTNLG_SLURM_ADOPT=1 or --adopt" in r.stderr
    r = subprocess.run(
        [str(ROOT / "cluster/local/up"), "--adopt"], env=other, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and "adopting the cluster" in r.stdout and "already up" in r.stdout, r.stdout + r.stderr
    owner = (Path(slurm["MTNLG_SLURM_DIR"]) / "owner").read_text()
    assert owner.startswith(f"pid:{os.getpid()}:"), owner  # adopting does not take it over
    # every daemon is this cluster's own: its munged too (AuthInfo=socket=...), none shared with another cluster
    pids = dict(l.split()[::-1] for l in (Path(slurm["MTNLG_SLURM_DIR"]) / "started.pids").read_text().split("\n") if l)
    assert sorted(pids.values()) == ["munged", "slurmctld", "slurmd", "slurmd"]
    for pid in pids:
        assert slurm["MTNLG_SLURM_DIR"] + "/" in Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    assert f"AuthInfo=socket={slurm['MTNLG_SLURM_DIR']}/munge/socket" in Path(slurm["SLURM_CONF"]).read_text()


def sbatch(env, *args, name="run", wait=True) -> tuple[int, str]:
    "Submit from the repository root; (exit code, job id)."
    r = subprocess.run(
        ["sbatch", "--parsable", *(["--wait"] if wait else []), f"--output={env['MTNLG_RUNS']}/%j.out", *args],
        cwd=ROOT,
        env={**env, "MTNLG_RUN_NAME": name},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return r.returncode, r.stdout.strip().split(";")[0]


def job(env, job_id, tries: int = 60) -> dict:
    "`scontrol show job` as a dict; retried, since a busy slurmctld can time out (an empty answer is not a job state)."
    for _ in range(tries):
        r = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True)
        if r.returncode == 0 and "JobState=" in r.stdout:
            return dict(re.findall(r"(\w+)=(\S+)", r.stdout))
        time.sleep(1)
    raise RuntimeError(f"scontrol show job {job_id} failed {tries} times: {r.stderr.strip()}")


def wait_until(cond, what, timeout=300):
    t0 = time.time()
    while not cond():
        if time.time() - t0 > timeout:
            raise TimeoutError(what)
        time.sleep(0.2)


@pytest.fixture(scope="module")
def straight(slurm, tmp_path_factory):
    "The uninterrupted Slurm job: 2 nodes x 4 tasks."
    rc, job_id = sbatch(
        slurm, "--nodes=2", "--ntasks-per-node=4", "cluster/scaled.sbatch", CONFIG, *ARGS, name="straight"
    )
    run_dir = Path(slurm["MTNLG_RUNS"]) / "straight"
    assert rc == 0, (run_dir / f"logs/slurm-{job_id}.out").read_text()[-3000:]
    return run_dir, job_id


def assert_sbatch_equals_torchrun(run_dir: Path, job_id: str, sets: dict, per_node: int, tmp_path: Path):
    log = (run_dir / f"logs/slurm-{job_id}.out").read_text()
    assert f"=== job {job_id} allocation 0" in log and f"2 nodes x {per_node} ranks on n[1-2]" in log
    run_train(tmp_path, sets, "--nproc", str(NODES * per_node))  # the same layout under torchrun, on this machine
    assert len(losses(tmp_path)) == 8
    assert_identical(tmp_path, run_dir)  # every step's loss, and the last checkpoint, bit for bit


# `make test`: TP 2 x PP 2 on 2 nodes x 2 tasks -- each node one tensor-parallel pair, the pipeline across the nodes
TP2_PP2 = {**SETS, "parallel.data_parallel": 1}


@pytest.mark.slow  # ~2 min of a real Slurm job; make test: the scripts' checks, dry runs and the cluster's ownership
def test_sbatch_tp2_pp2_equals_torchrun(slurm, tmp_path):
    args = [a for k, v in TP2_PP2.items() for a in ("--set", f"{k}={v}")]
    rc, job_id = sbatch(
        slurm, "--nodes=2", "--ntasks-per-node=2", "cluster/scaled.sbatch", CONFIG, *args, name="tp2pp2"
    )
    run_dir = Path(slurm["MTNLG_RUNS"]) / "tp2pp2"
    assert rc == 0, (run_dir / f"logs/slurm-{job_id}.out").read_text()[-3000:]
    assert_sbatch_equals_torchrun(run_dir, job_id, TP2_PP2, 2, tmp_path)


@pytest.mark.slow  # make test: TP 2 x PP 2 on 2 nodes x 2 tasks (above); here all three axes, 8 ranks a run
def test_sbatch_3d_equals_torchrun(slurm, straight, tmp_path):
    assert_sbatch_equals_torchrun(*straight, SETS, 4, tmp_path)


@pytest.mark.slow  # ~2 minutes (Slurm's requeue); make test keeps the one-process SIGUSR1 stop (test_checkpoint.py)
def test_usr1_checkpoints_requeues_and_resumes_bitwise(slurm, straight):
    rc, job_id = sbatch(
        slurm, "--nodes=2", "--ntasks-per-node=4", "cluster/scaled.sbatch", CONFIG, *ARGS, name="preempted", wait=False
    )
    assert rc == 0
    run_dir = Path(slurm["MTNLG_RUNS"]) / "preempted"
    wait_until(
        lambda: latest(run_dir) is not None or job(slurm, job_id).get("JobState") not in ("PENDING", "RUNNING"),
        "first checkpoint",
    )
    assert latest(run_dir) == "step-0000002", job(slurm, job_id)
    # what Slurm sends the batch shell ten minutes before the time limit (--signal=B:USR1@600)
    subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], env=slurm, check=True)
    wait_until(
        lambda: job(slurm, job_id).get("Restarts") == "1" and job(slurm, job_id).get("JobState") == "PENDING", "requeue"
    )
    # Slurm holds a requeued job 120 s (BeginTime); release it now, once the old allocation's credential (revoked in
    # this second) is a second old
    time.sleep(1.5)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=slurm, check=True)
    state = {}

    def ended():
        state.update(job(slurm, job_id))
        return state.get("JobState") not in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", None)

    wait_until(ended, "the requeued job's end")
    log = (run_dir / f"logs/slurm-{job_id}.out").read_text()
    assert (state["JobState"], state["ExitCode"], state["Restarts"]) == ("COMPLETED", "0:0", "1"), log[-3000:]
    assert "batch shell: SIGUSR1, forwarding it to the training ranks" in log
    stopped = int(re.search(r"SIGUSR1: saved \S+step-(\d+) after step", log).group(1))  # the rank got USR1 itself
    assert 2 <= stopped < 8
    assert f"scontrol requeue {job_id}" in log and f"=== job {job_id} allocation 1" in log
    assert f"resumed from {run_dir}/checkpoints/step-{stopped:07d}" in log
    assert_identical(straight[0], run_dir)  # uninterrupted and preempted-requeued-resumed: bit for bit


@pytest.mark.slow  # make test: test_curation's dask run equals the local pool
def test_curate_sbatch_on_dask_equals_local_pool(slurm, tmp_path):
    from mtnlg.curate import curate
    from mtnlg.curate_config import load_curate_config

    cfg = "scaled_configs/curate-tiny.yaml"
    rc, job_id = sbatch(
        slurm,
        "--nodes=2",
        "--ntasks-per-node=2",
        "cluster/curate.sbatch",
        cfg,
        "--output-dir",
        str(tmp_path / "slurm"),
        "--fresh",
    )
    logs = Path(slurm["MTNLG_RUNS"]) / f"logs/curate-{job_id}"
    assert rc == 0, (logs / "slurm.out").read_text()[-3000:]
    assert "4 workers" in (logs / "slurm.out").read_text()
    workers = (logs / "dask-scheduler.log").read_text()
    assert len(set(re.findall(r"Register worker addr: (\S+)", workers))) == 4  # one per task, on both nodes
    curate(load_curate_config(ROOT / cfg), tmp_path / "local", "local", 2, progress=False)
    files = lambda d: sorted(p.relative_to(d) for p in d.rglob("*") if p.is_file())
    a, b = tmp_path / "local", tmp_path / "slurm"
    assert files(a) == files(b) and len(files(a)) > 50
    root = [(f"{ROOT}/", "")]  # the config as the sbatch script names it, relative to the repository
    assert digests(a, root) == digests(b, root)  # every file; manifests without timings; dedup by its decisions


@pytest.mark.slow
def test_curate_executor_slurm_submits_worker_jobs_and_equals_local_pool(slurm, tmp_path, monkeypatch):
    """`executor: slurm`, as a user on a login node runs it: dask-jobqueue's SLURMCluster submits the workers as Slurm
    jobs, the driver stays here, and the partitioned dedup's tasks run on those jobs; the same files as the local
    pool."""
    from dataclasses import replace
    from mtnlg.curate import curate
    from mtnlg.curate_config import load_curate_config

    for k in ("SLURM_CONF", "PYTHONPATH"):
        monkeypatch.setenv(k, slurm[k])
    monkeypatch.chdir(tmp_path)  # dask-jobqueue writes its job scripts' logs here
    cfg = load_curate_config(ROOT / "scaled_configs/curate-tiny.yaml")
    cfg.slurm = replace(cfg.slurm, cores=1, memory="2GB", walltime="00:20:00", skip_directives=["--mem"])
    curate(cfg, tmp_path / "slurm", "slurm", 2, progress=False)
    outs = sorted(tmp_path.glob("slurm-*.out"))  # sbatch's default output, in the submitting directory
    assert len(outs) >= 2 and all("distributed.worker" in o.read_text() for o in outs[:2]), [
        o.read_text()[-500:] for o in outs
    ]
    curate(load_curate_config(ROOT / "scaled_configs/curate-tiny.yaml"), tmp_path / "local", "local", 2, progress=False)
    files = lambda d: sorted(p.relative_to(d) for p in d.rglob("*") if p.is_file())
    a, b = tmp_path / "local", tmp_path / "slurm"
    assert files(a) == files(b) and len(files(a)) > 50
    assert digests(a) == digests(b)  # every file; manifests without their timings, the dedup plan by its decisions
