"""datatrove 0.10 on the stages that match ours, as its documentation composes them, for bench/curate.py:

1. read + extract: `WarcReader` -> an extractor step running jusText with our settings (the same library on both sides:
   datatrove ships Trafilatura, so the extractor is `BaseExtractor` with our `html_to_text`, in datatrove's sandboxed
   subprocess) -> a filter with our language id (CLD2: datatrove's `LanguageFilter` downloads a fastText model at run
   time, which this machine cannot) and our 20-word minimum -> `JsonlWriter`. The Wikipedia shards: `JsonlReader`
   (zstd) -> the same filter -> `JsonlWriter`, as ours reads them. (Our pipeline runs `justext_paragraphs`, chapter
   30's faster jusText with identical output; this side runs the library's `justext.justext`.)
2. MinHash dedup, its four stages (signatures, buckets, clusters, filter) at our 5-grams, 16 bands x 8 rows = 128
   permutations, with datatrove's own English word tokenizer (spaCy) and text normalisation.
3. tokenization: `DocumentTokenizer` with the same tokenizer file as ours, end-of-text appended, no shuffling.

    python bench/datatrove_side.py INPUT WORK TOKENIZER --tasks N --workers 2 --out timings.json

Each stage's wall-clock and CPU seconds (this process and every child it reaped: pool workers, extraction sandboxes)
go to --out as they finish; per-task seconds come from datatrove's own stats files (WORK/logs/<stage>/stats/)."""

import argparse
import json
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.extractors.base import BaseExtractor
from datatrove.pipeline.filters.base_filter import BaseFilter
from datatrove.pipeline.readers import JsonlReader, WarcReader
from datatrove.pipeline.writers import JsonlWriter
from datatrove.pipeline.dedup.minhash import (
    MinhashConfig,
    MinhashDedupSignature,
    MinhashDedupBuckets,
    MinhashDedupCluster,
    MinhashDedupFilter,
)
from datatrove.pipeline.tokens import DocumentTokenizer


class JusText(BaseExtractor):
    "The jusText library itself (`justext.justext`) with chapter 30's settings, inside datatrove's extractor sandbox."

    name = "jusText (mtnlg settings)"

    def __init__(self, timeout: float = 10):
        super().__init__(timeout)

    def extract(self, text: str) -> str:
        import justext
        import lxml.etree
        from mtnlg.extract import JUSTEXT_PARAMS, clean_unicode

        html = text.encode("utf-8", "replace")
        if not html.strip():
            return ""
        try:
            paragraphs = justext.justext(html, justext.get_stoplist("English"), encoding="utf-8", **JUSTEXT_PARAMS)
        except lxml.etree.ParserError:
            return ""
        return clean_unicode("\n".join(p.text for p in paragraphs if not p.is_boilerplate)).strip()


class EnglishWords(BaseFilter):
    "Chapter 30's language id (CLD2) and its minimum of 20 words."

    name = "CLD2 English, >= 20 words"

    def filter(self, doc) -> bool:
        from mtnlg.extract import language_of, _WORD

        return len(_WORD.findall(doc.text)) >= 20 and language_of(doc.text)[0] == "en"


def cpu_seconds() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def task_seconds(logs: Path) -> list[float]:
    "Seconds each task of a stage spent in its steps, from datatrove's per-rank stats files."
    out = []
    for f in sorted((logs / "stats").glob("*.json")):
        steps = json.loads(f.read_text())
        times = [s.get("time_stats") for s in steps]  # a step that never ran has 0, not a dict
        out.append(sum(t.get("total", 0.0) if isinstance(t, dict) else float(t or 0) for t in times))
    return out


def run(input_dir, work, tokenizer, tasks: int, workers: int, out_json) -> dict:
    input_dir, work = Path(input_dir), Path(work)
    cfg = MinhashConfig(n_grams=5, num_buckets=16, hashes_per_bucket=8)
    ex = lambda name, pipeline, n: LocalPipelineExecutor(
        pipeline=pipeline, tasks=n, workers=min(workers, n), logging_dir=str(work / "logs" / name), start_method="fork"
    )
    extracted, dedup = work / "extract", work / "dedup"
    reader = lambda: JsonlReader(str(extracted), glob_pattern="*/*.jsonl")
    stages = {
        "read+extract": [
            ex(
                "extract-cc",
                [
                    WarcReader(str(input_dir / "cc"), glob_pattern="*.warc.gz"),
                    JusText(),
                    EnglishWords(),
                    JsonlWriter(str(extracted / "cc"), output_filename="${rank}.jsonl", compression=None),
                ],
                tasks,
            ),
            ex(
                "extract-wikipedia",
                [
                    JsonlReader(str(input_dir / "wikipedia"), glob_pattern="*.jsonl.zst", compression="zstd"),
                    EnglishWords(),
                    JsonlWriter(str(extracted / "wikipedia"), output_filename="${rank}.jsonl", compression=None),
                ],
                1,
            ),
        ],
        "dedup": [
            ex("minhash-1", [reader(), MinhashDedupSignature(str(work / "minhash/signatures"), config=cfg)], tasks + 1),
            ex(
                "minhash-2",
                [MinhashDedupBuckets(str(work / "minhash/signatures"), str(work / "minhash/buckets"), config=cfg)],
                cfg.num_buckets,
            ),
            ex(
                "minhash-3",
                [MinhashDedupCluster(str(work / "minhash/buckets"), str(work / "minhash/remove_ids"), config=cfg)],
                1,
            ),
            ex(
                "minhash-4",
                [
                    reader(),
                    MinhashDedupFilter(
                        str(work / "minhash/remove_ids"),
                        exclusion_writer=JsonlWriter(str(work / "minhash/removed"), compression=None),
                    ),
                    JsonlWriter(str(dedup), output_filename="${rank}.jsonl", compression=None),
                ],
                tasks + 1,
            ),
        ],
        "tokenize": [
            ex(
                "tokenize",
                [
                    JsonlReader(str(dedup)),
                    DocumentTokenizer(
                        str(work / "tokens"),
                        tokenizer_name_or_path=str(tokenizer),
                        eos_token="<|endoftext|>",
                        shuffle_documents=False,
                    ),
                ],
                tasks + 1,
            )
        ],
    }
    result = {}
    for stage, executors in stages.items():
        t, c = time.time(), cpu_seconds()
        for e in executors:
            e.run()
        result[stage] = {
            "started": t,
            "wall_seconds": time.time() - t,
            "cpu_seconds": cpu_seconds() - c,
            "task_seconds": {Path(e.logging_dir.path).name: task_seconds(Path(e.logging_dir.path)) for e in executors},
        }
        Path(out_json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("input")
    ap.add_argument("work")
    ap.add_argument("tokenizer")
    ap.add_argument("--tasks", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    run(a.input, a.work, a.tokenizer, a.tasks, a.workers, a.out)
