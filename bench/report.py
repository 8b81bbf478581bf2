"""Write the README's measured figures from bench/results/*.json, so that no number in it is typed by hand.

    python bench/report.py            # rewrite README.md's block between <!-- bench:begin --> and <!-- bench:end -->
    python bench/report.py --check    # exit 1 (and show the difference) if README.md is not what the JSONs say

Inside the block, the table rows that name a benchmark script (`bench/...py`) are generated here from the newest
result of each benchmark: medians of at least 5 runs with min–max beside them, ratios of medians. The other rows
(claims that tests assert, not benchmarks) are kept as they are.
"""

import argparse
import difflib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from stats import ratio_interval
from engine import break_even_ms

RESULTS = ROOT / "bench" / "results"
README = ROOT / "README.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def newest(pattern: str) -> tuple[Path, dict]:
    files = sorted(RESULTS.glob(pattern))
    if not files:
        raise SystemExit(f"no bench/results/{pattern}: run the benchmark first")
    return files[-1], json.loads(files[-1].read_text())


def rng(s: dict, spec: str) -> str:
    "`median (min–max)` of a summary."
    return f"{s['median']:{spec}} ({s['min']:{spec}}–{s['max']:{spec}})"


def rows() -> list[str]:
    out = []
    _, e = newest("engine-*.json")
    o = e["overhead"]
    cpu = f", {o['cpu_ratio']:.3f}× in CPU time" if "cpu_ratio" in o else ""
    hw = e["hardware"]  # the ratio moves with the machine: a fixed per-step overhead against its compute
    machine = f", {hw['cpu_model']} with {hw['cpu_capability']}" if hw.get("cpu_model") else ""
    extra = (
        f"; the engine's extra time {o['extra_ms_per_step']['median']:.1f} ms a step (paired steps), so ≥ "
        f"{o['target_ratio']}× wherever the plain step takes ≥ {break_even_ms(o):.0f} ms (here "
        f"{o['plain_step_ms']:.0f})"
        if "extra_ms_per_step" in o
        else ""
    )
    interval = ratio_interval(o["engine_tokens_per_s"]["values"], o["plain_tokens_per_s"]["values"])
    out.append(
        f"| engine tokens/s vs plain PyTorch loop, 1 process (`bench/engine.py`, {e['date']}{machine}) | "
        f"{o['ratio']:.3f}× (95% bootstrap interval {'–'.join(format(x, '.3f') for x in interval)}){cpu}: "
        f"{rng(o['engine_tokens_per_s'], ',.0f')} vs {rng(o['plain_tokens_per_s'], ',.0f')} tokens/s, "
        f"{o['engine_tokens_per_s']['runs']} steps each{extra} | ≥ {o.get('target_ratio', 0.9)}× |"
    )
    for part in dict.fromkeys(x.get("partition", "uniform") for x in e["bubble"]):
        b = {x["micro_batches"]: x for x in e["bubble"] if x.get("partition", "uniform") == part}
        first = next(iter(b.values()))
        model = first["model"]
        what = (
            f"{part} stages (flat layers {first['stage_bounds']} of {model['model.num_layers']} blocks, hidden size "
            f"{model['model.hidden_size']}, vocabulary {model['model.vocab_size']})"
            if "stage_bounds" in first
            else "tiny"
        )
        out.append(
            f"| PP 2 bubble, {what}, m = {' / '.join(map(str, b))} micro-batches (`bench/engine.py`) | "
            + " / ".join(f"{x['measured_bubble']['median']:.2f}" for x in b.values())
            + f" (medians of {first['measured_bubble']['runs']} steps; the same 1F1B schedule with the measured "
            + "stage times: "
            + " / ".join(f"{x['formula_with_measured_stage_times']['median']:.2f}" for x in b.values())
            + ") | "
            + " / ".join(f"{x['formula']:.2f}" for x in b.values())
            + " ((p−1)/(m+p−1), equal stages) |"
        )
    _, d = newest("dedup-2*-cpu.json")  # not dedup-scale-*: bench/dedup_scale.py's
    r, q = d["ratios"], d["docs_per_s"]
    out.append(
        f"| dedup, text to duplicate groups (signatures, LSH, verification, components) vs datasketch and rensa "
        f"(`bench/dedup.py`, {d['date']}, load average {d['load_avg_1min']['median']:.1f}) | "
        f"{rng(q['ours'], ',.0f')} docs/s on {d['threads']} threads ({rng(q['ours_1_thread'], ',.0f')} on 1; "
        f"{d['ours_1_thread_docs_per_cpu_second']['median']:,.0f} per CPU-second): "
        f"{r['ours / datasketch']:.0f}× datasketch, {r['ours / rensa']:.1f}× rensa, "
        f"{r['ours / numpy_twin']:.1f}× the numpy twin, "
        f"{d['reps']} runs; estimate RMSE ours {d['rmse']['ours']:.3f}, datasketch {d['rmse']['datasketch']:.3f}, "
        f"rensa {d['rmse']['rensa']:.3f}; {d['memory']['gb_per_million_docs_signature_and_index']:.2f} GB "
        f"signatures + index "
        f"per million documents | ≥ 100,000 docs/s on 2 cores |"
    )
    out += curate_rows()
    out += curate_speed_rows()
    _, v = newest("eval-*-cpu.json")
    out.append(
        f"| eval log-likelihood requests/s vs lm-eval `hf` backend (`bench/eval.py`, {v['date']}) | "
        f"{v['ratio']:.2f}×: {rng(v['ours_requests_per_s'], ',.0f')} vs "
        f"{rng(v['hf_requests_per_s'], ',.0f')} requests/s, "
        f"{v['ours_requests_per_s']['runs']} runs of {v['requests']} requests | ≥ 2× |"
    )
    if v.get("model_parallel"):
        rows = "; ".join(
            f"{r['layout'].replace(' x ', '×').replace('TP ', 'TP').replace('PP ', 'PP').replace('DP ', 'DP')} "
            f"{rng(r['requests_per_s'], ',.0f')} ({v['model_parallel_vs_hf'][k]:.2f}× hf, "
            f"{v['model_parallel_vs_one_process_2_threads'][k]:.2f}× one process on 2 threads)"
            for k, r in v["model_parallel"].items()
        )
        worst = max(r["max_abs_loglikelihood_diff"] for r in v["model_parallel"].values())
        out.append(
            f"| the model read split over 2 processes of 1 thread (chapter 65; `bench/eval.py`, "
            f"{v['date']}), requests/s | "
            f"{rows}; one process on 2 threads {rng(v['ours_2_threads_requests_per_s'], ',.0f')}; answers within "
            f"{worst:.0e} of one process's, greedy flags equal | ≥ 2× hf (not met on 2 cores: splitting a "
            f"0.7M model costs more "
            f"in messages than it saves) |"
        )
    _, m = newest("memory-cpu-*.json")
    ratios = [st["ratio"] for r in m["runs"] for st in r["stages"]]
    dps = sorted({r["layout"]["dp"] for r in m["runs"]})
    modes = list(dict.fromkeys(r["recompute"] for r in m["runs"]))
    chunks = sorted({r.get("loss_chunk", 0) for r in m["runs"]})
    chunked = (
        f", loss over whole logits and in chunks of {'/'.join(str(c) for c in chunks if c)} tokens"
        if len(chunks) > 1
        else ""
    )
    out.append(
        f"| memory model vs measurement (CPU): stage peaks of a TP2×PP2 step, DP {'/'.join(map(str, dps))}, "
        f"{'/'.join(modes)}{chunked} (`bench/memory.py`, {m['date']}) | measured/predicted, medians per stage "
        f"{min(x['median'] for x in ratios):.2f}–{max(x['median'] for x in ratios):.2f}; every launch "
        f"{min(x['min'] for x in ratios):.2f}–{max(x['max'] for x in ratios):.2f} ({m['reps']} launches "
        f"each) | within 10% |"
    )
    _, c = newest("checkpoint-cpu-*.json")
    s, w = c["save"], c["load"]["warm"]
    resume = (
        f"; resume adds {c['resume']['resume_overhead_s']:.2f} s (medians of {c['resume_reps']})"
        if "resume" in c
        else ""
    )
    out.append(
        f"| checkpoint save / load, {s['bytes_per_shard'] / 1e6:,.0f} MB shard (`bench/checkpoint.py`, {c['date']}) | "
        f"save {s['ratio_vs_torch_save_fsync']:.2f}× `torch.save`+fsync "
        f"({rng(s['gb_per_s_runs']['ours'], '.2f')} GB/s); "
        f"load (warm) {w['ratio_vs_torch_load']:.2f}× `torch.load` ({rng(w['gb_per_s_runs']['ours'], '.2f')} GB/s), "
        f"{c['reps']} runs{resume}"
        + (
            f"; checksums (xxh3-64): save ×{s['checksum_cost']:.3f}, load warm ×{w['checksum_cost']:.3f}, cold "
            f"×{c['load']['cold']['checksum_cost']:.3f} the time without them"
            if "checksum_cost" in w
            else ""
        )
        + (
            f"; a resume (step chosen, model built, weights copied in, checksums' verdict) with checksums checked "
            f"while the model is built: warm ×{c['resume_path']['warm']['checksum_cost']:.3f}, cold "
            f"×{c['resume_path']['cold']['checksum_cost']:.3f} (hashing first: "
            f"×{c['resume_path']['warm']['verify_first_cost']:.3f}, "
            f"×{c['resume_path']['cold']['verify_first_cost']:.3f})"
            if "resume_path" in c
            else ""
        )
        + f" | {'checksums ≤ 1.05× on load' if 'checksum_cost' in w else '—'} |"
    )
    _, g = newest("generate-*.json")
    t = g["tokens_per_s"]
    out.append(
        f"| generation tokens/s, {g['prompts']} prompts × {g['new_tokens']} new tokens, KV cache vs recomputation and "
        f"Hugging Face `generate` on the exported model (`bench/generate.py`, {g['date']}) | "
        f"{g['ratios_of_medians']['cache / recomputed']:.2f}× recomputation, "
        f"{g['ratios_of_medians']['cache / Hugging Face']:.2f}× HF: "
        f"{rng(t['ours, KV cache'], ',.0f')} vs {rng(t['ours, recomputed'], ',.0f')} vs "
        f"{rng(t['Hugging Face generate'], ',.0f')} "
        f"tokens/s, {t['ours, KV cache']['runs']} runs; same greedy tokens: "
        f"{'yes' if g['same_tokens'] else 'NO'} | > 1× |"
    )
    gpu = newest_gpu()
    # bench/kernels.py's end-to-end steps stay until a bench/gpu.py run has measured the kernel choices on the recipe
    measured_kernels = gpu is not None and any(
        r["name"].startswith("kernels=") and "tokens_per_s" in r for r in gpu[1]["rows"]
    )
    out += kernel_rows(with_model=not measured_kernels) + (gpu_rows(gpu[1]) if gpu else [])
    return out


def curate_rows() -> list[str]:
    "Curation against datatrove, from the newest bench/curate.py result (none before it has run)."
    if not sorted(RESULTS.glob("curate-*.json")):
        return []
    _, c = newest("curate-*.json")
    L, sizes = c["sizes"]["large"], c["sizes"]
    r = L["ours_vs_datatrove"]
    per = "; ".join(f"{k} {v['ours_faster_x']:.2f}×" for k, v in r.items() if not k.startswith("matching"))
    e2e = r["matching stages, end to end"]
    mem = " / ".join(
        f"{s['ours']['rss']['worker_max_bytes'] / 2**20:,.0f} MiB "
        f"({s['input']['shard_bytes_target'] / 1e6:.0f} MB shards)"
        for s in sizes.values()
    )
    q, dq = L["ours"]["dedup_quality"], L["datatrove"]["dedup_quality"]
    return [
        f"| curation of {L['input']['warc_bytes'] / 1e9:.2f} GB of `.warc.gz` "
        f"({L['input']['html_pages']:,} pages), ours vs datatrove "
        f"0.10 on the matching stages, same input, same run, {c['workers']} workers (`bench/curate.py`, "
        f"{c['date']}; one run per size: "
        f"medians over shards in the JSON) | end to end {e2e['ours_faster_x']:.2f}× ({e2e['ours_s']:,.0f} "
        f"vs {e2e['datatrove_s']:,.0f} s); "
        f"{per}; our whole pipeline (quality, decontamination, blend too) {L['ours']['wall_seconds']:,.0f} "
        f"s; our largest worker "
        f"{mem}; dedup recall at Jaccard ≥ 0.8 ours {q['recall']:.3f} / datatrove {dq['recall']:.3f}, precision "
        f"{q['precision']:.3f} / {dq['precision']:.3f}; dedup planning "
        f"{L['ours']['dedup_index']['bytes_per_doc']:,.0f} B per document | "
        f"≥ 1.5× end to end, ≥ 1× per stage |"
    ]


def curate_speed_rows() -> list[str]:
    "Issue 52's before/after rows of extraction and decontamination (`bench/curate.py --speed-rows`), once measured."
    runs = [json.loads(f.read_text()) for f in sorted(RESULTS.glob("curate_speed-*.json"))]
    both = [x for x in runs if "decontaminate" in x["speed_before_after"]]
    tokenize = [x for x in runs if "tokenize" in x["speed_before_after"]]  # its own row
    if not both:
        return curate_tokenize_row(tokenize[-1]) if tokenize else []
    s = both[-1]
    r = s["speed_before_after"]
    per_gb = lambda x: (
        f"{x['before_cpu_s_per_gb_warc']:,.0f} → {x['after_cpu_s_per_gb_warc']:,.0f} CPU-s per GB of `.warc.gz`"
    )
    later = [
        x for x in runs[runs.index(s) + 1 :] if "extract" in x["speed_before_after"]
    ]  # extraction's next steps, each its own run
    steps = "".join(
        f"; extraction since ({x['date']}, its own run): {x['speed_before_after']['extract']['speedup_x']:.2f}× more "
        f"({per_gb(x['speed_before_after']['extract'])}, {x['speed_before_after']['reps']} interleaved runs against "
        f"{x['speed_before_after']['before'].removeprefix('mtnlg at ')[:7]}, output byte identical)"
        for x in later
    )
    e2e = ""
    if "pipeline_vs_datatrove_1gb" in s:
        m = s["pipeline_vs_datatrove_1gb"]["ours_vs_datatrove"]["matching stages, end to end"]
        e2e = (
            f"; after it, on 1 GB, ours then datatrove on the same input: matching stages end to end "
            f"{m['ours_faster_x']:.2f}× "
            f"({m['ours_s']:,.0f} vs {m['datatrove_s']:,.0f} s; the previous run's 3.68×)"
        )
    elif "pipeline_1gb" in s:
        q = s["pipeline_1gb"]
        e2e = (
            f"; after it, `mtnlg curate` on 1 GB: matching stages {q['ours_matching_stages_s']:,.0f} s (previous run "
            f"{q['previous_run']['ours_matching_stages_s']:,.0f} s), datatrove not re-run in the same run "
            f"(the previous run's "
            f"{q['previous_run']['datatrove_matching_stages_s']:,.0f} s would make it "
            f"{q['not_same_run_ratio']:.1f}×: not a same-run ratio)"
        )
    return [
        f"| curation stages before/after the speed work of issue 52 (`bench/curate.py --speed-rows`, {s['date']}: "
        f"{s['input']['warc_shards']} crawl shard of {s['input']['warc_bytes'] / 1e6:.0f} MB, {r['reps']} "
        f"interleaved runs, medians of CPU "
        f"seconds, a loaded machine) | decontamination (count + cut) "
        f"{r['decontaminate']['speedup_x']:.1f}× ({per_gb(r['decontaminate'])}); "
        f"extraction {r['extract']['speedup_x']:.2f}× ({per_gb(r['extract'])}); every output byte "
        f"identical{e2e}{steps} | ≥ 4× decontamination; "
        f"≥ 5× datatrove end to end |"
    ] + (curate_tokenize_row(tokenize[-1]) if tokenize else [])


def curate_tokenize_row(s: dict) -> list[str]:
    "Issue 52 item 5: the tokenize stage before/after (`bench/curate.py --speed-rows --speed-stages tokenize`)."
    t = s["speed_before_after"]["tokenize"]
    return [
        f"| curation's tokenize stage before/after issue 52 item 5 (`bench/curate.py --speed-rows "
        f"--speed-stages tokenize`, {s['date']}: "
        f"the 0.25 GB run's {t['shards']} curated shards, {t['input_bytes'] / 1e6:.0f} MB, "
        f"{s['speed_before_after']['reps']} interleaved runs "
        f"in one process each, medians, a loaded machine) | {t['speedup_x']:.2f}× CPU "
        f"({t['before_cpu_s']:.1f} → {t['after_cpu_s']:.1f} CPU-s, "
        f"{t['before_mb_per_cpu_s']:.1f} → {t['after_mb_per_cpu_s']:.1f} MB per CPU-s), "
        f"{t['wall_speedup_x']:.2f}× wall; every .bin/.idx byte "
        f"identical ({t['outputs_compared']} files) | ≥ 1.5× |"
    ]


def kernel_rows(with_model: bool = True) -> list[str]:
    """Chapter 20 on a GPU (`bench/kernels.py`): the Triton kernels at gpt-1.3b's shapes, and — until `bench/gpu.py` has
    measured `mtnlg train` itself (`with_model` false) — its end-to-end step, which is not the recipe."""
    files = sorted(RESULTS.glob("kernels-*.json"))
    if not files:
        return []
    k = json.loads(files[-1].read_text())
    gpu = k["hardware"]["gpu"].replace("NVIDIA ", "")
    at = {(r["kernel"], r["variant"]): r for r in k["kernels"] if r["shape"] == "gpt-1.3b" and "error" not in r}
    parts = []
    for name, label in (
        ("softmax", "softmax"),
        ("bias_gelu", "bias+GeLU"),
        ("bias_dropout_add", "bias+dropout+add"),
        ("layer_norm", "LayerNorm"),
        ("attention", "attention"),
    ):
        t = at[(name, "triton")]["fwd_bwd_s"]
        eager = at[(name, "eager (SDPA)" if name == "attention" else "eager")]["fwd_bwd_s"]
        rel = f"{eager['median'] / t['median']:.2f}× eager" + (" SDPA" if name == "attention" else "")
        if (name, "compile") in at:
            rel += f", {at[(name, 'compile')]['fwd_bwd_s']['median'] / t['median']:.2f}× compile"
        busy = at[(name, "triton")].get("fraction_of_peak_gpu_busy")
        parts.append(f"{label} {rel}" + (f" ({busy:.0%} of HBM peak while busy)" if busy else ""))
    out = [
        f"| chapter 20 Triton kernels, fwd+bwd, bf16, gpt-1.3b shapes, 1 {gpu} (`bench/kernels.py`, {k['date']}) | "
        + "; ".join(parts)
        + f" (speed-ups: ratios of medians of {t['runs']} runs) | ≥ 1× eager, ≥ 0.9× compile, ≥ 70% of HBM peak |"
    ]
    if not with_model:
        return out
    m = {(r["config"], r["kernels"]): r for r in k["model"] if "error" not in r}
    for config in dict.fromkeys(c for c, _ in m):
        best = max((r for (c, _), r in m.items() if c == config), key=lambda r: r["mfu"])
        out.append(
            f"| {config} step on 1 {gpu} per `model.kernels`, *not the recipe*: pure bf16 weights and fused AdamW (no "
            f"fp32 masters), no clipping, one micro-batch of random tokens, dropout {best['dropout']:g} "
            f"(`bench/kernels.py`) | MFU "
            + " / ".join(f"{r['mfu']:.1%}" for (c, _), r in m.items() if c == config)
            + " ("
            + " / ".join(kk for c, kk in m if c == config)
            + "): "
            + " / ".join(f"{r['tokens_per_s']['median']:,.0f}" for (c, _), r in m.items() if c == config)
            + f" tokens/s, medians of {best['tokens_per_s']['runs']} steps; best: {best['kernels']} | — |"
        )
    return out


def newest_gpu() -> tuple[Path, dict] | None:
    "The newest `bench/gpu.py` result measured on a GPU (a dry run's JSON, written with --out, never counts), or None."
    for path in sorted(RESULTS.glob("gpu-*.json"), reverse=True):
        g = json.loads(path.read_text())
        if not g.get("dry_run"):
            return path, g
    return None


def predicted_now(row: dict, g: dict) -> float:
    "Chapter 50's `stage_memory` (no reserve), as the package computes it today, for the config a row ran."
    from gpu import load, predicted_gib

    return predicted_gib(load(row.get("config", g["config"]), row["overrides"]))


def by_kind(prof: dict) -> dict:
    """A profile's kernel seconds by kind, its top kernels classified by today's `gpu.kernel_kind` (a result can predate
    a fix)."""
    from gpu import kernel_kind

    out = dict(prof["by_kind_s"])
    for k in prof["top_kernels"]:
        if kernel_kind(k["name"]) != k["kind"]:
            out[k["kind"]] -= k["s"]
            out[kernel_kind(k["name"])] = out.get(kernel_kind(k["name"]), 0.0) + k["s"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def gpu_rows(g: dict) -> list[str]:
    """`bench/gpu.py` on one GPU: `mtnlg train` with the recipe — the default path against Hugging Face GPT-2 (compiled,
    eager) and the one-process loop where measured; the levers, one at a time; where a step's time goes; peak memory
    against chapter 50's prediction (recomputed here from today's model); determinism and its cost."""
    rows = {r["name"]: r for r in g["rows"]}
    dev = g["device"].replace("NVIDIA ", "")
    ok = lambda n: n in rows and "tokens_per_s" in rows[n]

    def tps(n):
        return f"{rows[n]['tokens_per_s']['median']:,.0f}" if ok(n) else "—"

    def mfu(n, key="mfu"):
        return f"{rows[n][key]['median']:.1%}" if ok(n) and rows[n].get(key) else "—"

    def x(n, key="vs_default"):
        return (
            f"{rows[n][key]:.2f}×"
            if ok(n) and rows[n].get(key)
            else ("skipped" if n in rows and "skipped" in rows[n] else "not measured")
        )

    steps = next((r["tokens_per_s"]["runs"] for r in g["rows"] if "tokens_per_s" in r), 0)
    shape = f"{g['config'].split('/')[-1].removesuffix('.yaml')}, {g['global_batch']} × {g['seq']} tokens a step"
    src = f"`bench/gpu.py`, {g['date']}"
    out = []
    if ok("default"):
        d = rows["default"]
        anchor = f"{1 / rows['hf-compile']['vs_default']:.2f}×" if ok("hf-compile") else "not measured"
        out.append(
            f"| {shape}, `mtnlg train` on 1 {dev} with the paper's recipe (bf16 weights, fp32 masters and "
            f"Adam, clipping, "
            f"dropout) ({src}) | default path ({d['backend']}): {tps('default')} "
            f"({d['tokens_per_s']['min']:,.0f}–{d['tokens_per_s']['max']:,.0f}) tokens/s, MFU {mfu('default')}, "
            f"micro-batch {d['micro_batch']}; {anchor} Hugging Face GPT-2 compiled ({tps('hf-compile')} tokens/s, MFU "
            f"{mfu('hf-compile')}, micro-batch {rows.get('hf-compile', {}).get('micro_batch', '—')})"
            + "".join(
                f"; {label} {x(n)} the default's"
                for n, label in (("single", "one-process loop"), ("hf-eager", "HF eager"))
                if ok(n)
            )
            + f"; medians of {steps} steps | ≥ 55% MFU, ≥ 1.3× HF compiled |"
        )
    levers = [
        n
        for n in (
            "compile_blocks",
            "attention=cudnn",
            "attention=flash",
            "attention=efficient",
            "compile_blocks+cudnn",
            "loss_chunk=4096",
            "micro=4",
            "kernels=compile",
            "kernels=triton",
            "recompute=selective",
            "recompute=full",
            "deterministic",
        )
        if ok(n)
    ]
    if levers:

        def lever(n):
            r, mem = rows[n], ""
            if r.get("max_allocated_gib") and ok("default") and rows["default"].get("max_allocated_gib"):
                delta = r["max_allocated_gib"]["max"] - rows["default"]["max_allocated_gib"]["max"]
                mem = f", {delta:+.1f} GiB" if abs(delta) >= 0.5 else ""
            return f"{n} {r['vs_default']:.2f}×{mem}" + (" (another machine of the kind)" if r.get("machine") else "")

        out.append(
            f"| levers, one at a time against that default, same run ({src}) | "
            + "; ".join(lever(n) for n in levers)
            + " | — |"
        )
    for name, what in (("profile", "the default"), ("profile:compile_blocks", "the default with compiled layers")):
        prof = rows.get(name, {}).get("profile")
        if prof and prof.get("kernel_s"):
            kinds = "; ".join(f"{k} {v:.2f} s ({v / prof['wall_s']:.0%})" for k, v in by_kind(prof).items())
            out.append(
                f"| where one step of {what} goes, `torch.profiler` on 1 {dev} ({src}) | "
                f"{prof['wall_s']:.2f} s: {kinds}; "
                f"no kernel running {prof['idle_s']:.2f} s ({prof['idle_s'] / prof['wall_s']:.0%}) | — |"
            )
    mem_rows = [
        n
        for n in (
            "default",
            "recompute=selective",
            "recompute=full",
            "125m:recompute=none",
            "125m:recompute=selective",
            "125m:recompute=full",
        )
        if ok(n) and rows[n].get("max_allocated_gib")
    ]
    if mem_rows:

        def case(n):
            r = rows[n]
            name = f"{Path(r.get('config', g['config'])).stem} {r['overrides'].get('model.recompute', 'none')}"
            measured, predicted = r["max_allocated_gib"]["max"], predicted_now(r, g)
            return f"{name} {measured:.1f}/{predicted:.1f} ({measured / predicted:.3f})"

        out.append(
            f"| peak allocated memory, measured / chapter 50's `stage_memory` without its reserve, "
            f"micro-batch × sequence "
            f"16,384 tokens, on 1 {dev} ({src}) | " + "; ".join(case(n) for n in mem_rows) + " GiB | within 5% |"
        )
    det = g.get("determinism")
    if det and "error" not in det:
        word = lambda c: (
            "bitwise"
            if c["bitwise"]
            else f"differ ({c['tensors_differing']} of {c['tensors_compared']} tensors, ≤ "
            f"{c['largest_difference']:.1e})"
        )
        cost = (
            f"; with the switch {shape.split(',')[0]} trains at {g['deterministic_cost']:.2f}× the default's tokens/s"
            if g.get("deterministic_cost")
            else ""
        )
        out.append(
            f"| `deterministic: true` on 1 {dev}, {det['config'].split('/')[-1].removesuffix('.yaml')}, "
            f"{det['steps']} steps: "
            f"two runs, and kill -9 + `--resume auto` (`bench/gpu.py`) | {word(det['deterministic']['two_runs'])} / "
            f"{word(det['deterministic']['kill9_resume'])} (every tensor of the last checkpoint, every "
            f"random stream, every "
            f"step's loss); without the switch two runs {word(det['default']['two_runs'])}{cost} | bitwise |"
        )
    return out


NOTE = (
    "Rows naming a `bench/` script are written by `bench/report.py` from `bench/results/*.json` (`--check` fails if "
    "they are stale): the median of at least 5 runs, min–max in parentheses, ratios of medians. The machine is shared "
    "with other jobs, so absolute rates move with their load; the other rows are what tests assert."
)


def render(block: str) -> str:
    "The new block: the note, then the table with its benchmark rows regenerated in place (or appended)."
    table = [l for l in block.splitlines() if l.startswith("|")]
    if len(table) < 2:
        raise SystemExit("README.md: no table between the bench markers")
    new, kept, at = rows(), table[:2], None
    for l in table[2:]:
        if "`bench/" in l.split("|")[1]:
            if at is None:
                at = len(kept)
        else:
            kept.append(l)
    at = len(kept) if at is None else at
    return "\n".join([NOTE, "", *kept[:at], *new, *kept[at:]])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if README.md differs from what bench/results says")
    ap.add_argument("--readme", default=str(README))
    a = ap.parse_args(argv)
    text = Path(a.readme).read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise SystemExit(f"{a.readme}: needs exactly one {BEGIN} ... {END} block around the measured table")
    head, rest = text.split(BEGIN)
    block, tail = rest.split(END)
    want = f"{head}{BEGIN}\n{render(block)}\n{END}{tail}"
    if want == text:
        print("README.md measured figures match bench/results")
        return 0
    if a.check:
        sys.stdout.writelines(
            difflib.unified_diff(text.splitlines(True), want.splitlines(True), "README.md", "from bench/results")
        )
        print("README.md is stale: run `python bench/report.py`", file=sys.stderr)
        return 1
    Path(a.readme).write_text(want)
    print(f"rewrote the measured figures in {a.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
