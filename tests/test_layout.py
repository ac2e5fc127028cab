"""The package's layout rules (effax/README.md): layers, one module touching JAX
internals, module sizes."""

import ast
import pathlib
import re

EFFAX = pathlib.Path(__file__).parent.parent / "effax"

LAYERS = [
    {"_trace", "_errors"},
    {"_context", "_context_var", "_threefry", "_arguments", "_entries", "_fields", "_naming"},
    {"_protocol", "_effect"},
    {"_ask", "_state", "_state_dict", "_random_key", "_emit", "_intercept", "_recorder"},
    {
        "_tap",
        "_handlers",
        "_plan",
        "_boundary",
        "_visible",
        "_writeback",
        "_plumb",
        "_warmpath",
        "_uses",
        "_discrete",
    },
    {"_inside", "_environment", "_snapshot"},
    {"_region", "_program"},
    {"_explain"},
    {"_callpath"},
    {"_handle"},
    {"_eager"},
    {"_control", "_transforms", "_grad", "random"},
    {"_nnx_grad"},
    {"nnx"},
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


def top_level_names(path):
    """A module's top-level names: (defined, type aliases, imported). Defined are
    its functions, classes and constants; type aliases (`X = tuple[...]`, `X =
    Any`) may be listed in `__all__` or not; imported names may be listed as
    re-exports."""
    defined, aliases, imported = set(), set(), set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.ImportFrom):
            imported.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            value = node.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) in {
                "TypeVar",
                "ParamSpec",
            }:
                continue
            alias = isinstance(value, (ast.Subscript, ast.BinOp)) or (
                isinstance(value, ast.Name) and value.id == "Any"
            )
            (aliases if alias else defined).update(names)
    public = lambda names: {n for n in names if not n.startswith("_")}
    return public(defined), public(aliases), public(imported)


def declared_all(path):
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return None


def test_every_all_lists_exactly_the_module_public_names():
    """A module's `__all__` lists what it defines without a leading underscore:
    nothing missing, nothing stale (a listed name is defined, a type alias, or
    re-exported)."""
    for path in [*modules(), *sorted((EFFAX.parent / "effax_stubs").glob("*.py"))]:
        if path.stem == "__init__":
            continue
        declared = declared_all(path)
        assert declared is not None, f"{path.name} has no __all__"
        defined, aliases, imported = top_level_names(path)
        assert defined <= declared, f"{path.name}: missing {sorted(defined - declared)}"
        stale = declared - defined - aliases - imported
        assert not stale, f"{path.name}: lists {sorted(stale)}, which it does not define"


def test_the_call_path_map_names_real_functions():
    """Every `module:function` step of effax/README.md's call-path map exists."""
    import importlib
    import re

    text = (EFFAX / "README.md").read_text()
    steps = re.findall(r"`(_\w+):([\w.]+)`", text.split("## The call path", 1)[1])
    assert len(steps) >= 20
    for module, name in steps:
        obj = importlib.import_module(f"effax.{module}")
        for part in name.split("."):
            assert hasattr(obj, part), f"effax.{module}:{name} does not exist"
            obj = getattr(obj, part)


def test_the_package_all_lists_every_re_export():
    """`effax.__all__` (what the table of bad arguments in tests/test_misuse.py
    walks) lists exactly the names effax/__init__.py re-exports, and __version__."""
    path = EFFAX / "__init__.py"
    exported = {"__version__"}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            exported.update(a.asname for a in node.names if a.asname)
    assert set(declared_all(path)) == exported


# Reading a JAX object's internals: its closure's variables by name (how `jax.jit`'s
# options are found), `jax.core` (private, or deprecated for a public replacement),
# `jax._src`, private attributes of JAX objects that effax once read. Only `_trace`
# does, self-tested at import. `_callpath` reads the cell of effax's own generated
# entry function (its environment), never a JAX object's.
_INTERNALS_READS = (
    "co_freevars",
    "__closure__",
    "cell_contents",
    "jax.core.",
    "_src",
    "._impl",  # a key dtype's PRNG implementation
    ".key_shape",  # and its key data's shape
)
_OWN_CLOSURES = {"_callpath": ("__closure__", "cell_contents")}


def test_only_trace_reads_jax_internals():
    for path in modules():
        if path.stem == "_trace":
            continue
        code = "\n".join(
            line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")
        )
        allowed = _OWN_CLOSURES.get(path.stem, ())
        found = [w for w in _INTERNALS_READS if w in code and w not in allowed]
        assert not found, f"{path.name} reads JAX internals ({found}): move it to _trace.py"


def readme_layers():
    """effax/README.md's layer table: module -> layer."""
    text = (EFFAX / "README.md").read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    table = {}
    for row in re.findall(r"^\| *(\d+) *\|([^|]*)\|", text, flags=re.MULTILINE):
        layer, cell = row
        for module in re.findall(r"`(\w+)`", cell):
            assert module not in table, f"effax/README.md lists {module} twice"
            table[module] = int(layer)
    return table


def test_the_internals_map_lists_every_module_in_its_layer():
    """effax/README.md's layer table names every module of effax/, each in the layer
    `LAYERS` gives it (the rule the import test checks)."""
    assert readme_layers() == LAYER


def test_the_top_level_readme_layout_lists_every_module():
    text = (EFFAX.parent / "README.md").read_text().split("## Layout", 1)[1]
    listed = set(re.findall(r"^effax/(\w+)\.py", text, flags=re.MULTILINE))
    assert listed == {p.stem for p in modules()} | {"__init__"}


def test_one_helper_compares_structure_shapes_and_dtypes():
    """`_boundary.signature` is the one description of a pytree's structure, shapes
    and dtypes (carries, cond branches' emits, snapshots); no module keeps its own."""
    for path in modules():
        defined = {
            n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)
        }
        assert not {"_signature", "_describe"} & defined, f"{path.name}: use _boundary.signature"
    assert "signature" in top_level_names(EFFAX / "_boundary.py")[0]


# --- interceptors cross traced boundaries as static wrappers (issue 40, item 2) -------

# The hooks a handler crosses a traced boundary with, and those of the families
# (taps, differentiation, snapshots) that `Interceptor` once mirrored to forward.
_CROSSING_HOOKS = {
    "export",
    "rebuild",
    "outcome",
    "absorb",
    "batch_export",
    "batch_absorb",
    "align_branch",
    "stacks_in_program_order",
    "check_absorb",
    "differentiates",
    "begin_probe",
    "perturbations",
    "perturb",
    "with_cotangents",
    "snapshot",
    "snapshot_like",
    "check_snapshot",
    "restore",
    "forwarded_to",
}


def _class_members(path, name):
    """The names a class of the module at `path` defines in its body."""
    (cls,) = [
        n
        for n in ast.parse(path.read_text()).body
        if isinstance(n, ast.ClassDef) and n.name == name
    ]
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)} | {
        t.id
        for n in cls.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }


def test_interceptor_defines_no_crossing_hook():
    """What an interceptor chain reaches crosses; the chain is re-made around it
    inside from static wrappers (`_intercept.chain_of`, `Plan`)."""
    import effax

    defined = _class_members(EFFAX / "_intercept.py", "Interceptor")
    assert not defined & _CROSSING_HOOKS, sorted(defined & _CROSSING_HOOKS)
    assert not set(vars(effax.Interceptor)) & _CROSSING_HOOKS
    assert "forwarded_to" not in _class_members(EFFAX / "_protocol.py", "Handler")


def test_the_warm_path_reads_nothing_of_interceptors():
    """`_warmpath` reads and writes the plumbed handlers alone (a chain's target):
    it imports nothing of `_intercept` and decodes no interceptor's export."""
    path = EFFAX / "_warmpath.py"
    imported = {
        node.module or ""
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
    } | {
        alias.name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert not {"_intercept", "Interceptor", "chain_of"} & imported, imported
    code = path.read_text()
    for word in ("_intercept", "Interceptor", "forwarded_to", "delegate", "static[-1]"):
        assert word not in code, f"_warmpath.py mentions {word!r}"


# --- one small protocol: general members only, capabilities discovered by class (issue 40)

# `Handler`'s public members, each meaningful for any handler. What serves one family
# is a capability protocol beside the code that drives it (`_control.Records`,
# `_grad.Differentiating`, `_snapshot.SnapshotsPart` / `ChecksSnapshots`,
# `_protocol.RefusesOutcomes`, `_boundary.GrowingCarry`).
HANDLER_MEMBERS = {
    "effect",
    "value",
    "fields",
    "export",
    "rebuild",
    "outcome",
    "absorb",
    "batch_export",
    "batch_absorb",
    "snapshot",
    "restore",
    "outer",
    "forwards",
    "batch_distinct",
}


def test_handler_has_at_most_fourteen_public_members():
    import effax

    public = {
        name
        for cls in effax.Handler.__mro__
        if cls.__module__.startswith("effax")
        for name in [*vars(cls), *getattr(cls, "__annotations__", {})]
        if not name.startswith("_")
    }
    assert public == HANDLER_MEMBERS, (
        sorted(public - HANDLER_MEMBERS),
        sorted(HANDLER_MEMBERS - public),
    )
    assert len(HANDLER_MEMBERS) <= 14


def test_capabilities_are_protocols_beside_their_drivers():
    """Each capability is a runtime-checkable Protocol asked of a handler's class
    (`issubclass(type(h), P)`: never through an instance's `__getattr__`, which an
    interceptor forwards), and the handlers of its family implement it."""
    from effax import _boundary, _control, _grad, _protocol, _snapshot
    from effax._random_key import KeyStream
    from effax._recorder import GradientRecorder, Recorder
    from effax._state_dict import StateDictCell
    from effax._tap import Replacer

    cases = [
        (_control.Records, [Recorder, GradientRecorder]),
        (_grad.Differentiating, [GradientRecorder]),
        (_protocol.RefusesOutcomes, [GradientRecorder, Replacer]),
        (_snapshot.SnapshotsPart, [StateDictCell]),
        (_snapshot.ChecksSnapshots, [KeyStream]),
        (_boundary.GrowingCarry, [StateDictCell]),
    ]
    import effax

    plain = [effax.StateCell, effax.Collector, effax.Interceptor]
    for protocol, family in cases:
        assert all(issubclass(c, protocol) for c in family), protocol
        assert not any(issubclass(c, protocol) for c in plain), protocol


# what generic modules may not do: switch on a value's exact type, or on whether a
# handler's class overrides a method (`_protocol.derives` asks it once, for `fields`)
_SNIFFING = re.compile(
    r"type\([^)]*\) is (not )?dict|\.overrides\(|getattr\(\w+, \w+\) is not getattr\(Handler"
)
# the handler families' own modules, which may inspect their own values
_FAMILY_MODULES = {"_state_dict", "_random_key", "_recorder", "_tap", "_entries", "_trace"}


def test_generic_modules_do_not_sniff_types_or_overrides():
    for path in modules():
        if path.stem in _FAMILY_MODULES:
            continue
        found = _SNIFFING.findall(path.read_text())
        assert not found, f"{path.name} sniffs a type or an override: use a capability"
