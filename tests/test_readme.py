"""The README a newcomer reads first: its first screen (40 lines) says what this is, shows one picture and gives the two
commands, the one-GPU command and the cluster command; and every command it quotes exists — each `make` target in
the Makefile, each `mtnlg` subcommand and flag in the CLI, each file it names."""

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def code_lines() -> list[str]:
    "Every line inside the README's ``` blocks and every `inline code` span, as written."
    blocks = re.findall(r"```[a-z]*\n(.*?)```", README, flags=re.S)
    return [l for b in blocks for l in b.splitlines()] + re.findall(r"`([^`\n]+)`", README)


def commands(program: str) -> list[list[str]]:
    "The argument lists of every quoted command line that runs `program` (comments and prompts removed)."
    out = []
    for line in code_lines():
        line = line.strip().removeprefix("$ ")
        words = line.split()
        if program not in words and f".venv/bin/{program}" not in words:
            continue
        try:
            argv = shlex.split(line, comments=True)
        except ValueError:
            continue
        i = next((i for i, w in enumerate(argv) if w in (program, f".venv/bin/{program}")), None)
        if i is None:
            continue  # named only in a comment
        if i and argv[0] not in ("torchrun", "python", "$(BIN)/mtnlg"):
            continue  # `mtnlg` as a word in prose-like code
        out.append(argv[i + 1 :])
    return out


def test_first_screen_is_what_a_newcomer_acts_on():
    first = README.splitlines()[:40]
    text = "\n".join(first)
    assert first[0].startswith("# mtnlg")
    assert re.search(r"!\[[^\]]+\]\((docs/figures/[^)]+\.png)\)", text), "one picture on the first screen"
    assert (ROOT / re.search(r"!\[[^\]]+\]\(([^)]+)\)", text).group(1)).is_file()
    for command in (
        "make demo",
        "make test",
        "mtnlg train --config scaled_configs/gpt-1.3b.yaml",
        "sbatch cluster/530b.sbatch",
    ):
        assert any(l.strip().startswith(command) for l in first), f"{command!r} is not among the first 40 lines"
    assert text.count("```") >= 6  # the commands and what they print, as code
    assert "## Tests" not in text and "test-full" not in text  # the inventory of test cases lives further down
    assert "\n## Tests" in README


def test_every_make_target_quoted_exists():
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), flags=re.M))
    quoted = {m for l in code_lines() for m in re.findall(r"(?:^|\s|`)make ([a-z][a-z-]*)", l)}
    assert quoted and quoted <= targets, quoted - targets


def test_every_mtnlg_command_quoted_parses():
    from mtnlg.cli import COMMANDS, _parser

    quoted = commands("mtnlg")
    assert len(quoted) > 20
    for argv in quoted:
        if not argv or argv[0].startswith("-"):
            continue  # `mtnlg --help`-like mentions
        sub = argv[0]
        assert sub in COMMANDS, f"README quotes `mtnlg {sub}`, which is not a command"
        p = _parser(sub)._subparsers._group_actions[0].choices[sub]
        known = set(p._option_string_actions)
        for a in argv[1:]:
            flag = a.split("=", 1)[0]
            if flag.startswith("--"):
                assert flag in known, f"`mtnlg {sub}` has no {flag} (README: mtnlg {' '.join(argv)})"


def test_files_the_readme_names_exist():
    named = set(
        re.findall(
            r"\b((?:scaled_configs|cluster|bench|nbs|tests|docs)/[\w./-]+\.(?:yaml|sbatch|py|ipynb|png|md))\b", README
        )
    )
    assert len(named) > 10
    missing = sorted(p for p in named if not (ROOT / p).exists() and "*" not in p)
    assert not missing, missing
