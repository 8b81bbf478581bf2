"""Generation tokens/s: chapter 62's loop with the KV cache, the same loop recomputing the whole sequence per token,
and Hugging Face `generate` (greedy, its own KV cache) on the exported model (chapter 44) — same prompts, same number
of new tokens, one thread, in one run.

    .venv/bin/python bench/generate.py [--checkpoint DIR] [--new-tokens 64] [--batch 4] [--repeats 5] [--threads 1]
                                       [--save]

Each variant runs --repeats times (>= 5, interleaved); tokens/s is reported as median, min and max, ratios are of
medians; with --save also writes bench/results/generate-cpu-<date>.json. All three must produce the same greedy tokens
(checked: the comparison is of the same work).
"""

import argparse
import datetime
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from stats import summary, ratio_of_medians, fmt, hardware, MIN_RUNS

PROMPTS = [
    "The river flooded the valley after three days of heavy rain",
    "In 1887 the",
    "Music of the",
    "A committee of",
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", help="a checkpoint (default: train the tiny config for 60 steps)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4, help="prompts per call (the first N of four)")
    ap.add_argument("--repeats", type=int, default=MIN_RUNS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save", action="store_true")
    args = ap.parse_args(argv)
    if args.repeats < MIN_RUNS:
        ap.error(f"--repeats must be >= {MIN_RUNS}")
    import torch
    import transformers
    from mtnlg.checkpoint import load_checkpoint, check_checkpoint
    from mtnlg.config import load_config
    from mtnlg.export_hf import export_hf
    from mtnlg.generate import generate

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp())
    ckpt = args.checkpoint
    if ckpt is None:
        from mtnlg.train import train

        ckpt = train(
            load_config(ROOT / "scaled_configs/tiny.yaml", {"schedule.train_iters": 60}), work / "run", progress=False
        ).checkpoint
    ckpt = check_checkpoint(ckpt)
    model, tok, cfg = load_checkpoint(ckpt)
    hf = transformers.GPT2LMHeadModel.from_pretrained(export_hf(ckpt, work / "hf")).eval()
    prompts = [tok.encode(p).ids for p in PROMPTS[: args.batch]]
    eot = tok.token_to_id("<|endoftext|>")
    longest = max(map(len, prompts))
    ids = torch.tensor([[eot] * (longest - len(p)) + p for p in prompts])
    mask = (torch.arange(longest)[None] >= torch.tensor([longest - len(p) for p in prompts])[:, None]).long()

    def ours(cache):
        return generate(model, prompts, args.new_tokens, use_cache=cache)

    @torch.no_grad()
    def theirs():
        out = hf.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            do_sample=False,
            pad_token_id=eot,
            use_cache=True,
        )
        return out[:, longest:].tolist()

    variants = {
        "ours, KV cache": lambda: ours(True),
        "ours, recomputed": lambda: ours(False),
        "Hugging Face generate": theirs,
    }
    outputs = {k: f() for k, f in variants.items()}  # warm-up, and the tokens compared
    same = outputs["ours, KV cache"] == outputs["ours, recomputed"] == outputs["Hugging Face generate"]
    times = {k: [] for k in variants}
    for _ in range(args.repeats):
        for k, f in variants.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    n_tokens = args.new_tokens * len(prompts)
    rates = {k: summary([n_tokens / t for t in v]) for k, v in times.items()}
    for k, s in rates.items():
        print(f"{k:24s} {fmt(s, '.0f', ' tokens/s')}")
    ratios = {
        "cache / recomputed": ratio_of_medians(rates["ours, KV cache"], rates["ours, recomputed"]),
        "cache / Hugging Face": ratio_of_medians(rates["ours, KV cache"], rates["Hugging Face generate"]),
    }
    for k, r in ratios.items():
        print(f"{k}: {r:.2f}x (medians)")
    print(f"same greedy tokens from all three: {same}")
    if not same:
        raise SystemExit("the three variants generated different tokens: the comparison is not of the same work")
    if args.save:
        out = ROOT / "bench" / "results" / f"generate-cpu-{datetime.date.today()}.json"
        out.write_text(
            json.dumps(
                {
                    "date": str(datetime.date.today()),
                    "hardware": hardware(threads=args.threads),
                    "config": "scaled_configs/tiny.yaml",
                    "prompts": len(prompts),
                    "new_tokens": args.new_tokens,
                    "tokens_per_s": rates,
                    "ratios_of_medians": ratios,
                    "same_tokens": same,
                },
                indent=1,
            )
        )
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
