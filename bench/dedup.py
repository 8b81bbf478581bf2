"""Fuzzy-dedup throughput: our vectorized MinHash signatures + LSH on 2 processes vs datasketch at its fastest
documented API (`MinHash.bulk`, which reuses one initialised permutation state for every document, and
`MinHashLSH.insertion_session`, which buffers the index writes), measured in the same run, on Wikipedia passages
with near-duplicates. Both sides start from text: shingling is inside both timings.

    python bench/dedup.py [--docs 20000] [--datasketch-docs 3000] [--workers 2] [--reps 5]

Each side runs --reps times (alternating); docs/s is reported as median, min and max, and the speed-up is the ratio
of the medians. Writes bench/results/dedup.json and prints the speed ratio, the estimate agreement, and the memory per
million documents (extrapolated from the measured sizes of the arrays the LSH phase holds)."""
import argparse, datetime, json, os, platform, re, sys, time, tracemalloc
from multiprocessing import get_context
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from stats import summary, ratio_of_medians, fmt, hardware, MIN_RUNS
from mtnlg.dedup import minhash_signatures, candidate_pairs, estimate_jaccard, exact_jaccard, edit_words, EDITS

def corpus(n_docs: int, seed: int = 0) -> tuple[list[str], list[tuple[int, int]]]:
    "300-word Wikipedia passages; every 10th document is an edited copy of an earlier one. Returns texts and (source, copy) pairs."
    from mtnlg.catalog import data_path
    src = min(data_path("wikipedia").glob("*train.jsonl"))   # the full corpus under $MTNLG_DATA, else its committed slice
    passages = []
    with open(src) as f:
        for line in f:
            w = json.loads(line)["text"].split()
            passages += [" ".join(w[i:i + 300]) for i in range(0, len(w) - 300, 300)]
            if len(passages) >= n_docs: break
    rng = np.random.default_rng(seed)
    docs, pairs = [], []
    while len(docs) < n_docs:
        base = passages[len(docs) % len(passages)]
        if len(docs) % 10 == 9:
            j = int(rng.integers(0, len(docs))); kind, amount = EDITS[int(rng.integers(len(EDITS)))]
            docs.append(" ".join(edit_words(docs[j].split(), kind, amount, rng, passages[int(rng.integers(len(passages)))].split())))
            pairs.append((j, len(docs) - 1))
        else: docs.append(base)
    return docs, pairs

_DOCS = []
def _sig(args):
    start, stop, num_perm = args
    return minhash_signatures(_DOCS[start:stop], num_perm)

def ours(docs, num_perm, bands, rows, workers):
    global _DOCS
    _DOCS = docs                      # forked workers inherit the texts: only index ranges and signatures travel
    t0 = time.perf_counter()
    step = -(-len(docs) // (4 * workers))
    chunks = [(i, min(i + step, len(docs)), num_perm) for i in range(0, len(docs), step)]
    with get_context("fork").Pool(workers) as pool: sig = np.concatenate(pool.map(_sig, chunks))
    t1 = time.perf_counter()
    tracemalloc.start()
    i, j = candidate_pairs(sig, bands, rows)
    lsh_peak = tracemalloc.get_traced_memory()[1]; tracemalloc.stop()
    t2 = time.perf_counter()
    return sig, (i, j), t1 - t0, t2 - t1, lsh_peak

def datasketch_run(docs, num_perm, bands, rows):
    "datasketch's batch path: 5-word shingles per document, `MinHash.bulk`, then one LSH insertion session."
    from datasketch import MinHash, MinHashLSH
    t0 = time.perf_counter()
    shingles = []
    for text in docs:
        w = re.findall(r"\w+", text.lower())
        shingles.append([" ".join(w[i:i + 5]).encode() for i in range(max(1, len(w) - 4))])
    hashes = MinHash.bulk(shingles, num_perm=num_perm)
    lsh = MinHashLSH(num_perm=num_perm, params=(bands, rows))
    with lsh.insertion_session() as session:
        for k, m in enumerate(hashes): session.insert(k, m)
    return hashes, lsh, time.perf_counter() - t0

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--datasketch-docs", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--bands", type=int, default=16)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--reps", type=int, default=MIN_RUNS, help=f"runs of each side (at least {MIN_RUNS})")
    ap.add_argument("--out", default=str(ROOT / "bench/results/dedup.json"))
    a = ap.parse_args()
    if a.reps < MIN_RUNS: ap.error(f"--reps must be at least {MIN_RUNS}")
    docs, pairs = corpus(a.docs)
    words = np.mean([len(d.split()) for d in docs[:1000]])
    print(f"{len(docs):,} documents (~{words:.0f} words), {len(pairs):,} planted near-duplicate copies; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work on the machine slows both sides)")

    n = a.datasketch_docs
    runs = {"ours": [], "ours_1_process": [], "datasketch": [], "ours_signature_s": [], "ours_lsh_s": []}
    for rep in range(a.reps):                   # alternate the sides: load from other jobs hits all of them alike
        sig, (ci, cj), t_sig, t_lsh, lsh_peak = ours(docs, a.num_perm, a.bands, a.rows, a.workers)
        runs["ours"].append(len(docs) / (t_sig + t_lsh)); runs["ours_signature_s"].append(t_sig); runs["ours_lsh_s"].append(t_lsh)
        t0 = time.perf_counter()                # the same work in this one process: a per-core figure
        sig1 = minhash_signatures(docs[: n * 4], a.num_perm); candidate_pairs(sig1, a.bands, a.rows)
        runs["ours_1_process"].append(len(sig1) / (time.perf_counter() - t0))
        ds_hashes, ds_lsh, t_ds = datasketch_run(docs[:n], a.num_perm, a.bands, a.rows)
        runs["datasketch"].append(n / t_ds)
        print(f"run {rep + 1}/{a.reps}: ours {runs['ours'][-1]:,.0f} docs/s on {a.workers} processes, "
              f"{runs['ours_1_process'][-1]:,.0f} on 1; datasketch {runs['datasketch'][-1]:,.0f} docs/s", flush=True)
    st = {k: summary(v) for k, v in runs.items()}
    ratio, ratio_1p = ratio_of_medians(st["ours"], st["datasketch"]), ratio_of_medians(st["ours_1_process"], st["datasketch"])
    print(f"ours:       {fmt(st['ours'], ',.0f', ' docs/s')} on {a.workers} processes")
    print(f"ours:       {fmt(st['ours_1_process'], ',.0f', ' docs/s')} on 1 process")
    print(f"datasketch: MinHash.bulk + MinHashLSH insertion session, {n:,} documents: {fmt(st['datasketch'], ',.0f', ' docs/s')} (1 process)")
    print(f"speed-up (ratio of medians): {ratio:.1f}x on {a.workers} processes (target >= 10x); per process {ratio_1p:.1f}x")

    # equal estimates: planted pairs inside the datasketch subset, against the exact Jaccard
    sub = [(i, j) for i, j in pairs if j < n]
    exact = np.array([exact_jaccard(docs[i], docs[j]) for i, j in sub])
    e_ours = np.array([estimate_jaccard(sig[i], sig[j]) for i, j in sub])
    e_ds = np.array([ds_hashes[i].jaccard(ds_hashes[j]) for i, j in sub])
    rmse = lambda e: float(np.sqrt(np.mean((e - exact) ** 2)))
    print(f"estimates on {len(sub)} planted pairs: bias ours {np.mean(e_ours - exact):+.4f} / datasketch {np.mean(e_ds - exact):+.4f}; "
          f"RMSE ours {rmse(e_ours):.4f} / datasketch {rmse(e_ds):.4f}; mean |ours - datasketch| {np.abs(e_ours - e_ds).mean():.4f}")
    # same candidates? planted pairs found by each LSH
    cand = set(zip(ci.tolist(), cj.tolist()))
    found_ours = np.mean([(i, j) in cand for i, j in sub])
    found_ds = np.mean([i in ds_lsh.query(ds_hashes[j]) for i, j in sub])
    print(f"planted pairs that are LSH candidates: ours {found_ours:.3f}, datasketch {found_ds:.3f}")

    # memory per million documents: signatures + band keys + one band's sort order, measured here and scaled
    per_doc_sig = sig.nbytes / len(docs)
    per_doc_lsh = lsh_peak / len(docs)
    per_million_gb = (per_doc_sig + per_doc_lsh) * 1e6 / 1e9
    print(f"memory: signatures {per_doc_sig:.0f} B/doc + LSH working set {per_doc_lsh:.0f} B/doc (tracemalloc peak) "
          f"-> {per_million_gb:.2f} GB per million documents (texts and a batch of shingles per worker not included)")

    result = {"benchmark": "fuzzy dedup: MinHash signatures + LSH, docs/s", "date": datetime.date.today().isoformat(),
              "hardware": hardware(), "docs": len(docs), "datasketch_docs": n, "workers": a.workers, "num_perm": a.num_perm,
              "bands": a.bands, "rows": a.rows, "reps": a.reps,
              "datasketch_api": "MinHash.bulk + MinHashLSH.insertion_session (default sha1_hash32)",
              "ours_docs_per_s": st["ours"], "ours_docs_per_s_1_process": st["ours_1_process"],
              "datasketch_docs_per_s": st["datasketch"], "ours_signature_s": st["ours_signature_s"], "ours_lsh_s": st["ours_lsh_s"],
              "speedup": ratio, "speedup_per_process": ratio_1p, "ratios_are": "median / median",
              "pairs_compared": len(sub), "bias_ours": float(np.mean(e_ours - exact)), "bias_datasketch": float(np.mean(e_ds - exact)),
              "rmse_ours": rmse(e_ours), "rmse_datasketch": rmse(e_ds), "mean_abs_ours_minus_datasketch": float(np.abs(e_ours - e_ds).mean()),
              "recall_candidates_ours": float(found_ours), "recall_candidates_datasketch": float(found_ds),
              "bytes_per_doc_signature": per_doc_sig, "bytes_per_doc_lsh_peak": per_doc_lsh, "gb_per_million_docs": per_million_gb,
              "load_average_1m_at_end": os.getloadavg()[0], "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out}")

if __name__ == "__main__": main()
