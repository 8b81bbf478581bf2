"""Chapter 35's `ByteLevelBPE` gives the ids `tokenizers` gives (issue 52, item 5): the split of every vetted character
as Oniguruma splits it, and the same ids on text that exercises each branch of the split and each way out of it."""

import json
from pathlib import Path
import pytest
from tokenizers import Tokenizer
from mtnlg.data import train_bpe
from mtnlg.indexed import ByteLevelBPE, batch_encoder, byte_chars, encode_documents, unvetted_chars, GPT2_SPLIT

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tok():
    texts = [json.loads(l)["text"] for l in open(ROOT / "tests/fixtures/corpus/wiki_train.jsonl")]
    return train_bpe(texts, 1000)


def _without_added_tokens(tok) -> Tokenizer:
    "The same tokenizer with `<|endoftext|>` an ordinary vocabulary entry, as `load_gpt2_tokenizer` builds GPT-2's."
    j = json.loads(tok.to_str())
    j["added_tokens"] = []
    return Tokenizer.from_str(json.dumps(j))


EDGE = [
    "",
    " ",
    "   ",
    "\n",
    "\n\n  \n",
    "a  b",
    "a \n b",
    "tabs\tand\t\tmore\t",
    "trailing   ",
    "  leading",
    "It's they're we've I'm you'll he'd IT'S 'tis ''s",
    "x's's",
    "3.14159 and 1,000,000 dollars",
    "٣٤ ١٢٣ ½ Ⅻ",
    "naïve café Ærø Straße ĳ",
    "Ελληνικά и русский",
    "日本語のテキスト、中文。",
    "“quoted” — dash… ‘single’",
    "no\u00a0break\u2009thin\u3000ideographic",
    "a\u0301 combining e\u0308",
    "<|endoftext|>",
    "before<|endoftext|>after",
    "emoji 🙂 astral 𝔘𝔫𝔦",
    "new letter \u0558 and \u088f",
    "zero\u200bwidth",
    "ctl \x1c\x1d\x1e\x1f \x85 end",
    "!!! ??? ... --- ;;; ''' \"\"\"",
    " '",
    "'",
    "a'b",
    "don't stop'n",
    "x" * 300 + " " + "ab" * 200,
]


def test_vetted_characters_split_as_tokenizers_does(tok):
    """Every character the fast path handles (all of Unicode 3.2 whose class has not changed since), in contexts where a
    letter, a number, a separator or anything else splits differently: `regex` cuts the pieces Oniguruma cuts."""
    import regex

    unvetted = unvetted_chars()
    vetted = [c for c in map(chr, range(0x30000)) if not 0xD800 <= ord(c) < 0xE000 and not unvetted.search(c)]
    assert len(vetted) == 101_524 - 20  # Unicode 3.2's characters here (private use included), less 20 whose class
    assert unvetted.search("\u02b9") and unvetted.search(
        "\u200b"
    )  # has changed since: modifier letters, zero width space
    assert unvetted.search("\u0558") and unvetted.search("🙂") and not unvetted.search("é“—…日\u00a0")
    split, chars = regex.compile(GPT2_SPLIT).findall, byte_chars()
    stand_in = lambda p: "".join(chars[b] for b in p.encode())
    for i in range(0, len(vetted), 20_000):
        text = "".join(f"{c}a{c}1 {c}a\n{c}{c} " for c in vetted[i : i + 20_000])
        assert [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)] == [stand_in(p) for p in split(text)]


@pytest.mark.parametrize("added", [True, False], ids=["trained (<|endoftext|> added)", "GPT-2 style (no added tokens)"])
def test_same_ids_as_tokenizers(tok, added):
    """Each edge case alone and all in one batch, in order, with a memory of 8 pieces (forgotten often):
    `tok.encode_batch`'s ids."""
    t = tok if added else _without_added_tokens(tok)
    assert ByteLevelBPE.fits(t) and [a["content"] for a in json.loads(t.to_str())["added_tokens"]] == (
        ["<|endoftext|>"] if added else []
    )
    texts = EDGE + [json.loads(l)["text"] for l in open(ROOT / "tests/fixtures/corpus/wiki_train.jsonl")][:12]
    want = [e.ids for e in t.encode_batch(texts)]
    fast = ByteLevelBPE(t, max_pieces=8)
    assert fast.encode_batch(texts) == want
    assert [fast.encode_batch([x])[0] for x in texts] == want and len(fast.pieces) <= 8
    assert ByteLevelBPE(t).encode_batch(texts) == want
    theirs = [x for x in texts if not fast._own(x)]  # the ways out: added token's text, unvetted characters
    assert theirs == (["<|endoftext|>", "before<|endoftext|>after"] if added else []) + [
        "emoji 🙂 astral 𝔘𝔫𝔦",
        "new letter \u0558 and \u088f",
        "zero\u200bwidth",
    ]


def test_other_tokenizers_encode_as_before(tok):
    """A tokenizer the fast path does not reproduce (here: a normalizer) keeps `encode_batch_fast`; `encode_documents`
    appends end-of-text."""
    j = json.loads(tok.to_str())
    j["normalizer"] = {"type": "Lowercase"}
    lower = Tokenizer.from_str(json.dumps(j))
    assert not ByteLevelBPE.fits(lower) and ByteLevelBPE.fits(tok)
    assert batch_encoder(lower)(EDGE) == [e.ids for e in lower.encode_batch(EDGE)]
    docs = encode_documents(tok, ["Hello world", ""])
    assert docs[0].tolist() == tok.encode("Hello world").ids + [tok.token_to_id("<|endoftext|>")] and docs[1].size == 0


def test_remembered_pieces_are_bounded(tok):
    """A piece over `longest` characters is merged each time and never held; past `max_chars` held characters all are
    forgotten."""
    t = _without_added_tokens(tok)
    fast = ByteLevelBPE(t, max_chars=40, longest=10)
    texts = ["abcdefghijklmnopqrstuvwxyz and " * 3, "one two three four five six seven eight nine ten eleven twelve"]
    assert fast.encode_batch(texts) == [e.ids for e in t.encode_batch(texts)]
    assert "abcdefghijklmnopqrstuvwxyz" not in fast.pieces and all(len(p) <= 10 for p in fast.pieces)
    assert (
        fast.held == sum(map(len, fast.pieces)) and fast.held < 40 + 10 and len(fast.pieces) < 13
    )  # forgotten at least once
