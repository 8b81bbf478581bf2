"""`mtnlg curate --plan` (chapter 39): the curation of the paper's two Common Crawl snapshots, planned from a
benchmark's rates."""

import json
import subprocess
import time
import sys
from pathlib import Path
import pytest
from mtnlg.curate import newest_rates_file
from mtnlg.curate_config import load_curate_config
from mtnlg.curate_plan import (
    CC_SNAPSHOTS,
    RATES_FIXTURE,
    WARC_FILE_BYTES,
    Snapshot,
    curation_plan,
    dedup_bytes_per_doc,
    fit_rate,
    load_dedup_rates,
    load_plan_rates,
    wall_parts,
)
from mtnlg.curate_plan_report import format_curation_plan
from mtnlg.cli import main

ROOT = Path(__file__).resolve().parent.parent
MTNLG = str(Path(sys.executable).parent / "mtnlg")


def test_plan_arithmetic_on_the_fixture_rates_by_hand():
    """1,000 GB of .warc.gz holding 40M pages, on nodes of 4 cores and 6 GB (the fixture: 2,000 CPU-s/GB, 2 GB a worker,
    5 GB read and written a GB; partitioned dedup: 1e-4 s a document for an LSH band, 1e-5 for verification and for
    the components' rounds, both in partitions, 1 driver s a shard; 100 s + 0.01 s a shard a quality model)."""
    rates = load_plan_rates(RATES_FIXTURE)
    assert rates["fixture"] and rates["source"].endswith("curate-rates.json")
    plan = curation_plan(
        rates,
        [Snapshot("x", "CC-MAIN-x", 40_000_000, 1e12, "by hand")],
        nodes=(1, 2),
        cores_per_node=4,
        node_memory_bytes=6e9,
    )
    assert plan["workers_per_node"] == 3  # 6 GB / 2 GB a worker, fewer than the 4 cores
    assert plan["worker_memory_bytes"] == 2e9 and plan["band_splits"] == 1  # the defaults' one key split
    c = plan["snapshots"][0]
    shards = 1e12 / WARC_FILE_BYTES  # 972.4 WARC files
    assert c["warc_gb"] == 1000 and c["shards"] == pytest.approx(shards)
    assert c["core_hours"]["extract"] == pytest.approx(1000 * 1000 / 3600)  # 277.8
    assert c["parallel_core_hours"] == pytest.approx(2000 * 1000 / 3600)  # 555.6
    few = {t["task"].split(" (")[0]: t for t in c["few_worker"]}
    P = -(-972 // 16)  # 61 edge partitions, one per 16 shards; as many component partitions (at most 64)
    assert {k: t["tasks"] for k, t in few.items()} == {
        "driver between maps": 1,
        "dedup: LSH band": 16,
        "dedup: verify pairs": P,
        "dedup: components, a step": P,
        "quality: train models": 5,
        "blend: GPT-sample check": 1,
    }
    assert {k: t["hours"] * 3600 for k, t in few.items()} == pytest.approx(
        {
            "driver between maps": 20 + shards * 1.0,  # its fixed steps and 1 s a shard (the fixture: all between)
            "dedup: LSH band": 20e6 * 1e-4,
            "dedup: verify pairs": 20e6 * 1e-5 / P,
            "dedup: components, a step": 20e6 * 1e-5 / P,
            "quality: train models": 100 + shards * 0.01,
            "blend: GPT-sample check": 10,
        }
    )
    assert few["dedup: LSH band"]["bytes"] == 20e6 * 50 and few["dedup: components, a step"]["bytes"] == 20e6 * 12 / P
    assert c["io_bytes"] == pytest.approx(1000 * 5e9)
    waves = lambda w: -(-shards // w) / (shards / w)  # the last wave of shards
    serial = lambda w: (
        (20 + shards + -(-16 // w) * 2000 + 2 * -(-P // w) * 200 / P + -(-5 // w) * (100 + shards * 0.01) + 10) / 3600
    )
    assert c["wall_hours"][1] == pytest.approx(555.5556 / 3 * waves(3) + serial(3), rel=1e-5)  # 16 bands: 6 waves
    assert c["wall_hours"][2] == pytest.approx(555.5556 / 6 * waves(6) + serial(6), rel=1e-5)
    assert c["io_hours"] == pytest.approx({1: 5000 / 3600, 2: 2500 / 3600})  # 1 GB/s a node: compute-bound here
    ten = curation_plan(rates, [Snapshot("z", "", 40_000_000, 1e12, "by hand", 10)], (4,), 64, 512e9)["snapshots"][0]
    assert wall_parts(ten, 256, 4)["compute"] == pytest.approx(555.5556 / 10, rel=1e-6)  # 10 shards: 10 workers busy
    assert c["kept_docs"] == 20_000_000  # 0.5 a page
    assert c["dedup_index_bytes"] == 20_000_000 * 1000  # the single-process plan: 1,000 bytes a document


def test_a_negative_fitted_rate_is_refused_with_its_sizes(tmp_path):
    fixed, (rate,) = fit_rate([1, 2, 4], [12.0, 14.0, 18.0], "x")
    assert (fixed, rate) == pytest.approx((10.0, 2.0))  # 10 s + 2 s a GB
    with pytest.raises(
        ValueError,
        match=r"^extract: the fitted rate is negative \(-0\.5 a GB\) over the sizes "
        r"1 GB -> 10; 2 GB -> 9\.5; 4 GB -> 8\.5: measure again",
    ):
        fit_rate([1, 2, 4], [10.0, 9.5, 8.5], "extract")
    with pytest.raises(ValueError, match=r"a rate needs >= 3 different sizes, not 2"):
        fit_rate([1, 4, 4], [10.0, 12.0, 12.5], "extract")
    with pytest.raises(ValueError, match=r"a document\) over the sizes 100000 documents x 25 shards -> 1\.826"):
        fit_rate([(1e5, 25), (4e5, 25), (4e5, 100)], [1.826, 1.219, 1.499], "band keys", ("document", "shard"))
    stage = lambda s, b: {"seconds": 9.0, "all_seconds": [s, 9.0, 9.0], "peak_traced_bytes": b}  # the fastest counts
    size = lambda docs, shards: {
        "documents": docs,
        "shards": shards,
        **{k: stage(1 + docs * 1e-5 + shards * 1e-2, docs * 40) for k in ("band_keys", "band", "verify", "components")},
    }
    scale = {
        "sizes": {"1x": size(1e5, 25), "2x-docs": size(2e5, 25), "4x-docs": size(4e5, 25), "4x": size(4e5, 100)},
        "curation_driver": {k: {"shards": n, "driver_cpu_seconds": 2 + n * 3e-3} for k, n in (("a", 300), ("b", 600))},
    }
    scale["curation_driver"]["c"] = {"shards": 1200, "driver_cpu_seconds": 2 + 1200 * 3e-3}
    (tmp_path / "scale.json").write_text(json.dumps(scale))
    d = load_dedup_rates(tmp_path / "scale.json")
    assert (d["band_seconds_per_doc"], d["band_seconds_per_shard"], d["band_bytes_per_doc"]) == pytest.approx(
        (1e-5, 1e-2, 40)
    )
    assert d["driver_cpu_seconds_per_shard"] == pytest.approx(3e-3) and d["sizes"] == 4
    scale["sizes"]["4x"]["verify"]["all_seconds"][0] = 2.0  # 4x the shards, faster than 1x: a rate below zero
    (tmp_path / "scale.json").write_text(json.dumps(scale))
    with pytest.raises(
        ValueError,
        match=r"scale.json: dedup verify seconds: the fitted rate is negative \(-0\.0\d+ a "
        r"shard\) over the sizes 100000 documents x 25 shards -> 2\.25; .*400000 documents x 100 shards -> 2:",
    ):
        load_dedup_rates(tmp_path / "scale.json")
    data = json.loads(RATES_FIXTURE.read_text())
    data["plan_rates"]["fitted_from_gb"] = [0.25, 1.0]  # bench/curate.py's two sizes: not enough
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"fitted over 2 sizes; the plan takes rates fitted over >= 3"):
        load_plan_rates(tmp_path / "r.json")


def _few(plan, name):
    return next(t for t in plan["snapshots"][0]["few_worker"] if t["task"].startswith(name))


def test_the_io_term_bounds_the_per_shard_maps_when_the_file_system_is_slower():
    rates, snap = load_plan_rates(RATES_FIXTURE), [Snapshot("x", "CC-MAIN-x", 40_000_000, 1e12, "by hand")]
    fast = curation_plan(rates, snap, (1, 2), 4, 6e9, fs_gbps_per_node=10.0)["snapshots"][0]
    slow_plan = curation_plan(rates, snap, (1, 2), 4, 6e9, fs_gbps_per_node=0.001)
    slow = slow_plan["snapshots"][0]
    assert slow["io_hours"][2] == pytest.approx(5e12 / (2 * 1e6) / 3600)  # 5 TB at 2 x 1 MB/s: 694 h
    serial = fast["wall_hours"][2] - wall_parts(fast, 6, 2, 10.0)["compute"]
    assert slow["wall_hours"][2] == pytest.approx(slow["io_hours"][2] + serial)  # I/O-bound, not compute-bound
    assert wall_parts(slow, 6, 2, None)["io"] == 0  # None: no file system bound
    lines = format_curation_plan(slow_plan).splitlines()
    io = next(l for l in lines if l.startswith("I/O:"))
    assert "5.0 TB read and written" in io and "at 0.001 GB/s a node (an assumption: --fs-gbps-per-node)" in io, io


def test_the_driver_beside_the_maps_counts_where_it_is_longer():
    """The driver's CPU seconds while a stage's maps run overlap the workers: a stage takes the longer of its maps'
    work over the workers and the driver's part; what it does between maps is added, as a map of one task."""
    base = load_plan_rates(RATES_FIXTURE)
    d = {**base["partitioned_dedup"], "driver_serial_cpu_seconds_per_shard": 0.25}
    d["driver_map_cpu_seconds_per_shard"] = {"extract": 0.5, "blend": 2.0}
    rates, snap = {**base, "partitioned_dedup": d}, Snapshot("x", "CC-MAIN-x", 40_000_000, 1e12, "by hand")
    cost = curation_plan(rates, [snap], (1,), 4, 6e9)["snapshots"][0]
    shards = cost["shards"]
    assert cost["driver_map_hours"] == pytest.approx({"extract": shards * 0.5 / 3600, "blend": shards * 2.0 / 3600})
    few = {t["task"]: t for t in cost["few_worker"]}
    assert few["driver between maps (one process)"]["hours"] == pytest.approx((20 + shards * 0.25) / 3600)
    for w in (3, 3000):  # extract: 1,000 CPU-s/GB x 1,000 GB over w workers, in waves; no blend work: the driver's
        waves = -(-shards // w)
        stage = {s: h / shards * waves for s, h in cost["core_hours"].items()}
        want = sum(stage.values()) - stage["extract"] + max(stage["extract"], shards * 0.5 / 3600)
        assert wall_parts(cost, w, 1, None)["compute"] == pytest.approx(want + shards * 2.0 / 3600)
    assert stage["extract"] > shards * 0.5 / 3600  # one wave of 1,000 s a shard: the driver's 486 s of it are hidden


def _driver_runs(k):
    return {
        f"{n}": {
            "shards": n,
            "driver_cpu_seconds": 3 + n * 4e-3,
            "driver_map_cpu_seconds": {"extract": 0.5 + n * 1e-3, "dedup": 0.2 + n * 2e-3},
        }
        for n in (300 * k, 600 * k, 1200 * k)
    }


def test_driver_rates_between_and_beside_the_maps(tmp_path):
    from mtnlg.curate_plan import _driver_rates

    r = _driver_rates(list(_driver_runs(1).values()), "x")
    assert r["driver_cpu_seconds_per_shard"] == pytest.approx(4e-3)
    assert r["driver_map_cpu_seconds_per_shard"] == pytest.approx({"extract": 1e-3, "dedup": 2e-3})
    assert r["driver_serial_cpu_seconds_per_shard"] == pytest.approx(1e-3)  # the rest: between maps
    old = [{"shards": n, "driver_cpu_seconds": 1 + n * 5e-3} for n in (300, 600, 1200)]  # no seconds by stage
    assert _driver_rates(old, "x") == pytest.approx(
        {"driver_cpu_seconds_per_shard": 5e-3, "driver_serial_cpu_seconds_per_shard": 5e-3}
    )


def test_band_splits_come_from_the_config_and_the_worker_memory_is_checked():
    rates, snap = load_plan_rates(RATES_FIXTURE), [Snapshot("x", "CC-MAIN-x", 40_000_000, 1e12, "by hand")]
    cfg = load_curate_config(ROOT / "scaled_configs/curate-cc.yaml")
    plan = curation_plan(rates, snap, (1,), 4, 6e9, cfg=cfg)  # 3 workers of 2 GB, less 2 GB of peak RSS: 0 free
    band = _few(plan, "dedup: LSH band")
    assert plan["band_splits"] == cfg.dedup.band_splits and band["tasks"] == 16 * cfg.dedup.band_splits
    text = format_curation_plan(plan)
    assert f"with dedup.band_splits = {cfg.dedup.band_splits} as configured: a worker has 2.0 GB" in text
    assert "DOES NOT FIT a worker: fewer workers a node (slurm.cores)" in text  # no room beside its 2 GB peak
    cfg4 = load_curate_config(ROOT / "scaled_configs/curate-cc.yaml", {"dedup.band_splits": 4})
    plan4 = curation_plan(rates, snap, (1,), 64, 512e9, cfg=cfg4)  # 64 workers of 8 GB: 6 GB free each
    band4 = _few(plan4, "dedup: LSH band")
    assert band4["tasks"] == 64 and band4["bytes"] == pytest.approx(20e6 * 50 / 4)  # a quarter of a band's keys
    assert band4["hours"] == pytest.approx(20e6 * 1e-4 / 4 / 3600)
    assert "0.2 GB an LSH band task" in format_curation_plan(plan4) and ": fits" in format_curation_plan(plan4)
    big = [Snapshot("y", "CC-MAIN-y", 40_000_000_000, 1e15, "by hand")]  # 20B kept: 1 TB a band
    text = format_curation_plan(curation_plan(rates, big, (1,), 64, 512e9, cfg=cfg4))
    assert "250.0 GB an LSH band task" in text and "DOES NOT FIT a worker: set dedup.band_splits >= 167" in text


def test_the_snapshots_sizes_and_where_they_come_from():
    s2020, s2021 = CC_SNAPSHOTS
    assert (s2020.crawl, s2020.pages, s2021.crawl, s2021.pages) == (
        "CC-MAIN-2020-50",
        2_642_471_501,
        "CC-MAIN-2021-04",
        3_401_286_407,
    )
    assert s2021.warc_bytes == pytest.approx(80_000 * 59.86 * 2**40 / 64_000)  # 82.27 TB: 80,000 files of 1.028 GB
    assert s2020.warc_bytes / 1e12 == pytest.approx(63.92, abs=0.01)  # CC-2021-04's 24.2 kB a page
    assert "80,000 WARC files" in s2021.warc_how and "24.2 kB" in s2020.warc_how


def test_without_a_measured_figure_the_dedup_index_is_the_signatures_floor():
    rates = {**load_plan_rates(RATES_FIXTURE), "dedup_index_bytes_per_doc": None}  # bench/curate.py may leave it null
    per_doc, how = dedup_bytes_per_doc(rates)
    assert per_doc == 512 and "floor" in how  # chapter 32: 128 x 4 bytes
    assert curation_plan(rates, CC_SNAPSHOTS[1:])["snapshots"][0]["dedup_index_bytes"] == pytest.approx(
        3_401_286_407 * 0.5 * 512
    )


def test_newest_rates_file_is_the_latest_date(tmp_path):
    assert newest_rates_file(tmp_path) is None
    (tmp_path / "bench/results").mkdir(parents=True)
    for name in ("curate-2026-11-26-cpu.json", "curate-2026-12-01-cpu.json", "dedup-2026-12-09-cpu.json"):
        (tmp_path / "bench/results" / name).write_text("{}")
    assert newest_rates_file(tmp_path).name == "curate-2026-12-01-cpu.json"


def test_mtnlg_curate_plan_prints_both_snapshots():
    r = subprocess.run(
        [MTNLG, "curate", "--plan", "--rates", "tests/fixtures/curate-rates.json", "--nodes", "1,8,64"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    for frag in (
        "CC-2020-50 CC-MAIN-2020-50",
        "CC-2021-04 CC-MAIN-2021-04",
        "NOT A MEASUREMENT",
        "68.7B",
        "82.6B",
        "sbatch --nodes=64 --ntasks-per-node=64 cluster/curate.sbatch scaled_configs/curate-cc.yaml",
    ):
        assert frag in r.stdout, (frag, r.stdout)
    wall = next(
        l for l in r.stdout.splitlines() if l.startswith("CC-2021-04") and len(l.split()) == 5
    )  # hours on 1, 8, 64 nodes, and the speed-up
    # 2,000 CPU-s/GB x 82,271 GB = 45,706 core-hours over 64 workers a node; then the maps of fewer tasks: the driver
    # (20 s + 80,000 WARC files x 1 s: 22.2 h), an LSH band task (1.70B x 1e-4 s / 32: 1.47 h; curate-cc.yaml's 32 key
    # splits, 512 tasks: 8 waves on one node), verification (4,096 partitions) and the components (64) of 1.70B x 1e-5 s
    # each, a quality model (100 s + 80,000 x 0.01 s), the GPT-sample check (10 s); the I/O (411 TB at 1 GB/s a node) is
    # shorter than the compute
    assert [float(x.replace(",", "")) for x in wall.split()[1:4]] == pytest.approx([748.60, 113.74, 35.46], abs=0.005)
    for frag in (
        "maps of fewer tasks than 64 nodes have workers (4,096), CC-2020-50",
        "  driver between maps (one process)",
        "  dedup: LSH band (16 bands x 32 key splits)      512 x",
        "  quality: train models                             5 x   0.2004 h",
        "I/O: 319.6 TB read and written by the per-shard maps (5.00 GB a GB of .warc.gz); at 1 GB/s a node",
        "dedup memory a node, with dedup.band_splits = 32 as configured: a worker has 8.0 GB",
    ):
        assert frag in r.stdout, (frag, r.stdout)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "not found"),
        ("not json", "not JSON"),
        (json.dumps({"benchmark": "curate"}), "no `plan_rates` object"),
        (
            json.dumps({"plan_rates": {"pages_per_gb": 40000, "kept_docs_per_page": 0.5}}),
            "needs positive numbers for peak_rss_per_worker_bytes, cpu_seconds_per_gb",
        ),
    ],
)
def test_a_missing_or_malformed_rates_file_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "rates.json"
    if content is not None:
        path.write_text(content)
    assert main(["curate", "--plan", "--rates", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err


def _spin(cpu_seconds: float) -> float:
    "Burn `cpu_seconds` of this process's CPU; return what it burned."
    t = time.process_time()
    while time.process_time() - t < cpu_seconds:
        pass
    return time.process_time() - t


def test_a_map_times_each_task_in_cpu_seconds_beside_wall_seconds():
    from mtnlg.curate_stages import _timed_call

    r, wall, cpu = _timed_call(time.sleep, 0.3)  # waiting: wall time, no CPU
    assert r is None and wall >= 0.3 and cpu < 0.05, (wall, cpu)
    burned, wall, cpu = _timed_call(_spin, 0.2)  # working: CPU seconds, however long a busy machine made it wait
    assert cpu == pytest.approx(burned, abs=0.02) and cpu >= 0.2 and wall >= 0.9 * cpu, (burned, wall, cpu)


def test_make_demos_plan_reads_the_committed_measured_rates(capsys):
    "`make demo`'s last line, `mtnlg curate --plan --nodes 1,64` (no --rates): the newest measured rates."
    path = newest_rates_file(bench="curate_validate")
    assert path is not None and path.parent == ROOT / "bench/results", path
    rates = load_plan_rates(path)
    assert not rates["fixture"] and len(rates["fitted_from_gb"]) >= 3
    assert main(["curate", "--plan", "--nodes", "1,64"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"rates: bench/results/{path.name}, fitted over ") and "NOT A MEASUREMENT" not in out
    assert "CC-2020-50 CC-MAIN-2020-50" in out and "  quality: train models " in out and "I/O: " in out
