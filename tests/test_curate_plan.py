"""`mtnlg curate --plan` (chapter 36): the curation of the paper's two Common Crawl snapshots, planned from a
benchmark's rates."""

import json
import subprocess
import sys
from pathlib import Path
import pytest
from mtnlg.curate import (
    CC_SNAPSHOTS,
    RATES_FIXTURE,
    WARC_FILE_BYTES,
    Snapshot,
    curation_plan,
    dedup_bytes_per_doc,
    load_plan_rates,
    newest_rates_file,
)
from mtnlg.cli import main

ROOT = Path(__file__).resolve().parent.parent
MTNLG = str(Path(sys.executable).parent / "mtnlg")


def test_plan_arithmetic_on_the_fixture_rates_by_hand():
    """1,000 GB of .warc.gz holding 40M pages, on nodes of 4 cores and 6 GB (the fixture: 2,000 CPU-s/GB, 2 GB a worker;
    partitioned dedup: 1e-4 s a document for an LSH band, 1e-5 for verification and for the components' rounds, both in
    partitions, 1 driver s a shard)."""
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
    c = plan["snapshots"][0]
    assert c["warc_gb"] == 1000 and c["shards"] == pytest.approx(1e12 / WARC_FILE_BYTES)  # 972.4 WARC files
    assert c["core_hours"]["extract"] == pytest.approx(1000 * 1000 / 3600)  # 277.8
    assert c["core_hours"]["dedup"] == pytest.approx(
        (200 * 1000 + 20e6 * 1e-5 + 20e6 * 1e-5) / 3600
    )  # signatures + stage A' (verify) + stage B's rounds (components), in partitions on every worker
    assert c["parallel_core_hours"] == pytest.approx((2000 * 1000 + 400) / 3600)  # 555.67
    assert c["serial_hours"] == pytest.approx(
        {"driver": 972.3966 / 3600, "dedup LSH band": 20e6 * 1e-4 / 3600},
        rel=1e-6,
    )
    assert c["driver_hours"] == pytest.approx(0.27011 + 0.55556, rel=1e-4)  # 0.826
    assert c["wall_hours"][1] == pytest.approx(
        555.6667 / 3 + 0.82567 + 5 * 0.55556, rel=1e-4
    )  # 16 bands on 3 workers: 5 more waves
    assert c["wall_hours"][2] == pytest.approx(555.6667 / 6 + 0.82567 + 2 * 0.55556, rel=1e-4)  # on 6: 2 more
    assert c["kept_docs"] == 20_000_000  # 0.5 a page
    assert c["dedup_index_bytes"] == 20_000_000 * 1000  # the single-process plan: 1,000 bytes a document
    assert c["dedup_task_bytes"] == {"LSH band": 20_000_000 * 50, "components": 20_000_000 * 12}


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
        l for l in r.stdout.splitlines() if l.startswith("CC-2021-04") and len(l.split()) == 4
    )  # hours on 1, 8, 64 nodes
    # 2,000 CPU-s/GB x 82,271 GB + 1.70B documents x (1e-5 s verify + 1e-5 s components) = 45,716 core-hours over 64
    # workers a node, plus 69.5 serial hours: 80,000 WARC files x 1 driver s (22.2 h), one LSH band (1.70B x 1e-4 s:
    # 47.2 h)
    assert [float(x.replace(",", "")) for x in wall.split()[1:]] == pytest.approx([783.8, 158.8, 80.6], abs=0.05)


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
