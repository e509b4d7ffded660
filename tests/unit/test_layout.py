"""The layout's rules, read from the source: no string in the runtime package names an acceptance
test (a rename must not silently change the plan), and the package has no import cycle (imports
for type checking only are left out: they do not run)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "pytest_gpucluster"
ACCEPTANCE = Path(__file__).resolve().parents[2] / "tests" / "acceptance"


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _runtime_imports(path: Path, name: str, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in found if m in known and m != name}


def test_no_import_cycle():
    modules = _modules()
    graph = {name: _runtime_imports(path, name, set(modules)) for name, path in modules.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    # A package importing its own submodules (``__init__`` re-exports) is not a cycle of the layout.
    real = [c for c in cycles if not all(m.startswith(c[0] + ".") or m == c[0] for m in c)]
    assert not real, "\n".join(" -> ".join(c) for c in real)


def test_no_string_in_src_names_an_acceptance_test():
    tests = {
        node.name
        for path in ACCEPTANCE.glob("test_*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }
    assert len(tests) > 30
    named = [
        f"{path.relative_to(SRC.parent)}: {node.value!r}"
        for path in SRC.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and any(t in node.value for t in tests)
    ]
    assert not named, named


def test_the_planner_imports_no_pytest_no_slurm_no_session():
    modules = _modules()
    banned = {"pytest", "pytest_gpucluster.session", "pytest_gpucluster.slurm", "pytest_gpucluster.launch"}
    found = {
        name: sorted(
            m
            for m in _runtime_imports(path, name, set(modules) | banned)
            if m in banned or m.startswith("pytest_gpucluster.launch")
        )
        for name, path in modules.items()
        if name.startswith("pytest_gpucluster.plan")
    }
    assert found and not any(found.values()), found
