"""The package's import graph: the folders are the layers, they only look down, and nothing imports in a circle.

Every ``import`` in eagleconv is read with ``ast`` (top-level, inside functions, and the ``if TYPE_CHECKING:`` ones:
a type-only import that closes a circle is still a circle a reader has to hold in their head), resolved to the
module it loads, and grouped: a folder (``eagleconv.io``, ``eagleconv.spec``...) is one group, and so is each of the
few modules left at the top (``errors``, ``_text``, ``_version``, ``__main__``; ``""`` is ``eagleconv/__init__.py``).
A group may import only from the groups below it (``LAYERS``, written out in docs/architecture.md, whose
table tests/docs/test_architecture_table.py holds to the code), so the groups' graph has no cycle; inside a
group, the modules' graph has no cycle either.

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

# Bottom to top: a layer is a folder (issue 34), or one of the few modules at the top.  Each imports only from
# the layers before it.
LAYERS: tuple[str, ...] = (
    "_version",  # the version, in one place
    "_text",  # printable one-line text (the errors' messages use it)
    "errors",  # the exception hierarchy and its exit codes
    "support",  # optional extras, process state, strict JSON, size bounds, registry discovery
    "kernels",  # fused Triton RMSNorm and its PyTorch fallback (no eagleconv import)
    "io",  # safetensors and GGUF bytes, readers, the staged writer, hf:// parsing
    "rope",  # RoPE config spellings and the rotary math
    "nn",  # tensor math the architectures and the forward share
    "config",  # what config.json files state: the drafter's typed fields, the target's config
    "architectures",  # one module per decoder family (reads a spec as config_fields.DecoderShape)
    "spec",  # the canonical description: DrafterSpec, canonical names, config types, vocab, reports
    "hubread",  # reading the Hub: hf:// snapshots and their manifest, hf:// headers by bounded range reads, timeouts
    "gguf",  # llama.cpp's draft GGUF: reading, writing, its keys, the storage rules, target metadata, BPE pre-hash
    "formats",  # one module per layout
    "synthetic",  # seeded tiny drafters in every producer's layout
    "readers",  # checkpoint -> layout -> DrafterSpec, inspect, the calibration file, published schemas
    "engines",  # engine profiles, their checks and views
    "forward",  # the reference forward
    "validation",  # validate(), lint(), the vLLM parity tier's predictions
    "conversion",  # convert: source -> transform -> emit
    "eagle31",  # EAGLE-3 <-> 3.1: the maths and upgrade / downgrade
    "simulation",  # offline speculative decoding, counted as each engine counts
    "measurement",  # a served drafter's counters
    "hub",  # push / pull
    "cli",  # the click layer
    "__main__",
    "",  # eagleconv/__init__.py, the lazy public facade (it sets nothing on any module)
)

# The modules that stay at the top of the package; everything else lives in a folder named for what it holds.
TOP_LEVEL = {"__init__", "__main__", "_version", "_text", "errors"}

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


TYPE_ONLY: set[tuple[str, str, int]] = set()  # (importer, imported, line) of the ``if TYPE_CHECKING:`` imports


@cache
def imports() -> list[tuple[str, str, int, bool]]:
    """(importer, imported module, line, inside a function) for every import, type-only ones included."""
    modules = _modules()
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        type_only = _type_checking_nodes(tree)
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                       for n in ast.walk(f) if n is not f}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
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
                if id(node) in type_only:
                    TYPE_ONLY.add((name, target, node.lineno))
    return found


def group(module: str) -> str:
    """``eagleconv.io.reader`` -> ``io``; ``eagleconv.errors`` -> ``errors``; ``eagleconv`` -> ``""``."""
    return module.split(".")[1] if "." in module else ""


def edges() -> dict[tuple[str, str], list[str]]:
    out: dict[tuple[str, str], list[str]] = defaultdict(list)
    for importer, imported, line, in_function in imports():
        a, b = group(importer), group(imported)
        if a != b:
            how = " (type only)" if (importer, imported, line) in TYPE_ONLY else " (in a function)" if in_function else ""
            out[(a, b)].append(f"{importer}:{line}{how} -> {imported}")
    return out


RANK = {g: i for i, g in enumerate(LAYERS)}


def test_every_group_has_a_layer():
    assert {g for edge in edges() for g in edge} | {group(m) for m in _modules()} <= set(RANK), \
        "a new package: add it to LAYERS (and to docs/architecture.md's table and layer order)"


def test_the_top_holds_only_the_package_files():
    """A new module goes into the folder whose name says what it holds (issue 34), not beside errors.py."""
    assert {p.stem for p in PACKAGE.glob("*.py")} == TOP_LEVEL


def test_every_folder_says_what_it_holds():
    """Each package's ``__init__`` opens with a docstring: the folder's one line, read before its modules."""
    silent = [str(init.relative_to(PACKAGE.parent)) for init in PACKAGE.rglob("__init__.py")
              if not ast.get_docstring(ast.parse(init.read_text()))]
    assert not silent, silent


def test_imports_only_look_down():
    """Type-only imports included: a folder that names a type from a layer above it is in a circle with it."""
    bad = {edge: where for edge, where in edges().items()
           if (RANK[edge[0]] <= RANK[edge[1]] or edge in FORBIDDEN)}
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
    """No import of ``eagleconv.spec.drafter`` from the architectures, not even one for type checking: the hooks read a
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
    """Module -> the modules of its own group it imports (top level, in a function, or for type checking)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for importer, imported, _, _ in imports():
        if importer != imported and group(importer) == group(imported) and group(importer):
            graph[importer].add(imported)
    return graph


def test_no_cycle_inside_a_package():
    """No module of a package imports one that imports it back, directly or round a longer loop.

    A package's ``__init__`` counts as a module of it: ``from . import register`` in a layout module and an
    ``__init__`` that imports that module at the top close a cycle.  An import inside a function counts (it runs,
    and hides the cycle until it does), and so does an ``if TYPE_CHECKING:`` one (engines/base.py naming
    view.DrafterView while view.py builds on base.py was one: the two types now live together).
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
    """The lowest layer never reaches up: hf:// is resolved above it (hubread), layout detection is a parameter."""
    assert not [e for e in edges() if e[0] == "io" and RANK[e[1]] > RANK["io"]]


def test_nothing_is_wired_at_import():
    """No hooks (issue 34): ``eagleconv/__init__.py`` assigns to no other module's attribute, and ``io/hooks.py``,
    the callables it used to set, is gone; what a lower layer needs is passed in or lives below it."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    assigned = [ast.unparse(target) for node in ast.walk(tree) if isinstance(node, ast.Assign | ast.AugAssign)
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(target, ast.Attribute)]
    assert not assigned, assigned
    assert not (PACKAGE / "io" / "hooks.py").exists()


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
    """Signal handling and helper threads live in eagleconv.support._process; errors.py is the exception hierarchy."""
    tree = ast.parse((PACKAGE / "errors.py").read_text())
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert not functions, functions
    import eagleconv.errors as errors

    assert all(issubclass(getattr(errors, c.name), BaseException) for c in classes)
    from eagleconv.support._process import raise_on_termination, start_helper_thread, start_worker_pools  # noqa: F401


def test_hub_is_a_package_behind_its_init():
    """Private modules, one job each; the public names (and the monkeypatchable push internals) stay reachable."""
    import eagleconv
    import eagleconv.hub as hub

    assert (PACKAGE / "hub" / "__init__.py").is_file() and not (PACKAGE / "hub.py").exists()
    assert {"push", "pull", "PushReport", "PullReport", "MANIFEST", "STEPS", "verify_manifest", "offline",
            "is_local_path", "publish_findings", "local_path"} <= set(hub.__all__)
    assert eagleconv.push is hub.push and hub.push.__module__ == "eagleconv.hub._push"
    assert hub.local_path.__module__ == "eagleconv.hubread.download"  # the read half lives below the readers
    assert hub.parse_hf_url.__module__ == "eagleconv.io.hub_paths"  # parsing lives in io: io never imports the hub


def test_input_factory_lives_with_the_inputs():
    pytest.importorskip("torch")
    from eagleconv.forward.inputs import InputFactory
    from eagleconv.forward.run import InputFactory as still_here

    assert InputFactory is still_here and InputFactory.__module__ == "eagleconv.forward.inputs"
