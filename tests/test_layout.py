"""The package layout's rules, read from the source (every import, also those inside functions):
no import circle between modules, the learner apart from the application, the deployment
contract apart from the training envs."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fast_td3", "envs", "sim2real")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in (ROOT / package).rglob("*.py")}


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `path` imports anywhere in its body (`from a import b` counts as a.b
    when a.b is a module, else as a)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                     for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in modules)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(path, modules) - {name} for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def parent_packages(module: str) -> set[str]:
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def test_no_import_circle():
    graph = import_graph()
    # a package's __init__ re-exporting its modules is not a dependency of those modules on it
    graph = {name: {t for t in targets if t not in parent_packages(name)} for name, targets in graph.items()}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_learner_imports_nothing_from_the_application():
    """...nor any simulator: from `envs` only the contract (`envs.protocol`: its `EnvSpec`)."""
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith("fast_td3.learner"):
            outside = {t for t in targets if not t.startswith("fast_td3.learner") and t not in ("fast_td3", "envs.protocol")}
            assert not outside, f"{name} imports {sorted(outside)}"


def test_training_uses_analysis_only_for_pure_measurements():
    """The in-run evaluation computes gait metrics and critic diagnostics; those two modules read
    arrays, never the application, so the application can use them without a circle."""
    graph = import_graph()
    used = {t for name, targets in graph.items() if name.startswith("fast_td3.training")
            for t in targets if t.startswith("fast_td3.analysis")}
    assert used <= {"fast_td3.measures.gait_metrics", "fast_td3.measures.diagnostics"}, used
    for module in used:
        assert not {t for t in graph[module] if t.startswith(("fast_td3.training", "envs", "sim2real"))}


LAYERS = (
    ("base", ("fast_td3.files", "fast_td3.command_line", "fast_td3")),
    ("the T1 contract", ("sim2real.t1",)),
    ("envs", ("envs",)),
    ("learner", ("fast_td3.learner",)),
    ("measures", ("fast_td3.measures",)),
    ("training", ("fast_td3.training",)),
    ("analysis", ("fast_td3.analysis",)),
    ("tools", ("sim2real",)),
)
"""The packages bottom-up (docs/architecture.md): a module imports only from its own layer and the
ones below. The T1 contract (`sim2real.t1`) is the base the training envs build on; the rest of
`sim2real/` (export, the gates, watch, play, shipping) sits on top of everything."""


def layer_of(module: str) -> int:
    """The index in LAYERS of the most specific prefix naming `module`."""
    best, best_length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS"
    return best


def arrows_up(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
                  for name, targets in graph.items() for target in targets
                  if target not in parent_packages(name) and layer_of(target) > layer_of(name))


def test_no_import_points_up_the_layers():
    assert arrows_up(import_graph()) == []


def test_the_layer_check_sees_an_arrow_up():
    graph = {"sim2real.t1.joints": {"envs.protocol"}, "envs.protocol": {"sim2real.t1"},
             "fast_td3.training.runner": {"fast_td3.learner.replay", "fast_td3.analysis.report"}}
    assert arrows_up(graph) == [
        "fast_td3.training.runner (training) imports fast_td3.analysis.report (analysis)",
        "sim2real.t1.joints (the T1 contract) imports envs.protocol (envs)"]


def test_the_deployment_contract_imports_nothing_from_the_envs():
    graph = import_graph()
    contract = [name for name in graph if layer_of(name) == layer_of("sim2real.t1")]
    assert {"sim2real.t1", "sim2real.t1.control", "sim2real.t1.perturbations", "sim2real.t1.sdk"} <= set(contract)
    for name in contract:
        assert not {t for t in graph[name] if layer_of(t) > layer_of("sim2real.t1")}, name


HEAVY_LIBRARIES = frozenset({"torch", "jax", "mujoco", "onnx", "onnxruntime", "mujoco_playground", "playground",
                             "matplotlib", "isaaclab", "mjlab", "ray", "submitit", "wandb", "hydra"})
"""Libraries whose import takes seconds: a command may import a project module that needs one inside
the function that uses it, so its quick refusals and `--help` do not wait for it."""


def top_level_imports(path: Path, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(project modules, heavy libraries) the module imports when it loads (not inside a function)."""
    tree = ast.parse(path.read_text())
    nested = {id(node) for function in ast.walk(tree) if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
              for node in ast.walk(function)}
    project, heavy = set(), set()
    for node in ast.walk(tree):
        if id(node) in nested or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                     for alias in node.names]
        else:
            continue
        project.update(name for name in names if name in modules)
        heavy.update(name.split(".")[0] for name in names if name.split(".")[0] in HEAVY_LIBRARIES)
    return project, heavy


def heavy_on_load() -> dict[str, set[str]]:
    """The heavy libraries each project module loads, through the project modules it loads."""
    modules = project_modules()
    direct = {name: top_level_imports(path, modules) for name, path in modules.items()}
    loaded: dict[str, set[str]] = {}

    def visit(name: str, seen: frozenset[str]) -> set[str]:
        if name not in loaded:
            project, heavy = direct[name]
            found = set(heavy)
            for parent in parent_packages(name) | project:
                if parent in direct and parent not in seen:
                    found |= visit(parent, seen | {name})
            loaded[name] = found
        return loaded[name]

    for name in modules:
        visit(name, frozenset())
    return loaded


def hidden_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `path` imports inside a function."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    found.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                                 for a in node.names)
                elif isinstance(node, ast.Import):
                    found.update(alias.name for alias in node.names)
    return {name for name in found if name in modules}


def test_no_cross_package_import_hides_in_a_function_but_to_defer_a_heavy_library():
    """An import inside a function hides a dependency (and once hid circles). Across packages it is
    allowed only where it defers a heavy library the importing module does not load anyway."""
    modules = project_modules()
    heavy = heavy_on_load()
    hidden = sorted(
        f"{name} imports {target} in a function"
        for name, path in modules.items() for target in hidden_imports(path, modules)
        if package_of(target, modules) != package_of(name, modules) and not heavy[target] - heavy[name]
    )
    assert not hidden, hidden


def test_no_module_shadows_the_standard_library():
    import sys

    shadowing = {name for name in project_modules() if name.rsplit(".", 1)[-1] in sys.stdlib_module_names}
    assert not shadowing, shadowing


MAX_MODULE_LINES = 400
"""No module of the packages longer than this: a longer one is several concerns (split it by concern)."""


def test_no_module_is_longer_than_the_bound():
    long = {name: n for name, path in project_modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def package_of(module: str, modules: dict[str, Path]) -> str:
    """The package a module belongs to: itself for a package's `__init__`, else its parent."""
    return module if modules[module].name == "__init__.py" else module.rpartition(".")[0]


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_imports(path: Path, modules: dict[str, Path]) -> set[tuple[str, str]]:
    """(module, name) of every private name `path` takes from a project module: `from m import
    _name`, or `m._name` where `m` names a module this file imported (`import m`, `import m as
    x`, `from p import m`); a private module (`from p import _m`) counts as a private name of `p`."""
    tree = ast.parse(path.read_text())
    aliases: dict[str, str] = {}  # a local name -> the project module it stands for
    found: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module in modules and node.level == 0:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if target in modules:
                    aliases[alias.asname or alias.name] = target
                if is_private(alias.name):
                    found.add((node.module, alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            owner = ast.unparse(node.value)
            module = aliases.get(owner, owner if owner in modules else None)
            if module is not None:
                found.add((module, node.attr))
    return found


def test_no_private_name_is_imported_across_packages():
    """A helper that another package needs is public, in a home both may import (e.g.
    fast_td3/files.py); private names stay inside their package (fast_td3.learner,
    fast_td3.training, envs.playground, sim2real, ...). Tests may reach in; the packages may not."""
    modules = project_modules()
    crossing = sorted(
        f"{name} takes {module}.{private}"
        for name, path in modules.items()
        for module, private in private_imports(path, modules)
        if package_of(module, modules) != package_of(name, modules)
    )
    assert not crossing, crossing


def test_the_private_import_check_sees_both_spellings(tmp_path):
    modules = {"a.b": tmp_path / "b.py", "c.d": tmp_path / "d.py"}
    (tmp_path / "d.py").write_text("from a.b import _x, y\nimport a.b as m\nm._z()\nm.__doc__\n")
    assert private_imports(tmp_path / "d.py", modules) == {("a.b", "_x"), ("a.b", "_z")}


NEEDS_PLAYGROUND = frozenset({"envs.playground.mjx", "envs.playground.mjx_batched", "envs.playground.t1_mjx"})
"""The MJX adapter: the only modules that may need JAX or Playground to load."""
PLAYGROUND_LIBRARIES = ("ml_collections", "jax", "jaxlib", "mujoco_playground", "playground")


def test_all_but_the_mjx_adapter_load_without_playground():
    """mjlab's venv (mujoco 3.11, which Playground's mujoco 4 excludes) has neither JAX nor
    Playground: every other module, and every test file (pytest collects them all before `-m mjlab`
    deselects), must load there. Run here with those libraries blocked."""
    import json
    import subprocess
    import sys

    probe = f"""
import importlib, json, sys
sys.path.insert(0, {str(ROOT / "tests")!r})
for name in {PLAYGROUND_LIBRARIES!r}:
    sys.modules[name] = None
import pytest
failed = {{}}
for name in {sorted(project_modules()) + sorted(p.stem for p in (ROOT / "tests").glob("test_*.py"))!r}:
    try:
        importlib.import_module(name)
    except pytest.skip.Exception:
        pass
    except Exception as error:
        failed[name] = f"{{type(error).__name__}}: {{error}}"
print(json.dumps(failed))
"""
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(failed) == NEEDS_PLAYGROUND, failed  # the adapter's own failure shows the block works
