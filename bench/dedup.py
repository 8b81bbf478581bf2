"""Fuzzy-dedup throughput, text to duplicate groups: our compiled pipeline (chapter 32: shingles -> one-permutation
MinHash signatures -> LSH banding -> verification -> connected components, numba kernels on 2 threads) against
datasketch and rensa at their fastest documented batch APIs, measured in the same run, interleaved, on Wikipedia
passages of ~300 words with planted near-duplicates. Every side starts from text; shingling is inside every timing.

    [MTNLG_DATA=DIR] python bench/dedup.py [--docs 20000] [--baseline-docs 3000] [--threads 2] [--reps 5] [--save]

(With $MTNLG_DATA the passages are distinct, as in the committed results; without it the committed Wikipedia slice
holds ~2,700 passages, so the corpus repeats them and the LSH phase handles many exact copies.)

- ours: `compiled_signatures` + `fuzzy_dedup(engine="compiled")` — the whole pipeline, to components;
- ours, 1 thread: the same on one thread (a per-core figure);
- numpy twin: chapter 32's readable numpy version of the same pipeline, one process (the "before");
- datasketch 2.0: 5-word shingles in Python, `MinHash.bulk`, then one `MinHashLSH.insertion_session`;
- rensa: the same shingles, `RMinHash.digest_matrix_from_token_sets` (its bulk path), `RMinHashLSH.insert_matrix`.
The baselines stop at the LSH index (no candidate verification, no components): they do less work than ours.

docs/s are medians (min, max) over --reps interleaved runs; ratios are ratios of medians. Estimate quality: RMSE of
each side's Jaccard estimate against the exact Jaccard of the planted pairs. Memory: signature + LSH index bytes per
document (the arrays the compiled path holds), and the peak RSS growth of a child process that runs only our pipeline
on --memory-docs documents, both scaled to a million documents. With --save also writes
bench/results/dedup-<date>-cpu.json."""

import argparse
import datetime
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from stats import summary, ratio_of_medians, fmt, hardware, MIN_RUNS
from mtnlg.dedup import (
    compiled_signatures,
    minhash_signatures,
    fuzzy_dedup,
    estimate_jaccard,
    exact_jaccard,
    edit_words,
    EDITS,
)


def corpus(n_docs: int, seed: int = 0) -> tuple[list[str], list[tuple[int, int]]]:
    """300-word Wikipedia passages; every 10th document is an edited copy of an earlier one. Returns texts and (source,
    copy) pairs."""
    from mtnlg.catalog import data_path

    src = min(
        data_path("wikipedia").glob("*train.jsonl")
    )  # the full corpus under $MTNLG_DATA, else its committed slice
    passages = []
    with open(src) as f:
        for line in f:
            w = json.loads(line)["text"].split()
            passages += [" ".join(w[i : i + 300]) for i in range(0, len(w) - 300, 300)]
            if len(passages) >= n_docs:
                break
    rng = np.random.default_rng(seed)
    docs, pairs = [], []
    while len(docs) < n_docs:
        base = passages[len(docs) % len(passages)]
        if len(docs) % 10 == 9:
            j = int(rng.integers(0, len(docs)))
            kind, amount = EDITS[int(rng.integers(len(EDITS)))]
            docs.append(
                " ".join(
                    edit_words(docs[j].split(), kind, amount, rng, passages[int(rng.integers(len(passages)))].split())
                )
            )
            pairs.append((j, len(docs) - 1))
        else:
            docs.append(base)
    return docs, pairs


def ours(docs, a, threads):
    """Our whole pipeline; returns signatures, the dedup result, seconds for signatures and for LSH + verify +
    components, and the CPU seconds this process spent (on one thread, a measure that other jobs' load inflates much
    less)."""
    t0, c0 = time.perf_counter(), time.process_time()
    sig = compiled_signatures(docs, a.num_perm, threads=threads)
    t1 = time.perf_counter()
    res = fuzzy_dedup(
        sig, ["wikipedia"] * len(docs), ["wikipedia"], a.threshold, a.bands, a.rows, engine="compiled", threads=threads
    )
    return sig, res, t1 - t0, time.perf_counter() - t1, time.process_time() - c0


def numpy_twin(docs, a):
    t0 = time.perf_counter()
    sig = minhash_signatures(docs, a.num_perm)
    res = fuzzy_dedup(sig, ["wikipedia"] * len(docs), ["wikipedia"], a.threshold, a.bands, a.rows, engine="numpy")
    return sig, res, time.perf_counter() - t0


def shingles(docs):
    "The baselines' shingling: 5-word strings of the lowercased \\w+ words, as datasketch's examples build them."
    out = []
    for text in docs:
        w = re.findall(r"\w+", text.lower())
        out.append([" ".join(w[i : i + 5]) for i in range(max(1, len(w) - 4))])
    return out


def datasketch_run(docs, a):
    from datasketch import MinHash, MinHashLSH

    t0 = time.perf_counter()
    hashes = MinHash.bulk([[s.encode() for s in sh] for sh in shingles(docs)], num_perm=a.num_perm)
    lsh = MinHashLSH(num_perm=a.num_perm, params=(a.bands, a.rows))
    with lsh.insertion_session() as session:
        for k, m in enumerate(hashes):
            session.insert(k, m)
    return np.array([h.hashvalues for h in hashes]), time.perf_counter() - t0


def rensa_run(docs, a):
    from rensa import RMinHash, RMinHashLSH

    t0 = time.perf_counter()
    digests = RMinHash.digest_matrix_from_token_sets(shingles(docs), a.num_perm, 0)
    lsh = RMinHashLSH(a.threshold, a.num_perm, a.bands)
    lsh.insert_matrix(digests)
    return np.array(digests.to_rows(), np.uint32), time.perf_counter() - t0


def memory_child(n_docs: int, a) -> dict:
    """In a fresh process: RSS before and peak after our pipeline on n_docs documents (texts already in memory, kernels
    loaded)."""
    code = (
        f"import sys, gc, resource; sys.argv = ['x', '--num-perm', '{a.num_perm}', '--bands', '{a.bands}', "
        f"'--rows', '{a.rows}', "
        f"'--threshold', '{a.threshold}']; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'bench')!r}]\n"
        "import dedup, json\n"
        "a = dedup.parse(); docs, _ = dedup.corpus(" + str(n_docs) + "); dedup.ours(docs[:3000], a, 2); gc.collect()\n"
        "kb = lambda key: int(next(l for l in open('/proc/self/status') if l.startswith(key)).split()[1]) * 1024\n"
        "open('/proc/self/clear_refs', 'w').write('5'); before = kb('VmRSS')   # 5: reset the peak (VmHWM) "
        "to the current RSS\n"
        "sig, res, *_ = dedup.ours(docs, a, 2)\n"
        "print(json.dumps({'docs': len(docs), 'rss_before': before, 'peak_rss': kb('VmHWM')}))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument(
        "--baseline-docs", type=int, default=3000, help="documents for datasketch, rensa and the numpy twin"
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--bands", type=int, default=16)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--memory-docs", type=int, default=100000)
    ap.add_argument("--reps", type=int, default=MIN_RUNS, help=f"runs of each side (at least {MIN_RUNS})")
    ap.add_argument("--save", action="store_true", help="write the result to --out (default: print only)")
    ap.add_argument("--out", default=str(ROOT / f"bench/results/dedup-{datetime.date.today().isoformat()}-cpu.json"))
    a = ap.parse_args(argv)
    if a.reps < MIN_RUNS:
        ap.error(f"--reps must be at least {MIN_RUNS}")
    return a


def main():
    a = parse()
    hw = hardware()
    docs, pairs = corpus(a.docs)
    n = min(a.baseline_docs, len(docs))
    words = np.mean([len(d.split()) for d in docs[:1000]])
    print(
        f"{len(docs):,} documents (~{words:.0f} words, {len(set(docs)):,} distinct), {len(pairs):,} "
        f"planted near-duplicate copies; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work on the machine slows every side)"
    )
    t0 = time.perf_counter()
    ours(docs[:3000], a, a.threads)
    print(f"numba kernels loaded/compiled in {time.perf_counter() - t0:.1f} s (not timed)")

    keys = (
        "ours",
        "ours_1_thread",
        "ours_1_thread_per_cpu_second",
        "numpy_twin",
        "datasketch",
        "rensa",
        "ours_signature_s",
        "ours_lsh_verify_components_s",
        "load_avg_1min",
    )
    runs = {k: [] for k in keys}
    for rep in range(a.reps):  # interleaved: load from other jobs hits every side alike
        sig, res, t_sig, t_rest, _ = ours(docs, a, a.threads)
        runs["ours"].append(len(docs) / (t_sig + t_rest))
        runs["ours_signature_s"].append(t_sig)
        runs["ours_lsh_verify_components_s"].append(t_rest)
        _, _, t_sig1, t_rest1, cpu1 = ours(docs, a, 1)
        runs["ours_1_thread"].append(len(docs) / (t_sig1 + t_rest1))
        runs["ours_1_thread_per_cpu_second"].append(len(docs) / cpu1)
        twin_sig, twin_res, t_twin = numpy_twin(docs[:n], a)
        runs["numpy_twin"].append(n / t_twin)
        ds_sig, t_ds = datasketch_run(docs[:n], a)
        runs["datasketch"].append(n / t_ds)
        rs_sig, t_rs = rensa_run(docs[:n], a)
        runs["rensa"].append(n / t_rs)
        runs["load_avg_1min"].append(os.getloadavg()[0])
        print(
            f"run {rep + 1}/{a.reps}: ours {runs['ours'][-1]:,.0f} docs/s on {a.threads} threads, "
            f"{runs['ours_1_thread'][-1]:,.0f} on 1; "
            f"numpy twin {runs['numpy_twin'][-1]:,.0f}; datasketch {runs['datasketch'][-1]:,.0f}; rensa "
            f"{runs['rensa'][-1]:,.0f} docs/s; "
            f"load {runs['load_avg_1min'][-1]:.1f}",
            flush=True,
        )
    st = {k: summary(v) for k, v in runs.items()}
    ratio = {f"ours / {b}": ratio_of_medians(st["ours"], st[b]) for b in ("datasketch", "rensa", "numpy_twin")}
    ratio.update(
        {
            f"ours 1 thread / {b}": ratio_of_medians(st["ours_1_thread"], st[b])
            for b in ("datasketch", "rensa", "numpy_twin")
        }
    )
    ratio["ours / ours 1 thread"] = ratio_of_medians(st["ours"], st["ours_1_thread"])
    print(f"ours:        {fmt(st['ours'], ',.0f', ' docs/s')} on {a.threads} threads (target >= 100,000)")
    print(
        f"ours:        {fmt(st['ours_1_thread'], ',.0f', ' docs/s')} on 1 thread; per CPU-second of that thread "
        f"{fmt(st['ours_1_thread_per_cpu_second'], ',.0f', ' docs')} (x2 = "
        f"{2 * st['ours_1_thread_per_cpu_second']['median']:,.0f} docs/s, "
        "what two idle cores would give with perfect scaling)"
    )
    print(f"numpy twin:  {fmt(st['numpy_twin'], ',.0f', ' docs/s')} (1 process, {n:,} documents)")
    print(
        f"datasketch:  {fmt(st['datasketch'], ',.0f', ' docs/s')} (MinHash.bulk + insertion session, {n:,} documents)"
    )
    print(
        f"rensa:       {fmt(st['rensa'], ',.0f', ' docs/s')} (digest_matrix_from_token_sets + "
        f"insert_matrix, {n:,} documents)"
    )
    print("ratios of medians: " + "; ".join(f"{k} {v:.1f}x" for k, v in ratio.items()))
    print(f"load average (1 min) during the runs: {fmt(st['load_avg_1min'], '.1f')}")

    # the same numbers as the twin, bit for bit, on the documents both saw
    same = bool(np.array_equal(sig[:n], twin_sig))
    # estimate quality on the planted pairs, against the exact Jaccard of their 5-gram sets
    sub = [(i, j) for i, j in pairs if j < n]
    exact = np.array([exact_jaccard(docs[i], docs[j]) for i, j in sub])
    I, J = np.array([p[0] for p in sub]), np.array([p[1] for p in sub])
    est = {
        "ours": estimate_jaccard(sig[I], sig[J]),
        "datasketch": (ds_sig[I] == ds_sig[J]).mean(1),
        "rensa": (rs_sig[I] == rs_sig[J]).mean(1),
    }
    rmse = {k: float(np.sqrt(np.mean((e - exact) ** 2))) for k, e in est.items()}
    bias = {k: float(np.mean(e - exact)) for k, e in est.items()}
    all_exact = np.array([exact_jaccard(docs[i], docs[j]) for i, j in pairs])
    rmse_all = float(
        np.sqrt(np.mean((estimate_jaccard(sig[[p[0] for p in pairs]], sig[[p[1] for p in pairs]]) - all_exact) ** 2))
    )
    print(
        f"estimates on {len(sub)} planted pairs (exact J {exact.min():.2f}-{exact.max():.2f}): RMSE "
        + ", ".join(f"{k} {v:.4f}" for k, v in rmse.items())
        + "; bias "
        + ", ".join(f"{k} {v:+.4f}" for k, v in bias.items())
        + f"; ours on all {len(pairs)} planted pairs: RMSE {rmse_all:.4f}; compiled signatures = numpy twin's: {same}"
    )
    drop = res.duplicate_of >= 0
    found = float(np.mean([res.component[i] == res.component[j] for i, j in pairs]))
    print(
        f"duplicate groups: {drop.sum():,} of {len(docs):,} documents dropped; planted pairs in one group: {found:.3f}"
    )

    # memory: what the compiled path holds per document, and a child process's peak RSS growth
    per_doc_sig = a.num_perm * 4
    per_doc_index = a.bands * (8 + 8 + 8) + 8 * 3  # band keys, star centres, one sort order per band; union-find arrays
    per_doc_pairs = 8 * 2 * res.n_candidates / len(docs)  # pair codes, then (i, j)
    mem = memory_child(a.memory_docs, a)
    rss_per_doc = (mem["peak_rss"] - mem["rss_before"]) / mem["docs"]
    print(
        f"memory per million documents: signatures {per_doc_sig * 1e6 / 1e9:.2f} GB + LSH index "
        f"{per_doc_index * 1e6 / 1e9:.2f} GB "
        f"+ candidate pairs {per_doc_pairs * 1e6 / 1e9:.2f} GB (this corpus); peak RSS growth of a child "
        f"running the pipeline on "
        f"{mem['docs']:,} documents: {rss_per_doc:.0f} B/doc -> {rss_per_doc * 1e6 / 1e9:.2f} GB per million "
        f"(texts not included: they are loaded before)"
    )

    result = {
        "benchmark": "fuzzy dedup, text to duplicate groups, docs/s",
        "date": datetime.date.today().isoformat(),
        "hardware": {**hw, "load_avg_1min_end": os.getloadavg()[0]},
        "docs": len(docs),
        "distinct_docs": len(set(docs)),
        "baseline_docs": n,
        "threads": a.threads,
        "num_perm": a.num_perm,
        "bands": a.bands,
        "rows": a.rows,
        "threshold": a.threshold,
        "reps": a.reps,
        "apis": {
            "ours": "compiled_signatures + fuzzy_dedup(engine='compiled'): signatures, LSH, verification, components",
            "datasketch": "MinHash.bulk + MinHashLSH.insertion_session (sha1_hash32)",
            "rensa": "RMinHash.digest_matrix_from_token_sets + RMinHashLSH.insert_matrix",
        },
        "docs_per_s": {k: st[k] for k in ("ours", "ours_1_thread", "numpy_twin", "datasketch", "rensa")},
        "ours_1_thread_docs_per_cpu_second": st["ours_1_thread_per_cpu_second"],
        "ours_signature_s": st["ours_signature_s"],
        "ours_lsh_verify_components_s": st["ours_lsh_verify_components_s"],
        "load_avg_1min": st["load_avg_1min"],
        "ratios": ratio,
        "ratios_are": "median / median, interleaved runs",
        "signatures_equal_numpy_twin": same,
        "pairs_compared": len(sub),
        "rmse": rmse,
        "bias": bias,
        "rmse_ours_all_planted_pairs": rmse_all,
        "planted_pairs_grouped": found,
        "dropped": int(drop.sum()),
        "candidate_pairs": res.n_candidates,
        "edges": res.n_edges,
        "memory": {
            "bytes_per_doc_signature": per_doc_sig,
            "bytes_per_doc_index": per_doc_index,
            "bytes_per_doc_pairs": per_doc_pairs,
            "gb_per_million_docs_signature_and_index": (per_doc_sig + per_doc_index) * 1e6 / 1e9,
            "peak_rss_child": mem,
            "peak_rss_growth_bytes_per_doc": rss_per_doc,
            "gb_per_million_docs_peak_rss_growth": rss_per_doc * 1e6 / 1e9,
            "peak_rss_this_process_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        },
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    if not a.save:
        return
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
