"""The package's layout, read from its imports (every import statement, function-local ones included).

Nodes are the folders under ``simforcing/`` (``data``, ``models``, ``evaluate``, ``prep``, ``bench``, ``commands``; a
sub-folder counts as its folder) and the top-level modules (``sample``, ``train``, ...). The graph must have no cycle:
no folder or module imports one that imports it back. Plus the directions the layout promises.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "simforcing"


def node_of(module: str) -> str | None:
    """``simforcing.data.synthetic.scene`` -> ``data``; ``simforcing.sample`` -> ``sample``; outside -> None."""
    parts = module.split(".")
    if parts[0] != "simforcing" or len(parts) == 1:
        return None
    return parts[1]


def module_name(path: Path, package: Path = PACKAGE) -> str:
    rel = path.relative_to(package.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, package: Path = PACKAGE) -> set[str]:
    """Absolute names of the simforcing modules ``path`` imports (``from simforcing import x`` -> simforcing.x)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            folder = package.parent / node.module.replace(".", "/")
            out.update(f"{node.module}.{a.name}" for a in node.names
                       if (folder / f"{a.name}.py").exists() or (folder / a.name).is_dir())
    return {m for m in out if m.split(".")[0] == "simforcing"}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Node -> the nodes it imports (self-imports dropped)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        src = node_of(module_name(path, package))
        if src is None:
            continue
        deps = {node_of(m) for m in imported_modules(path, package)} - {None, src}
        graph.setdefault(src, set()).update(deps)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_folder_or_module_imports_one_that_imports_it_back():
    graph = import_graph()
    assert {"data", "models", "evaluate", "prep", "bench", "commands", "sample", "train", "cli"} <= set(graph)
    assert cycles(graph) == [], cycles(graph)


def test_the_cycle_check_finds_a_cycle(tmp_path):
    pkg = tmp_path / "simforcing"
    for name, text in {"a/__init__.py": "", "a/x.py": "from simforcing.b import y\n",
                       "b/__init__.py": "", "b/y.py": "def f():\n    from simforcing.a.x import z\n",
                       "c.py": "import simforcing.a.x\n"}.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    graph = import_graph(pkg)
    assert graph == {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert cycles(graph) == [["a", "b"]]


def test_the_directions_the_layout_promises():
    graph = import_graph()
    # models/ and data/ never import each other; models/ needs only config, errors, utils and flow (the time
    # convention: Wan's timestep scale) besides itself; flow imports nothing of the package but config
    assert "data" not in graph["models"] and "models" not in graph["data"]
    assert graph["models"] <= {"config", "errors", "utils", "flow"}, graph["models"]
    assert graph.get("flow", set()) <= {"config"}, graph["flow"]
    # dataset preparation sits above both; nothing below imports it
    assert {"data", "models"} <= graph["prep"]
    assert not any("prep" in deps for node, deps in graph.items() if node in ("data", "models", "sample", "runs"))
    # evaluation depends on the sampler, never the reverse; run loading sits below both
    assert "sample" in graph["evaluate"] and "evaluate" not in graph["sample"] and "evaluate" not in graph["runs"]
    # only the command line reaches the commands (by name, from its table); the library imports neither
    assert [n for n, deps in graph.items() if "commands" in deps] == []
    assert [n for n, deps in graph.items() if "cli" in deps] == ["__main__"]


def test_no_source_file_is_hidden_by_the_ignore_rules():
    """Every file of the package is one git would commit: an ignore pattern meant for output folders (``runs/``) once
    matched ``simforcing/runs/`` and kept a new module out of every clone. Skipped outside a git checkout."""
    import shutil
    import subprocess

    import pytest

    root = PACKAGE.parent
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(["git", "ls-files", "--others", "--ignored", "--exclude-standard", "--", "simforcing",
                          "tests", "docs"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    hidden = [p for p in out if p.endswith((".py", ".md", ".json", ".yaml"))]
    assert not hidden, f"ignored by .gitignore, so absent from every clone: {hidden}"
