"""The package's import graph: layers that only look down, no cycle between packages or inside one.

Every ``import`` in eagleconv is read with ``ast`` (top-level and inside functions; not the
``if TYPE_CHECKING:`` ones, which never run), resolved to the module it loads, and grouped:
a subpackage (``eagleconv.io``, ``eagleconv.hub``...) or a top-level module (``eagleconv.drafter``)
is one group.  A group may import only from its own layer or the layers below it (``LAYERS``,
written out in docs/architecture.md), and the groups' graph has no cycle.  Inside a group,
the modules' graph has no cycle either.

The same file holds the other structural rule of issue 16: no code classifies a finding by its
message text (a finding's ``effect`` and ``runner`` are data).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "eagleconv"

# Bottom to top.  A layer's groups may import each other (the cycle check still applies) and anything below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("_version", "errors", "_extras", "_process", "_text", "jsonio", "bounds", "registry", "kernels"),  # exceptions, process state, printable text, strict JSON, size bounds
    ("io",),  # safetensors headers, reader, writer, staging, hf:// parsing
    ("rope", "nn", "config_fields", "target"),  # leaves: RoPE, shared tensor math, config field models; the target's config.json
    ("architectures",),  # one module per decoder family (a spec read as config_fields.DecoderShape)
    ("drafter",),  # DrafterSpec, which validates itself against the architecture registry
    ("canonical", "config_types"),  # canonical tensor names and shapes; the JSON type rules of config values
    ("vocab", "verifier"),
    ("report",),  # the typed reports and Finding
    ("formats",),  # one module per layout
    ("schemas",),  # config models, published JSON Schemas
    ("synthetic",),
    ("loading", "calibration"),  # checkpoint -> layout -> DrafterSpec; the calibration file
    ("engines",),  # engine profiles and their checks
    ("forward",),  # the reference forward
    ("validation",),  # validate(), lint(): engine-independent checks + engines + forward
    ("inspection", "conversion", "gguf_output", "gguf_target", "gguf_bpe_pre"),  # gguf_*: llama.cpp's draft GGUF
    ("transforms",),  # the EAGLE-3 <-> 3.1 math
    ("eagle31", "simulate", "parity", "parity_mla", "hub", "measure"),  # upgrade/downgrade, simulate, the parity tier (parity_mla: its MLA verdicts), push/pull, measure
    ("cli", "__main__", ""),  # the click layer; "" is eagleconv/__init__.py, the lazy public facade
)

# Edges issue 16 forbids although they point down: defaults live with the architectures.
FORBIDDEN = {("forward", "formats")}

@cache
def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


@cache
def imports() -> list[tuple[str, str, int, bool]]:
    """(importer, imported module, line, inside a function) for every import that runs."""
    modules = _modules()
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_nodes(tree)
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                       for n in ast.walk(f) if n is not f}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for alias in node.names:
                    if f"{source}.{alias.name}" in modules:
                        targets.append(f"{source}.{alias.name}")  # a submodule: that module, not the package
                    else:
                        targets.append(source)
            for target in dict.fromkeys(targets):
                if target.split(".")[0] != "eagleconv":
                    continue
                while target not in modules:
                    target = target.rpartition(".")[0]
                found.append((name, target, node.lineno, id(node) in in_function))
    return found


def group(module: str) -> str:
    """``eagleconv.io.reader`` -> ``io``; ``eagleconv.drafter`` -> ``drafter``; ``eagleconv`` -> ``""``."""
    return module.split(".")[1] if "." in module else ""


def edges() -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for importer, imported, line, in_function in imports():
        a, b = group(importer), group(imported)
        if a != b:
            out[(a, b)].append(f"{importer}:{line}{' (in a function)' if in_function else ''} -> {imported}")
    return out


RANK = {g: i for i, layer in enumerate(LAYERS) for g in layer}


def test_every_group_has_a_layer():
    assert {g for edge in edges() for g in edge} | {group(m) for m in _modules()} <= set(RANK), \
        "a new package or top-level module: add it to LAYERS (and to docs/architecture.md's layer order)"


def test_imports_only_look_down():
    bad = {edge: where for edge, where in edges().items()
           if (RANK[edge[0]] < RANK[edge[1]] or edge in FORBIDDEN)}
    assert not bad, "\n".join(f"{a} -> {b}: {'; '.join(w)}" for (a, b), w in sorted(bad.items()))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one group (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_cycle_between_packages():
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges():
        graph[a].add(b)
    assert not _cycles(graph)


def test_the_checks_see_a_cycle():
    """The walk is precise enough to matter: any one real edge turned round closes a cycle, and the checks see it."""
    real = sorted(edges())
    assert ("forward", "architectures") in real and ("architectures", "nn") in real  # the walk finds real links
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in real:
        graph[a].add(b)
    graph["nn"].add("forward")  # what forward/attention.py importing architectures used to do, one layer down
    assert any({"nn", "forward", "architectures"} <= set(c) for c in _cycles(graph))


def test_architectures_never_name_the_drafter_spec():
    """No import of ``eagleconv.drafter`` from the architectures, not even one for type checking: the hooks read a
    spec as config_fields.DecoderShape, so the drafter (which validates itself against the registry) sits above."""
    offenders = []
    for name, path in _modules().items():
        if group(name) != "architectures":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] == "drafter":
                offenders.append(f"{name}:{node.lineno}")
    assert not offenders


def module_graph() -> dict[str, set[str]]:
    """Module -> the modules of its own group it imports at runtime (top level or in a function)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for importer, imported, _, _ in imports():
        if importer != imported and group(importer) == group(imported) and group(importer):
            graph[importer].add(imported)
    return graph


def test_no_cycle_inside_a_package():
    """No module of a package imports, at runtime, one that imports it back, directly or round a longer loop.

    A package's ``__init__`` counts as a module of it: ``from . import register`` in a layout module and an
    ``__init__`` that imports that module at the top close a cycle.  ``if TYPE_CHECKING:`` imports never run
    and do not count; an import inside a function does (it runs, and hides the cycle until it does).
    """
    graph = module_graph()
    found = _cycles(graph)
    assert not found, "import cycles inside a package (break each: a leaf module both sides import, or the import " \
        "moved to the caller):\n" + "\n".join(
            " <-> ".join(sorted(c)) + ": " + "; ".join(f"{a} -> {b}" for a in sorted(c) for b in sorted(graph[a] & set(c)))
            for c in found)


def test_the_module_check_sees_a_cycle():
    """The walk resolves relative imports to modules: one real intra-package edge turned round is a cycle."""
    graph = module_graph()
    assert "eagleconv.io.checkpoint" in graph["eagleconv.io.reader"]  # a relative import, resolved
    assert "eagleconv.formats.base" in graph["eagleconv.formats.specforge"]
    graph["eagleconv.io.checkpoint"].add("eagleconv.io.reader")
    assert any({"eagleconv.io.reader", "eagleconv.io.checkpoint"} <= set(c) for c in _cycles(graph))


def test_no_module_over_500_lines():
    """One job to a module (issue 26): a file past 500 lines is doing several; split it by job."""
    long = sorted(f"{path.relative_to(PACKAGE.parent)}: {n} lines" for path in PACKAGE.rglob("*.py")
                  if (n := len(path.read_text().splitlines())) > 500)
    assert not long, long


def test_io_never_imports_the_hub_or_the_layouts():
    """The lowest layer reaches the hub (hf:// paths) and layout detection only through io.hooks."""
    assert not [e for e in edges() if e[0] == "io" and RANK[e[1]] > RANK["io"]]


# -- findings are data, not text ---------------------------------------------------------

def _reads_message(node: ast.AST, exceptions: set[str]) -> bool:
    """Reads some ``X.message`` where X is not an exception (``except ... as X``: EagleconvError.message is its line)."""
    return any(isinstance(n, ast.Attribute) and n.attr == "message"
               and not (isinstance(n.value, ast.Name) and n.value.id in exceptions) for n in ast.walk(node))


def test_no_finding_is_classified_by_its_text():
    """No condition tests a ``.message``: no ``"raise" in f.message``, ``.message.startswith(...)`` or a helper
    given the message to decide something (what parity._is_load_failure and _v2_only did)."""
    offenders = []
    for name, path in _modules().items():
        if name == "eagleconv.errors":
            continue  # the exceptions' own one-line message
        tree = ast.parse(path.read_text(), str(path))
        exceptions = {n.name for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.name}
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and _reads_message(node, exceptions):
                offenders.append(f"{name}:{node.lineno}: {ast.unparse(node)[:80]}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("lower", "startswith", "endswith", "find", "count", "__contains__") \
                    and _reads_message(node.func.value, exceptions):
                offenders.append(f"{name}:{node.lineno}: {ast.unparse(node)[:80]}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith("_is_") \
                    and any(_reads_message(arg, exceptions) for arg in node.args):
                offenders.append(f"{name}:{node.lineno}: {ast.unparse(node)[:80]}")
    assert not offenders, "\n".join(offenders)


# -- modules that do one job ---------------------------------------------------------------

def test_errors_holds_only_exceptions():
    """Signal handling and helper threads live in eagleconv._process; errors.py is the exception hierarchy."""
    tree = ast.parse((PACKAGE / "errors.py").read_text())
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert not functions, functions
    import eagleconv.errors as errors

    assert all(issubclass(getattr(errors, c.name), BaseException) for c in classes)
    from eagleconv._process import raise_on_termination, start_helper_thread, start_worker_pools  # noqa: F401


def test_hub_is_a_package_behind_its_init():
    """Private modules, one job each; the public names (and the monkeypatchable push internals) stay reachable."""
    import eagleconv
    import eagleconv.hub as hub

    assert (PACKAGE / "hub" / "__init__.py").is_file() and not (PACKAGE / "hub.py").exists()
    assert {"push", "pull", "PushReport", "PullReport", "MANIFEST", "STEPS", "verify_manifest", "offline",
            "is_local_path", "publish_findings", "local_path"} <= set(hub.__all__)
    assert eagleconv.push is hub.push and hub.push.__module__ == "eagleconv.hub._push"
    assert hub.local_path.__module__ == "eagleconv.io.hub_paths"  # parsing lives in io: io never imports the hub


def test_input_factory_lives_with_the_inputs():
    pytest.importorskip("torch")
    from eagleconv.forward.inputs import InputFactory
    from eagleconv.forward.run import InputFactory as still_here

    assert InputFactory is still_here and InputFactory.__module__ == "eagleconv.forward.inputs"
