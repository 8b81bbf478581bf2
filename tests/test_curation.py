"Data curation end to end: accounting under bad input, resume, Dask, Megatron round trip, training on the output."

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests/fixtures/curation"
CONFIG = ROOT / "scaled_configs/curate-tiny.yaml"


def curate_cli(*args) -> int:
    from mtnlg.cli import main

    return main(["curate", "--config", str(CONFIG), "--no-progress", *args])


@pytest.fixture(scope="module")
def bad_corpus(tmp_path_factory):
    "The fixture corpus with every kind of bad input injected; returns (input_dir, output_dir, summary)."
    tmp = tmp_path_factory.mktemp("curation")
    raw = tmp / "raw"
    shutil.copytree(FIXTURE / "raw", raw)
    crawl = raw / "crawl/crawl-000.jsonl"
    good = crawl.read_bytes()
    n = good.count(b"\n")
    crawl.write_bytes(
        good
        + b"".join(
            [
                b'{"html": "\xff\xfe not UTF-8"}\n',  # n+1 invalid UTF-8
                b'{"html": "<p>half a line\n',  # n+2 malformed JSON
                b"\n",  # n+3 empty
                b'{"html": "<p>' + b"word " * 2_100_000 + b'</p>"}\n',  # n+4 a 10 MB single line
                json.dumps({"html": "<html><script>a()</script><script>b()</script></html>"}).encode()
                + b"\n",  # n+5 scripts only
                b'{"html": ""}\n',  # n+6 empty document
            ]
        )
    )
    (raw / "crawl/crawl-002.jsonl").write_bytes(bytes(range(256)) * 64)  # a binary file posing as a shard
    out = tmp / "out"
    assert curate_cli("--set", f"input_dir={raw}", "--output-dir", str(out), "--workers", "1") == 0
    return raw, out, json.loads((out / "summary.json").read_text()), n


def test_accounting_invariant_with_bad_input(bad_corpus):
    raw, out, summary, n = bad_corpus
    for stage, s in summary["stages"].items():
        assert s["docs_in"] == s["kept"] + sum(s["dropped"].values()), stage
    ext = summary["stages"]["extract"]
    for reason in ("invalid UTF-8", "malformed JSON", "blank line", "line over 4,000,000 bytes", "no main text"):
        assert ext["dropped"].get(reason, 0) >= 1, (reason, ext["dropped"])
    # per-shard manifests name the file and line of every bad line
    man = json.loads((out / "manifests/extract/crawl/crawl-000.json").read_text())
    where = {tuple(e) for e in man["examples"]}
    shard = str(raw / "crawl/crawl-000.jsonl")
    for line, reason in (
        (n + 1, "invalid UTF-8"),
        (n + 2, "malformed JSON"),
        (n + 3, "blank line"),
        (n + 4, "line over 4,000,000 bytes"),
        (n + 5, "no main text"),
        (n + 6, "no main text"),
    ):
        assert (f"{shard}:{line}", reason) in where, (line, reason, man["examples"])
    binary = json.loads((out / "manifests/extract/crawl/crawl-002.json").read_text())
    assert binary["kept"] == 0 and binary["docs_in"] == sum(binary["dropped"].values()) > 0
    # documents flow: each stage reads exactly what the previous one wrote
    st = summary["stages"]
    assert (
        st["quality"]["docs_in"] == st["extract"]["kept"]
        and st["tokenize"]["docs_in"] == st["decontaminate"]["documents_written"]
    )


def test_dedup_and_decontamination_did_their_jobs(bad_corpus):
    _, out, summary, _ = bad_corpus
    st = summary["stages"]
    assert st["dedup"]["dropped"]["near-duplicate of a wikipedia document"] >= 10  # the webtext copies
    kept_ids = {json.loads(l)["id"].split(":")[0] for l in open(out / "dedup/webtext/webtext-000.jsonl")}
    assert kept_ids == {"webtext/webtext-000"}
    from mtnlg.decontaminate import eval_task_texts, build_task_ngrams, find_task_ngrams

    table = build_task_ngrams(
        [t for ts in eval_task_texts(FIXTURE / "eval", ["boolq", "lambada"]).values() for t in ts]
    )
    before = sum(
        bool(find_task_ngrams(json.loads(l)["text"], table)) for l in open(out / "dedup/wikipedia/wiki-000.jsonl")
    )
    after = sum(
        bool(find_task_ngrams(json.loads(l)["text"], table))
        for l in open(out / "decontaminate/wikipedia/wiki-000.jsonl")
    )
    assert before > 0 and after == 0


def test_indexed_datasets_read_back_by_megatron_core(bad_corpus):
    _, out, summary, _ = bad_corpus
    from tokenizers import Tokenizer
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from mtnlg.data import eot_id

    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    for d in ("wikipedia", "webtext", "crawl"):
        texts = [json.loads(l)["text"] for f in sorted((out / "decontaminate" / d).glob("*.jsonl")) for l in open(f)]
        ds = IndexedDataset(str(out / "indexed" / d))
        assert len(ds) == len(texts)
        for i, t in enumerate(texts):
            assert ds[i].tolist() == tok.encode(t).ids + [eot_id(tok)]
    line = (out / "blend/megatron_data_path.txt").read_text().split()
    assert [float(w) for w in line[0::2]] == pytest.approx([0.6, 0.2, 0.2])


def test_resume_redoes_only_what_is_missing(bad_corpus, tmp_path):
    raw, out, summary, _ = bad_corpus
    work = tmp_path / "out"
    shutil.copytree(out, work)
    victim = work / "manifests/decontaminate/wikipedia/wiki-001.json"
    other = work / "manifests/decontaminate/wikipedia/wiki-000.json"
    victim.unlink()
    os.utime(other, (1, 1))
    assert curate_cli("--set", f"input_dir={raw}", "--output-dir", str(work), "--workers", "1") == 0
    assert victim.is_file() and other.stat().st_mtime == 1  # redone / untouched
    again = json.loads((work / "summary.json").read_text())
    assert {s: v["kept"] for s, v in again["stages"].items()} == {s: v["kept"] for s, v in summary["stages"].items()}


@pytest.mark.slow  # make test: every stage on the local pool, whose digests the fixture configs pin
def test_dask_matches_local_pool(tmp_path):
    from mtnlg.curate import curate
    from mtnlg.curate_config import load_curate_config

    cfg = load_curate_config(CONFIG)
    local = curate(cfg, tmp_path / "local", "local", 2, progress=False)
    dask = curate(cfg, tmp_path / "dask", "dask", 2, progress=False)
    assert {s: v["dropped"] for s, v in local["stages"].items()} == {s: v["dropped"] for s, v in dask["stages"].items()}
    assert (tmp_path / "local/blend/train.jsonl").read_text() == (tmp_path / "dask/blend/train.jsonl").read_text()
    from curate_digests import (
        dedup_decisions,
        digests,
    )  # the partitioned dedup's tasks on Dask: the same drops, every file

    assert (
        dedup_decisions(tmp_path / "local") == dedup_decisions(tmp_path / "dask")
        and len(dedup_decisions(tmp_path / "local")) == 10
    )
    assert digests(tmp_path / "local") == digests(tmp_path / "dask")


def _quality_fixture_chunks():
    "Training chunks as `train_quality_model` makes them: Wikipedia paragraphs (curated) vs raw crawl page text."
    from mtnlg.quality import raw_page_text, word_chunks

    docs = lambda d: [
        json.loads(l)
        for p in sorted((FIXTURE / "raw" / d).glob("*.jsonl"))
        for l in p.read_text().splitlines()
        if l.strip()
    ]
    pos = [c for d in docs("wikipedia") for c in word_chunks(d["text"])]
    neg = [c for d in docs("crawl") for c in word_chunks(raw_page_text(d["html"]))]
    return pos, neg


def test_quality_classifier_is_deterministic(tmp_path):
    """Same chunks + seed: bitwise-identical scores every time, no NaN (fastText at lr 0.5 failed at random); tiny sets
    train."""
    from mtnlg.quality import QualityClassifier

    pos, neg = _quality_fixture_chunks()
    assert len(pos) > 100 and len(neg) > 40
    held = pos[-20:] + neg[-10:]
    runs = [QualityClassifier.train(pos[:-20], neg[:-10], seed=1234).score(held) for _ in range(20)]
    assert all(np.isfinite(r).all() and np.array_equal(r, runs[0]) for r in runs)
    assert runs[0][:20].mean() > runs[0][20:].mean() + 0.2  # and it learned something
    clf = QualityClassifier.train(pos, neg, seed=1234)
    clf.save(tmp_path / "quality_model.bin")
    assert np.array_equal(QualityClassifier.load(tmp_path / "quality_model.bin").score(held), clf.score(held))
    small = [
        QualityClassifier.train(pos[:5], neg[:5], seed=s).score(held) for s in (0, 0, 1)
    ]  # 5 positives / 5 negatives
    assert all(np.isfinite(s).all() and ((0 <= s) & (s <= 1)).all() for s in small) and np.array_equal(
        small[0], small[1]
    )


def test_slurm_cluster_job_script_without_slurm():
    from dask_jobqueue import SLURMCluster
    from mtnlg.curate_config import SlurmSpec

    s = SlurmSpec(queue="batch", cores=4, memory="16GB")
    script = SLURMCluster(
        queue=s.queue, cores=s.cores, processes=s.cores, memory=s.memory, walltime=s.walltime
    ).job_script()
    assert "#SBATCH -p batch" in script and "dask" in script


def test_config_errors_are_one_line(capsys):
    assert curate_cli("--set", "dedup.treshold=0.7") == 2
    assert "did you mean `threshold`" in capsys.readouterr().err
    assert curate_cli("--set", "input_dir=/nonexistent/raw") == 2
    assert "input_dir '/nonexistent/raw' not found" in capsys.readouterr().err


def test_tiny_training_config_trains_on_curated_output(bad_corpus, tmp_path):
    """`mtnlg train` reads the curation's .bin/.idx datasets and tokenizer directly, as a user would after `mtnlg
    curate`."""
    _, out, _, _ = bad_corpus
    cmd = [
        str(Path(sys.executable).parent / "mtnlg"),
        "train",
        "--config",
        str(ROOT / "scaled_configs/tiny.yaml"),
        "--set",
        f"data.curated={out}",
        "--set",
        "data.train_files=[]",
        "--set",
        "data.valid_files=[]",
        "--set",
        "schedule.train_iters=3",
        "--set",
        f"output_dir={tmp_path}/run",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads((tmp_path / "run/summary.json").read_text())
    assert s["steps"] == 3 and np.isfinite(s["final_valid_loss"])
    ckpt = Path(s["checkpoint"])
    assert ckpt == tmp_path / "run/checkpoints/step-0000003"
    assert (ckpt / "tokenizer.json").read_bytes() == (
        out / "tokenizer.json"
    ).read_bytes()  # curation's tokenizer, not a new one


def test_extraction_counts_expected_errors_and_stops_on_any_other(tmp_path, monkeypatch):
    "An HTML parse error is dropped and counted with its reason; an error nobody expected (a bug) stops the run, named."
    import lxml.etree
    from mtnlg import extract

    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"html": "<html><body><p>" + "a sentence of English words. " * 20 + "</p></body></html>"}) + "\n"
    )

    def parse_error(_):
        raise lxml.etree.ParserError("broken page")

    monkeypatch.setattr(extract, "html_to_text", parse_error)
    man = extract.extract_shard(src, tmp_path / "out.jsonl", "crawl")
    assert (man.docs_in, man.kept) == (1, 0) and list(man.dropped) == ["unparseable HTML (ParserError)"]

    def bug(_):
        raise ZeroDivisionError("a bug in our code")

    monkeypatch.setattr(extract, "html_to_text", bug)
    with pytest.raises(ZeroDivisionError, match="a bug in our code"):
        extract.extract_shard(src, tmp_path / "out2.jsonl", "crawl")


def _streaming_kit(tmp: Path) -> dict:
    """Shards of 200 and 800 synthetic documents (~3 KB: 100 long words each), a small quality classifier, BPE and task
    n-grams."""
    from mtnlg.extract import write_jsonl
    from mtnlg.quality import QualityClassifier
    from mtnlg.data import train_bpe
    from mtnlg.decontaminate import build_task_ngrams

    rng = np.random.default_rng(0)
    vocab = ["".join(rng.choice(list("abcdefghijklmnop"), k)) for k in rng.integers(20, 40, 2000)]
    text = lambda n: " ".join(rng.choice(vocab, n))

    def shard(name, n):
        write_jsonl(tmp / name, ({"id": f"x/{name}:{i}", "dataset": "x", "text": text(100)} for i in range(n)))
        return tmp / name

    texts = [text(100) for _ in range(40)]
    return dict(
        tmp=tmp,
        small=shard("small.jsonl", 200),
        large=shard("large.jsonl", 800),
        tok=train_bpe(texts, 300),
        clf=QualityClassifier.train(texts[:20], texts[20:], n_features=2**16),
        table=build_task_ngrams(texts[:3]),
    )


@pytest.fixture(scope="module")
def streaming(tmp_path_factory):
    return _streaming_kit(tmp_path_factory.mktemp("streaming"))


def _stages(k, batch):
    "Each per-shard stage as `run(shard, name)`, writing `out-<name>` beside the shards."
    from mtnlg.quality import quality_shard
    from mtnlg.dedup import signature_shard, dedup_shard
    from mtnlg.decontaminate import count_shard, decontaminate_shard
    from mtnlg.indexed import tokenize_shard

    o = lambda name, ext="": k["tmp"] / f"out-{name}{ext}"
    return {
        "quality": lambda s, n: quality_shard(s, o(n, ".jsonl"), k["clf"], batch=batch),
        "signatures (compiled)": lambda s, n: signature_shard(s, o(n, ".npz"), batch=batch),
        "signatures (numpy)": lambda s, n: signature_shard(s, o(n, ".npz"), engine="numpy", batch=batch),
        "dedup": lambda s, n: dedup_shard(s, o(n, ".jsonl"), {"x/small.jsonl:3": "dup"}),
        "count n-grams": lambda s, n: count_shard(s, k["table"], batch=batch),
        "decontaminate": lambda s, n: decontaminate_shard(s, o(n, ".jsonl"), k["table"], batch=batch),
        "tokenize": lambda s, n: tokenize_shard(s, o(n), k["tok"], batch=batch),
    }


def _peak_growth(tmp) -> dict:
    """Per stage, batches of 25: [peak traced memory over the 800-document shard / over the 200-document one, bytes per
    extra document]."""
    import gc
    import tracemalloc

    def peak(fn, *args):
        gc.collect()
        tracemalloc.start()
        try:
            fn(*args)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    k, growth = _streaming_kit(Path(tmp)), {}
    for name, run in _stages(k, 25).items():
        for shard in (k["small"], k["large"]):
            run(shard, "warm")  # caches outside the measurement: numba, hash powers and
            # the tokenizer's remembered pieces (bounded: chapter 35)
        small, large = peak(run, k["small"], "small"), peak(run, k["large"], "large")
        growth[name] = [large / small, (large - small) / 600]
    return growth


def test_stage_memory_does_not_grow_with_the_shard(tmp_path):
    """Peak traced memory (tracemalloc: Python objects and numpy buffers) of each per-shard stage over a shard of 200
    documents and one of 800 (~3 KB each), in batches of 25. Reading whole shards grew it 3.6-4x, by more than a
    document's size per document; streaming holds a batch: the 4x shard costs under 1.5x, and under 250 bytes per
    extra document (what grows: the ids and dataset names the signature pass saves, the lengths the .idx needs).
    Measured in a fresh interpreter: tracemalloc counts every thread, and earlier tests leave threads running
    (Dask's)."""
    code = (
        f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_curation as t; "
        f"print(json.dumps(t._peak_growth({str(tmp_path)!r})))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    growth = json.loads(r.stdout.strip().splitlines()[-1])
    print({name: (round(ratio, 2), round(per_doc)) for name, (ratio, per_doc) in growth.items()})
    assert all(ratio < 1.5 and per_doc < 250 for ratio, per_doc in growth.values()), growth


def test_batch_size_does_not_change_outputs(streaming):
    "Every stage writes the same bytes and the same manifest a document at a time as in one batch of the whole shard."
    t, results = streaming["tmp"], {}
    for batch in (1, 10_000):
        for name, run in _stages(streaming, batch).items():
            m = run(streaming["small"], f"{name}-{batch}")
            results.setdefault(name, []).append({**m.to_dict(), "seconds": 0} if hasattr(m, "to_dict") else m)
    for name, (one, whole) in results.items():
        assert one == whole, name
    for name in results:
        for ext in (".jsonl", ".bin", ".idx"):
            if (t / f"out-{name}-1{ext}").exists():
                assert (t / f"out-{name}-1{ext}").read_bytes() == (t / f"out-{name}-10000{ext}").read_bytes(), name
    for engine in ("compiled", "numpy"):
        with (
            np.load(t / f"out-signatures ({engine})-1.npz", allow_pickle=True) as a,
            np.load(t / f"out-signatures ({engine})-10000.npz", allow_pickle=True) as b,
        ):
            assert sorted(a.files) == sorted(b.files) == ["datasets", "ids", "sig"] and len(a["ids"]) == 200
            assert all(np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype for k in a.files)


def test_blend_token_counts_match_encoding(streaming, tmp_path):
    """The blend's token counts come from the tokenize stage's lengths and equal `len(tok.encode(text).ids)`, also in a
    shard where documents without tokens were dropped; its documents are read back by number."""
    from mtnlg.extract import write_jsonl
    from mtnlg.indexed import tokenize_shard
    from mtnlg.curate_blend import _Documents, _token_counts

    tok = streaming["tok"]
    texts = [json.loads(l)["text"] for l in open(streaming["small"])][:20]
    shards = {"a": texts[:10], "b": ["", *texts[10:15], "", *texts[15:]]}
    for s, ts in shards.items():
        write_jsonl(tmp_path / f"{s}.jsonl", ({"id": f"{s}:{i}", "text": t} for i, t in enumerate(ts)))
        tokenize_shard(tmp_path / f"{s}.jsonl", tmp_path / s, tok)
    docs = _Documents([tmp_path / "a.jsonl", tmp_path / "b.jsonl"])
    expected = [len(tok.encode(t).ids) for t in shards["a"] + shards["b"]]
    assert list(_token_counts(docs, [tmp_path / "a", tmp_path / "b"], tok)) == expected and expected.count(0) == 2
    assert [docs.text(i) for i in (0, 10, 11, 21)] == [texts[0], "", texts[10], texts[19]]
    docs.close()


def test_no_document_is_scored_by_a_model_that_trained_on_it(bad_corpus):
    """Cross-fitting (chapter 31): each document's score is its own fold's model's, and that model never trained on it;
    the others did."""
    from mtnlg.quality import QualityClassifier, fold_key, fold_of

    _, out, summary, _ = bad_corpus
    folds = 5
    models = [QualityClassifier.load(out / f"quality_models/fold{k}-of-{folds}.bin") for k in range(folds)]
    trained_on = [
        set(json.loads((out / f"quality_models/fold{k}-of-{folds}.json").read_text())["trained_on"])
        for k in range(folds)
    ]
    assert all(trained_on)
    scored = 0
    for d in ("wikipedia", "webtext", "crawl"):
        for f in sorted((out / "quality" / d).glob("*.jsonl")):
            for doc in map(json.loads, open(f)):
                key = fold_key(doc)
                k = fold_of(key, folds)
                assert key not in trained_on[k], key  # its own model never saw it
                assert doc["quality"] == round(float(models[k].score([doc["text"]])[0]), 4)  # and that model scored it
                if d != "webtext" and len(doc["text"].split()) >= 30:  # a positive or negative with a chunk:
                    assert all(key in trained_on[j] for j in range(folds) if j != k), (
                        key
                    )  # every other model trained on it
                scored += 1
    assert scored == summary["stages"]["quality"]["kept"]


def test_a_dataset_that_ends_empty_is_said_loudly(tmp_path, capsys):
    "The summary and the log say which stage emptied a dataset, and the blend says where its weight went."
    from mtnlg.curate import curate, format_summary, _HINTS
    from mtnlg.curate_config import load_curate_config

    cfg = load_curate_config(CONFIG, {"quality.alpha": 1000.0})  # P(keep) = (2 - score)^-1000: no crawl page survives
    s = curate(cfg, tmp_path / "out", "local", 1, progress=False)
    crawl = s["datasets"]["crawl"]["quality"]
    assert crawl["kept"] == 0 and crawl["docs_in"] > 0
    expected = [
        f"WARNING: dataset 'crawl' ends empty: quality dropped {crawl['docs_in']} of {crawl['docs_in']} "
        f"({crawl['docs_in']} low quality (Pareto)) [{_HINTS['quality']}]",
        "WARNING: blend: crawl (weight 0.20) has no documents; its weight went to the others in proportion: "
        "wikipedia 0.60 -> 0.75, webtext 0.20 -> 0.25",
    ]
    assert s["warnings"] == expected
    printed = capsys.readouterr().out
    assert all(w in printed for w in expected) and all(w in format_summary(s) for w in expected)
    line = (tmp_path / "out/blend/megatron_data_path.txt").read_text().split()
    assert [float(w) for w in line[0::2]] == pytest.approx([0.75, 0.25])


def test_datasets_emptied_or_too_small_leave_the_others_to_finish(tmp_path, capsys):
    """A crawl that extraction empties (no quality classifier to train: nothing it would filter is left) and a curated
    set smaller than one sample each get a line, and the run finishes with the others blended (exit 0)."""
    raw = tmp_path / "raw"
    shutil.copytree(FIXTURE / "raw", raw)
    for f in (raw / "crawl").iterdir():
        f.unlink()
    (raw / "crawl/crawl-000.jsonl").write_text(
        "".join(json.dumps({"html": f"<html><script>a({i})</script><p>menu home</p></html>"}) + "\n" for i in range(6))
    )
    small = (
        "Our small village bakery opens at dawn every morning and sells warm rye bread, honey cakes and strong coffee "
        "to the fishermen before they sail out across the grey northern bay."
    )
    (raw / "webtext/webtext-000.jsonl").write_text(json.dumps({"text": small}) + "\n")
    out = tmp_path / "out"
    assert curate_cli("--set", f"input_dir={raw}", "--output-dir", str(out), "--workers", "1") == 0
    s = json.loads((out / "summary.json").read_text())
    from tokenizers import Tokenizer

    tokens = len(Tokenizer.from_file(str(out / "tokenizer.json")).encode(small).ids) + 1  # and its end-of-text
    expected = [
        "WARNING: dataset 'crawl' ends empty: extract dropped 6 of 6 (6 no main text) [chapter 30: check "
        "extract.languages and extract.min_words against the input]",
        f"WARNING: blend: dataset 'webtext' holds {tokens} tokens in 1 documents, fewer than one sample "
        "(blend.seq_length + 1 = 129): left out of the blend",
        "WARNING: blend: webtext (weight 0.20), crawl (weight 0.20) has no documents; its weight went to the others "
        "in proportion: wikipedia 0.60 -> 1.00",
    ]
    assert s["warnings"] == expected
    printed = capsys.readouterr().out
    assert (
        "quality classifier: not trained: the datasets it would filter (crawl) hold no documents after extraction"
        in (printed)
    )
    assert all(w in printed for w in expected)
    assert not (out / "quality_models/fold0-of-5.bin").exists()
    assert s["stages"]["quality"]["kept"] == s["stages"]["extract"]["kept"]  # nothing filtered: nothing to filter
    line = (out / "blend/megatron_data_path.txt").read_text().split()
    assert line == ["1", str(out / "indexed/wikipedia")] and s["blend"]["gpt_sample_shares"] == {"wikipedia": 1.0}


@pytest.mark.parametrize("folds", [1, 2, 5])
def test_the_quality_sample_extraction_writes_is_the_walks(tmp_path, folds):
    """Each fold's chunks from the shards' written samples (`write_fold_sample`, as the extract task writes them) are
    the chunks a walk over the shards' own records takes (`_sample_chunks`), at quotas from one chunk a shard (a
    snapshot's) to more than a shard holds; a sample written for a smaller quota or other folds is refused."""
    from mtnlg.curate_tasks import _raw_texts, _sample_chunks, _sampled_chunks, write_fold_sample
    from mtnlg.quality import word_chunks

    shards = sorted((FIXTURE / "raw/crawl").glob("*.jsonl"))
    raw = lambda src, f=-1, n=1: _raw_texts(src, "crawl", "html", "auto", "html", 4_000_000, True, f, n)
    for cap in (len(shards), 7 * len(shards), 10**6):
        quota = -(-cap // len(shards))
        files = [tmp_path / f"{cap}-{k}.json" for k in range(len(shards))]
        for f, src in zip(files, shards):
            write_fold_sample(f, raw(src), quota, folds)
        for k in range(folds):
            walk = _sample_chunks([raw(src, k, folds) for src in shards], cap, word_chunks)
            assert _sampled_chunks(files, k, folds, cap) == walk and len(walk) >= min(cap, 1)
    with pytest.raises(ValueError, match=rf"a sample for {folds} folds of 1 chunks, not {folds} of 2"):
        _sampled_chunks([tmp_path / f"{len(shards)}-0.json"], 0, folds, 2)


def test_band_splits_do_not_change_what_dedup_keeps(tmp_path):
    """The tiny corpus curated with one key split a band and with curate-cc.yaml's 32: the same documents dropped for
    the same reasons, and the same documents kept, byte for byte (32 x 16 band tasks, each a 32nd of the keys)."""
    from mtnlg.curate import curate
    from mtnlg.curate_config import load_curate_config

    sys.path.insert(0, str(ROOT / "tests"))
    from curate_digests import dedup_decisions

    got = {}
    for splits in (1, 32):
        out = tmp_path / f"splits-{splits}"
        cfg = load_curate_config(CONFIG, {"dedup.band_splits": splits})
        curate(cfg, out, "local", 1, progress=False, log=lambda *a: None)
        kept = {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "dedup").rglob("*.jsonl"))}
        got[splits] = (dedup_decisions(out), kept, len(list((out / "dedup_lsh").glob("band-*"))))
    assert got[1][:2] == got[32][:2] and len(got[1][0]) > 0 and len(got[1][1]) > 0
    assert (got[1][2], got[32][2]) == (16, 16 * 32)


def test_compiled_kernels_cover_what_a_shard_runs(tmp_path):
    """`make install` compiles curation's numba kernels once (chapter 32's `compile_minhash_kernels`, 33's
    `compile_ngram_kernels`); a fresh process that loads them, then signs, counts and decontaminates a shard, compiles
    no kernel for another argument type."""
    from mtnlg.extract import write_jsonl

    docs = [json.loads(line) for line in open(ROOT / "tests/fixtures/corpus/wiki_valid.jsonl")][:40]
    write_jsonl(
        tmp_path / "in.jsonl", ({"id": f"x/in:{i}", "dataset": "x", "text": d["text"]} for i, d in enumerate(docs))
    )
    probe = f"""
import json, numpy as np
from mtnlg import minhash, decontaminate
from mtnlg.dedup import signature_shard
from mtnlg.decontaminate import build_task_ngrams, count_shard, decontaminate_shard
warm = {{**minhash.compile_minhash_kernels(), **decontaminate.compile_ngram_kernels()}}
src = {str(tmp_path / "in.jsonl")!r}
signature_shard(src, {str(tmp_path / "sig.npz")!r})
table = build_task_ngrams([t["text"] for t in map(json.loads, open(src))][:2])
counts = count_shard(src, table)
decontaminate_shard(src, {str(tmp_path / "out.jsonl")!r}, table, np.array(sorted(counts)[:3], np.uint64))
after = {{**minhash.compiled_kernels(vars(minhash)), **minhash.compiled_kernels(vars(decontaminate))}}
print(json.dumps([warm, after, len(counts)]))
"""
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    warm, after, found = json.loads(r.stdout.splitlines()[-1])
    assert found > 3 and warm["_signature_kernel"] >= 1 and warm["_task_ngram_kernel"] >= 1
    assert after == warm  # nothing compiled after the two
