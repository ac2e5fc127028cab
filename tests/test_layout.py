"""The package's layout rules (effax/README.md): layers, one module touching JAX
internals, module sizes."""

import ast
import pathlib

EFFAX = pathlib.Path(__file__).parent.parent / "effax"

LAYERS = [
    {"_trace", "_errors"},
    {"_context", "_threefry"},
    {"_protocol", "_effect"},
    {"_ask", "_state", "_random_key", "_emit"},
    {"_handlers", "_region", "_plumb", "_warmpath", "_uses", "_discrete"},
    {"_environment", "_snapshot"},
    {"_program"},
    {"_explain"},
    {"_callpath"},
    {"_handle"},
    {"_control", "_transforms", "random"},
]
LAYER = {module: i for i, layer in enumerate(LAYERS) for module in layer}


def runtime_imports(path):
    """Modules imported at run time: `import x`, `from x import y`, `from . import y`
    and `from .x import y` at module level, outside `if TYPE_CHECKING:`."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.add(node.module)
            elif node.module:
                found.add("." + node.module)
            else:
                found.update("." + alias.name for alias in node.names)
    return found


def modules():
    return sorted(p for p in EFFAX.glob("*.py") if p.stem != "__init__")


def test_every_module_has_a_layer():
    assert {p.stem for p in modules()} == set(LAYER)


def test_modules_import_only_from_layers_above():
    for path in modules():
        for name in runtime_imports(path):
            if name.startswith("."):
                dep = name[1:]
                assert LAYER[dep] < LAYER[path.stem], (
                    f"{path.stem} (layer {LAYER[path.stem]}) imports {dep} (layer {LAYER[dep]})"
                )


def test_only_trace_imports_jax_internals():
    for path in modules():
        internal = [n for n in runtime_imports(path) if n.startswith("jax._src")]
        source = path.read_text()
        if path.stem == "_trace":
            assert internal
        else:
            assert not internal, path
            assert "import jax._src" not in source and "from jax._src" not in source, path


def test_no_module_over_500_lines():
    files = [*EFFAX.glob("*.py"), *(EFFAX.parent / "effax_stubs").glob("*.py")]
    sizes = {p.name: len(p.read_text().splitlines()) for p in files}
    assert max(sizes.values()) <= 500, sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
