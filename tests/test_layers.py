"""The layers of ocw/ hold (issue 21, DESIGN.md §1): imports run one way, down
text <- providers <- context <- store <- conversation <- notebook <- widgets,
with no circle and no private name taken from another module.

The graph is read from the source (every import statement, the ones inside
functions too, since a lazy import is still a dependency), so the rule holds
for code paths no test runs. Each rule is also shown to catch a planted bug in
a copy of the tree: a check that cannot fail proves nothing.
"""
from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "ocw"
LAYERS = ("text", "providers", "context", "store", "conversation", "notebook", "widgets")  # lowest first
LEAVES = ("ocw._version",)  # imports nothing; anyone may import it


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(root: Path) -> list[tuple[str, str, str | None, int]]:
    """(importer, imported module, name taken from it or None, line) for every ocw import."""
    mods = modules(root)
    out = []
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out += [(mod, a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "ocw"]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = mod.split(".")[: len(mod.split(".")) - node.level + (1 if is_pkg else 0)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != "ocw":
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    out.append((mod, sub, None, node.lineno) if sub in mods else (mod, target, a.name, node.lineno))
    return out


def layer(mod: str) -> int | None:
    parts = mod.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def violations(root: Path) -> list[str]:
    found = []
    edges: dict[str, set[str]] = {}
    for src, dst, name, line in imports(root):
        where = f"{src}:{line} imports {dst}" + (f".{name}" if name else "")
        if dst != src:
            edges.setdefault(src, set()).add(dst)
        if src in ("ocw", "ocw.__main__") or src.startswith("ocw.bench"):
            pass  # the root wires the layers; the benchmark is a tool on top of them all
        elif dst == "ocw" or dst.startswith("ocw.bench"):
            found.append(f"{where}: the package root and the benchmark sit above every layer")
        elif dst not in LEAVES:
            s, d = layer(src), layer(dst)
            if s is None or d is None:
                found.append(f"{where}: every module belongs to a layer ({', '.join(LAYERS)})")
            elif d > s:
                found.append(f"{where}: {LAYERS[s]} may not import {LAYERS[d]}, a layer above it")
        private = name if name and name.startswith("_") and not name.startswith("__") else None
        if private is None and name is None:
            leaf = dst.rsplit(".", 1)[-1]
            same_package = dst.rsplit(".", 1)[0] == (src if src in _packages(root) else src.rsplit(".", 1)[0])
            private = leaf if leaf.startswith("_") and not leaf.startswith("__") and not same_package else None
        if private and dst != src:
            found.append(f"{where}: {private} is private to its module")
    found += [f"import circle: {' -> '.join(c)}" for c in _circles(edges)]
    return found


def _packages(root: Path) -> set[str]:
    return {m for m, p in modules(root).items() if p.name == "__init__.py"}


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_layers_hold_in_ocw():
    assert violations(PKG) == []


def test_every_layer_is_a_folder_that_says_what_it_owns_and_may_import():
    for name in LAYERS:
        init = PKG / name / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert len(doc.split()) >= 30, f"ocw/{name}/__init__.py: say what the layer owns and may import"
        assert "import" in doc, f"ocw/{name}/__init__.py: say what the layer may import"
    top = {p.stem for p in PKG.glob("*.py")}
    assert top == {"__init__", "_version"}, f"modules outside any layer: {sorted(top - {'__init__', '_version'})}"


@pytest.fixture
def tree(tmp_path):
    shutil.copytree(PKG, tmp_path / "ocw", ignore=shutil.ignore_patterns("__pycache__", "static"))
    return tmp_path / "ocw"


def _plant(tree: Path, module: str, line: str) -> None:
    path = tree / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + "\n" + line + "\n")


def test_a_planted_upward_import_is_caught(tree):
    assert violations(tree) == []
    _plant(tree, "text/i18n", "from ocw.widgets import ring")
    found = violations(tree)
    assert any("ocw.text.i18n" in v and "text may not import widgets" in v for v in found), found


def test_a_lazy_upward_import_inside_a_function_is_caught(tree):
    _plant(tree, "context/engine", "def _later():\n    from ocw.conversation.session import Session")
    assert any("context may not import conversation" in v for v in violations(tree))


def test_an_import_from_the_same_layer_is_allowed_and_a_lower_one_too(tree):
    _plant(tree, "conversation/turn", "from ocw.conversation import history\nfrom ocw.text import i18n")
    assert violations(tree) == []


def test_a_planted_circle_is_caught(tree):
    _plant(tree, "text/i18n", "from ocw.text import errors")  # errors already imports i18n
    found = violations(tree)
    assert "import circle: ocw.text.errors -> ocw.text.i18n" in found, found


def test_a_private_name_taken_from_another_module_is_caught(tree):
    _plant(tree, "widgets/chat", "from ocw.notebook.actions import _no_session")
    assert any("_no_session is private" in v for v in violations(tree))


def test_a_module_outside_the_layers_is_caught(tree):
    (tree / "loose.py").write_text("from ocw.text import i18n\n")
    assert any("ocw.loose" in v and "belongs to a layer" in v for v in violations(tree))


def test_nothing_imports_the_package_root_or_the_benchmark(tree):
    _plant(tree, "store/ids", "from ocw import __version__")
    assert any("ocw.store.ids" in v and "package root" in v for v in violations(tree))


def test_every_test_file_name_is_unique():
    """pytest imports test files by their base name (no packages under tests/): two files
    of one name in two layers stop the whole run at collection. Modules of one name in two
    layers (notebook/summarizer.py, conversation/summarizer.py) need mirrors of two names."""
    from collections import Counter
    from pathlib import Path

    names = Counter(p.name for p in (Path(__file__).resolve().parent).rglob("test_*.py"))
    assert [n for n, k in names.items() if k > 1] == []
