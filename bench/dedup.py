"""Fuzzy-dedup throughput: our vectorized MinHash signatures + LSH on 2 processes vs datasketch's
per-document MinHash + MinHashLSH, measured in the same run, on Wikipedia passages with near-duplicates.

    python bench/dedup.py [--docs 20000] [--datasketch-docs 3000] [--workers 2]

Writes bench/results/dedup.json and prints the speed ratio, the estimate agreement, and the memory per
million documents (extrapolated from the measured sizes of the arrays the LSH phase holds)."""
import argparse, json, os, platform, re, sys, time, tracemalloc
from multiprocessing import get_context
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from mtnlg.dedup import minhash_signatures, candidate_pairs, estimate_jaccard, exact_jaccard, edit_words, EDITS

def corpus(n_docs: int, seed: int = 0) -> tuple[list[str], list[tuple[int, int]]]:
    "300-word Wikipedia passages; every 10th document is an edited copy of an earlier one. Returns texts and (source, copy) pairs."
    src = ROOT.parent / "shared/data/corpus/wikipedia_en_kilt_boolq_articles/train.jsonl"
    if not src.is_file(): src = ROOT / "tests/fixtures/corpus/wiki_train.jsonl"
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
    from datasketch import MinHash, MinHashLSH
    t0 = time.perf_counter()
    lsh, hashes = MinHashLSH(num_perm=num_perm, params=(bands, rows)), []
    for k, text in enumerate(docs):
        w = re.findall(r"\w+", text.lower())
        m = MinHash(num_perm=num_perm)
        m.update_batch([" ".join(w[i:i + 5]).encode() for i in range(max(1, len(w) - 4))])
        lsh.insert(k, m); hashes.append(m)
    return hashes, lsh, time.perf_counter() - t0

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--datasketch-docs", type=int, default=3000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--num-perm", type=int, default=128)
    ap.add_argument("--bands", type=int, default=16)
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--out", default=str(ROOT / "bench/results/dedup.json"))
    a = ap.parse_args()
    docs, pairs = corpus(a.docs)
    words = np.mean([len(d.split()) for d in docs[:1000]])
    print(f"{len(docs):,} documents (~{words:.0f} words), {len(pairs):,} planted near-duplicate copies; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work on the machine slows both sides)")

    sig, (ci, cj), t_sig, t_lsh, lsh_peak = ours(docs, a.num_perm, a.bands, a.rows, a.workers)
    ours_dps = len(docs) / (t_sig + t_lsh)
    print(f"ours:       signatures {t_sig:.2f}s + LSH {t_lsh:.2f}s on {a.workers} processes -> {ours_dps:,.0f} docs/s")

    t0 = time.perf_counter()                    # the same work in this one process: a per-core figure, robust to a busy machine
    sig1 = minhash_signatures(docs[: a.datasketch_docs * 4], a.num_perm); candidate_pairs(sig1, a.bands, a.rows)
    ours_1p = len(sig1) / (time.perf_counter() - t0)
    print(f"ours:       1 process -> {ours_1p:,.0f} docs/s")

    n = a.datasketch_docs
    ds_hashes, ds_lsh, t_ds = datasketch_run(docs[:n], a.num_perm, a.bands, a.rows)
    ds_dps = n / t_ds
    print(f"datasketch: MinHash + MinHashLSH.insert, {n:,} documents in {t_ds:.2f}s -> {ds_dps:,.0f} docs/s (1 process)")
    ratio = ours_dps / ds_dps
    print(f"speed-up: {ratio:.1f}x on {a.workers} processes (target >= 10x); per process {ours_1p / ds_dps:.1f}x")

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

    result = {"docs": len(docs), "datasketch_docs": n, "workers": a.workers, "num_perm": a.num_perm, "bands": a.bands, "rows": a.rows,
              "ours_docs_per_s": ours_dps, "ours_signature_s": t_sig, "ours_lsh_s": t_lsh, "datasketch_docs_per_s": ds_dps,
              "speedup": ratio, "ours_docs_per_s_1_process": ours_1p, "speedup_per_process": ours_1p / ds_dps, "pairs_compared": len(sub), "bias_ours": float(np.mean(e_ours - exact)), "bias_datasketch": float(np.mean(e_ds - exact)),
              "rmse_ours": rmse(e_ours), "rmse_datasketch": rmse(e_ds), "mean_abs_ours_minus_datasketch": float(np.abs(e_ours - e_ds).mean()),
              "recall_candidates_ours": float(found_ours), "recall_candidates_datasketch": float(found_ds),
              "bytes_per_doc_signature": per_doc_sig, "bytes_per_doc_lsh_peak": per_doc_lsh, "gb_per_million_docs": per_million_gb,
              "cpu_count": os.cpu_count(), "load_average_1m_at_end": os.getloadavg()[0], "python": platform.python_version(), "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out}")

if __name__ == "__main__": main()
