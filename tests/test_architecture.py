"""The package's shape: every module imports on its own, the import graph of `mtnlg/` has no cycle, the library never
imports the CLI or the test scaffolding, and importing a module changes nothing global (environment, import hooks,
warnings filters, log levels, the harness's model registry, files in the working directory)."""

import ast
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "mtnlg"
MODULES = sorted(p.stem for p in PKG.glob("*.py") if not p.stem.startswith("_"))


def imported_modules(path: Path) -> set[str]:
    "The `mtnlg` modules a source file imports, at any depth (function-level imports count too)."
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("mtnlg.")}
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 1 or mod == "mtnlg" or mod.startswith("mtnlg."):
                base = mod.split(".", 1)[1] if mod.startswith("mtnlg.") else (mod if node.level == 1 else "")
                if base:
                    out.add(base.split(".")[0])
                else:
                    out |= {a.name for a in node.names}  # `from mtnlg import testing` / `from . import x`
    return out & set(MODULES)


def import_graph() -> dict[str, set[str]]:
    return {m: imported_modules(PKG / f"{m}.py") - {m} for m in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    "A cycle as a list of modules (first == last), or None."
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return stack[stack.index(n) :] + [n]
            if n not in state and (c := visit(n)):
                return c
        state[m] = "done"
        stack.pop()
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    src = (
        "from .model import GPT\nimport mtnlg.topology as t\ndef f():\n    from mtnlg import testing\n    from "
        "mtnlg.engine import x\n"
    )
    p = PKG.parent / ".pytest_cache" / "probe.py"
    p.parent.mkdir(exist_ok=True)
    p.write_text(src)
    assert imported_modules(p) == {"model", "topology", "testing", "engine"}


def test_no_import_cycles():
    graph = import_graph()
    assert sum(map(len, graph.values())) > 30  # the graph was really read
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_imports_go_one_way():
    "Chapters never import the CLI or the test scaffolding; the CLI and the scaffolding import chapters."
    for m, deps in import_graph().items():
        if m not in ("cli", "testing"):
            assert not deps & {"cli", "testing"}, f"mtnlg.{m} imports {deps & {'cli', 'testing'}}"


def top_level_imports(path: Path) -> tuple[set[str], set[str]]:
    "(mtnlg modules, third-party modules) a file imports at module level, i.e. when it is imported."
    ours, theirs = set(), set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            for a in node.names:
                (ours.add(a.name.split(".")[1]) if a.name.startswith("mtnlg.") else theirs.add(a.name))
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 1 or mod == "mtnlg" or mod.startswith("mtnlg."):
                ours |= (
                    {mod.split(".")[1]} if mod.startswith("mtnlg.") else {mod} if mod else {a.name for a in node.names}
                )
            else:
                theirs |= {mod} | {f"{mod}.{a.name}" for a in node.names}
    return ours & set(MODULES), theirs


def third_party_closure(module: str) -> set[str]:
    "Every third-party module imported when `mtnlg.<module>` is imported (through its mtnlg imports too)."
    seen, todo, theirs = set(), [module], set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        ours, t = top_level_imports(PKG / f"{m}.py")
        theirs |= t
        todo += list(ours)
    return theirs


ALONE = textwrap.dedent("""
    import importlib, json, logging, os, sys, warnings
    for name in sys.argv[2:]:                    # the libraries this module imports, first: their effects are theirs
        try: importlib.import_module(name)
        except ImportError: pass                 # `from a import function`: not a module
    from lm_eval.api.registry import model_registry
    def snapshot():
        return {"environ": dict(os.environ), "meta_path": [type(f).__name__ for f in sys.meta_path],
                "warnings": [repr(f) for f in warnings.filters], "cwd_files": sorted(os.listdir(".")),
                "log_levels": {n: logging.getLogger(n).level for n in ("DeepSpeed", "deepspeed", "")},
                "mtnlg_registered": "mtnlg" in model_registry}
    before = snapshot()
    importlib.import_module("mtnlg." + sys.argv[1])
    after = snapshot()
    print(json.dumps({k: [str(before[k])[-400:], str(after[k])[-400:]] for k in after if after[k] != before[k]}))
""")


def _alone(module: str, third_party) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", ALONE, module, "lm_eval.api.registry", *sorted(third_party)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # ~50 s of fresh interpreters, one a module: test-full
def test_every_module_imports_alone_and_changes_nothing_global():
    "Each module in a fresh interpreter: it imports, and the environment, import hooks, warnings filters, log levels,"
    " the harness's model registry and the working directory are as before (its third-party libraries preloaded)."
    closures = [
        third_party_closure(m) for m in MODULES
    ]  # here, not in the threads: CPython 3.11's ast.parse is not thread-safe
    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(MODULES, pool.map(_alone, MODULES, closures)))
    failed = {m: r.stderr.strip().splitlines()[-1] for m, r in results.items() if r.returncode}
    assert not failed, failed
    import json

    changed = {m: json.loads(r.stdout.strip().splitlines()[-1]) for m, r in results.items()}
    assert all(c == {} for c in changed.values()), {m: c for m, c in changed.items() if c}


def test_each_name_is_defined_once():
    "No function, class or constant is defined at the top of two modules: one owner per concept (and the ones that"
    " had drifted apart — Layout, check_layout, make_optimizer, free_port, stage_params_per_rank, … — are single)."
    owners = {}
    for m in MODULES:
        for node in ast.parse((PKG / f"{m}.py").read_text()).body:
            names = (
                [node.name]
                if isinstance(node, (ast.FunctionDef, ast.ClassDef))
                else [t.id for t in node.targets if isinstance(t, ast.Name)]
                if isinstance(node, ast.Assign)
                else []
            )
            for n in names:
                if n != "__all__":
                    owners.setdefault(n, []).append(m)
    twice = {n: ms for n, ms in owners.items() if len(ms) > 1}
    assert not twice, twice
    for name, owner in {
        "Layout": "topology",
        "check_layout": "topology",
        "free_port": "topology",
        "init_distributed": "topology",
        "seed_everything": "topology",
        "launcher_env": "topology",
        "make_optimizer": "data_parallel",
        "stage_params_per_rank": "config",
        "count_parameters": "config",
        "bubble_formula": "pipeline_parallel",
        "save_checkpoint": "checkpoint",
        "train": "train",
    }.items():
        assert owners.get(name) == [owner], (name, owners.get(name))


def test_ports_come_from_one_helper():
    """Only `topology` opens sockets (its `free_port` asks the operating system for a free port); no module hard-codes a
    port."""
    import re

    for m in MODULES:
        src = (PKG / f"{m}.py").read_text()
        if m != "topology":
            assert not re.search(r"^\s*(import socket|from socket import)", src, re.M), (
                f"{m} opens sockets: use topology.free_port"
            )
        assert not re.search(r"(MASTER_PORT|master_port|port)\s*[=:]\s*['\"]?\d{4,5}\b", src), (
            f"{m} hard-codes a port number"
        )
