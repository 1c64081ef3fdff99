"""The package's layout, read from its imports (every import statement, function-local ones included).

Two graphs. The folder graph: nodes are the folders under ``simforcing/`` (``data``, ``models``, ``evaluate``,
``prep``, ``bench``, ``commands``; a sub-folder counts as its folder) and the top-level modules (``sample``,
``train``, ...); no folder or module imports one that imports it back, and the directions the layout promises hold.

The module graph (:func:`module_graph`): nodes are the modules (a package is its ``__init__``), and an edge is every
import statement of a module wherever it stands — at the top, inside a function (a lazy import), under ``if
TYPE_CHECKING:`` (a type is a dependency too). The rules:

- ``import a.b.c`` depends on ``a.b.c``; ``from a.b import n`` depends on ``a.b`` (the statement reads its
  namespace) and on ``a.b.n`` when that is a module;
- a package's module-level ``__getattr__`` (PEP 562: ``simforcing.__getattr__`` serves ``WorldModelPipeline`` and the
  rest of ``simforcing.api`` without importing torch at ``import simforcing``) runs on a look-up in its namespace, so
  its imports are the package's own edges: ``simforcing`` depends on ``simforcing.api``, the top floor;
- the packages Python initialises on the way to a module (``simforcing``, ``simforcing.evaluate`` before
  ``simforcing.evaluate.run``) are not edges: their ``__init__`` runs first whatever the module imports, and a
  package's ``__init__`` may gather its own modules (``simforcing.demo``, ``simforcing.policy.estimate``).

So nothing in the package may import *from the package root* (``from simforcing import parallel`` reads the root's
namespace, and the root reaches the top floor: a module that ``simforcing.api`` needs would close a circle through
it): a module imports the module it needs (``import simforcing.parallel as parallel``,
``from simforcing.version import __version__``). Users' ``from simforcing import WorldModelPipeline`` stays as it is.
The graph has no circle at all (:func:`test_no_module_imports_one_that_imports_it_back`).
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



def _modules(package: Path) -> dict[str, Path]:
    return {module_name(path, package): path for path in sorted(package.rglob("*.py"))}


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _lazy_function(tree: ast.Module) -> ast.FunctionDef | None:
    """A module's PEP 562 ``__getattr__``, if it has one."""
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "__getattr__"), None)


def module_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that the module ``name`` (its file ``path``) imports, by the rules of the module
    docstring: every import statement wherever it stands."""
    out: set[str] = set()

    def add(target: str) -> None:
        if target in modules and target != name:
            out.add(target)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, one level up per extra dot
                pkg = name.split(".") if _is_package(path) else name.split(".")[:-1]
                pkg = pkg[:len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            add(base)
            for a in node.names:
                add(f"{base}.{a.name}")
    return out


def module_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (module docstring); a package's ``__getattr__`` imports are
    among its own."""
    modules = _modules(package)
    return {name: module_imports(name, path, modules) for name, path in modules.items()}


def lazy_names(package: Path = PACKAGE) -> tuple[str, ...]:
    """The names the package root serves through its ``__getattr__`` (the ``_API`` of ``simforcing/__init__.py``)."""
    tree = ast.parse((package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_API" for t in node.targets):
            return ast.literal_eval(node.value)
    return ()


def test_no_module_imports_one_that_imports_it_back():
    """Module by module, lazy and type-checking imports included: no circle (the module docstring's rules)."""
    graph = module_graph()
    assert {"simforcing", "simforcing.api", "simforcing.training.checks", "simforcing.fidelity"} <= set(graph)
    assert "simforcing.api" in graph["simforcing"]  # the lazy API is an edge of the root, counted
    assert cycles(graph) == [], cycles(graph)


def test_nothing_in_the_package_imports_from_its_root():
    """The root reaches the top floor (its ``__getattr__`` imports ``simforcing.api``): a module of the package that
    read a name from it would hang the whole floor below ``api`` on it. Users' ``from simforcing import X`` works."""
    graph = module_graph()
    assert sorted(n for n, deps in graph.items() if "simforcing" in deps) == []
    assert graph["simforcing"] <= {"simforcing.api", "simforcing.version"}, graph["simforcing"]
    import simforcing
    from simforcing import WorldModelPipeline, api

    getattr_imports = module_imports("simforcing", PACKAGE / "__init__.py", _modules(PACKAGE)) - {"simforcing.version"}
    assert getattr_imports == {"simforcing.api"}  # what __getattr__ serves comes from the API module alone
    served = lazy_names()
    assert "WorldModelPipeline" in served and set(served) <= set(simforcing.__all__) & set(dir(simforcing))
    # a name a subpackage also holds would be the subpackage once it is imported (``simforcing.evaluate`` was)
    assert not [n for n in served if (PACKAGE / n).is_dir() or (PACKAGE / f"{n}.py").is_file()]
    assert WorldModelPipeline is api.WorldModelPipeline
    assert all(getattr(simforcing, n) is getattr(api, n) for n in served)


def test_the_module_cycle_check_sees_lazy_type_checking_and_root_imports(tmp_path):
    """A circle closed by a function-local import, one held open only by a TYPE_CHECKING import, and one through a
    package's lazy ``__getattr__`` — each found; a package gathering its own modules is not a circle."""
    pkg = tmp_path / "simforcing"
    files = {"__init__.py": "def __getattr__(name):\n    from simforcing import top\n    return top.f\n",
             "top.py": "from simforcing.low import x\n",
             "low.py": "from simforcing import helper\n",  # reads the root's namespace: back to top
             "helper.py": "",
             "a.py": "def f():\n    import simforcing.b\n",
             "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from simforcing.a import f\n",
             "g/__init__.py": "from simforcing.g.m import y\n", "g/m.py": "from .n import z\n", "g/n.py": "",
             "plain.py": "import simforcing.helper as helper\n"}
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    graph = module_graph(pkg)
    assert graph["simforcing.low"] == {"simforcing", "simforcing.helper"}
    assert graph["simforcing.plain"] == {"simforcing.helper"} and graph["simforcing.g.m"] == {"simforcing.g.n"}
    assert cycles(graph) == [["simforcing", "simforcing.low", "simforcing.top"], ["simforcing.a", "simforcing.b"]]


# ----------------------------------------------------------------------------------------------------------------------
# Typed records at the seams
# ----------------------------------------------------------------------------------------------------------------------

SEAMS = ("policy", "evaluate", "demo", "sample.py", "rollout.py", "api.py", "fidelity.py")
MAX_BARE_DICT_RETURNS = 30  # issue 57 (46 counted there); by this rule 42 before its typed records, 28 after


def _bare_dict(ann: ast.expr | None) -> bool:
    """``dict``, ``"dict"``, ``Optional[dict]`` or ``dict | None``: a dict whose keys and values say nothing."""
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value, mode="eval").body
        except SyntaxError:
            return False
    if isinstance(ann, ast.Name):
        return ann.id == "dict"
    if isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "Optional":
        return _bare_dict(ann.slice)
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        none = [isinstance(x, ast.Constant) and x.value is None for x in (ann.left, ann.right)]
        return (none[1] and _bare_dict(ann.left)) or (none[0] and _bare_dict(ann.right))
    return False


def _returns_dict_literal(fn: ast.FunctionDef) -> bool:
    return any(isinstance(r, ast.Return) and (isinstance(r.value, (ast.Dict, ast.DictComp)) or (
        isinstance(r.value, ast.Call) and isinstance(r.value.func, ast.Name) and r.value.func.id == "dict"))
        for r in ast.walk(fn))


def bare_dict_returns(package: Path = PACKAGE) -> list[str]:
    """The public functions and methods at the seams (``SEAMS``: ``policy/``, ``evaluate/``, ``demo/``, ``sample``,
    ``rollout``, ``api``) that hand back a bare dict: annotated ``-> dict`` (``_bare_dict``), or unannotated and
    returning a dict literal. Public: the name does not start with ``_`` (methods of a private class count: their
    callers see the dict all the same). Not counted: ``to_json`` (a typed record's JSON form, the point of a record)
    and ``dict[K, V]``, a mapping whose keys and values are named (task -> scenes, metric -> values)."""
    files = [f for s in SEAMS for f in ((package / s).rglob("*.py") if (package / s).is_dir() else [package / s])
             if f.is_file()]
    found = []

    def visit(body: list, owner: str, path: Path) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, f"{owner}{node.name}.", path)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_") \
                    and node.name != "to_json":
                if _bare_dict(node.returns) or (node.returns is None and _returns_dict_literal(node)):
                    found.append(f"{path.relative_to(package)}:{owner}{node.name}")

    for f in sorted(files):
        visit(ast.parse(f.read_text(), str(f)).body, "", f)
    return found


def test_few_bare_dicts_cross_the_seams():
    """Results cross the seams of ``policy/``, ``evaluate/``, ``demo/``, ``sample``, ``rollout`` and ``api`` as
    typed records (``to_json`` / ``from_json``), not as dicts whose keys only the reader knows."""
    found = bare_dict_returns()
    assert len(found) <= MAX_BARE_DICT_RETURNS, "\n".join(found)
    assert not [f for f in found if f.startswith("fidelity.py") or "fidelity_section" in f], found


def test_the_dict_count_sees_annotations_and_literals(tmp_path):
    pkg = tmp_path / "simforcing"
    (pkg / "evaluate").mkdir(parents=True)
    (pkg / "evaluate" / "x.py").write_text(
        "from typing import Optional\n"
        "def a() -> dict: ...\ndef b() -> Optional[dict]: ...\ndef c() -> 'dict | None': ...\n"
        "def d():\n    return {'k': 1}\ndef e() -> dict[str, int]: ...\ndef _f() -> dict: ...\n"
        "class R:\n    def to_json(self) -> dict: ...\n    def g(self) -> dict: ...\n")
    (pkg / "other.py").write_text("def h() -> dict: ...\n")
    assert bare_dict_returns(pkg) == [f"evaluate/x.py:{n}" for n in ("a", "b", "c", "d", "R.g")]


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
    # the fidelity of a world model reads what evaluate/ and policy/ wrote; only the demo, its command and the docs'
    # tables (the recorded curve, through its typed reader) read it
    assert {"evaluate", "policy"} <= graph["fidelity"]
    assert sorted(n for n, deps in graph.items() if "fidelity" in deps) == ["commands", "demo", "docs_tables"]
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
