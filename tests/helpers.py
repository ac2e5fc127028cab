"""Shared test utilities: comparing pytrees the way transparency promises; loading
the example scripts."""

import contextlib
import importlib.util
import pathlib
import sys

import attrs
import jax
import jax.numpy as jnp
import numpy as np

import effax as fx

EXAMPLES = pathlib.Path(__file__).parent.parent / "examples"


@contextlib.contextmanager
def counting_compiles():
    """The XLA programs JAX asks for inside the block, as a list that grows. JAX records
    the event for each one, compiled by XLA or served by the persistent compilation
    cache (which tests/conftest.py turns on): a program an earlier test compiled
    counts here as it would without the cache."""
    programs: list[str] = []

    def requested(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            programs.append(event)

    jax.monitoring.register_event_duration_secs_listener(requested)
    try:
        yield programs
    finally:
        jax.monitoring.unregister_event_duration_listener(requested)


def count_compiles(thunk):
    """How many XLA programs `thunk()` asks for (`counting_compiles`)."""
    with counting_compiles() as programs:
        thunk()
    return len(programs)


def load_example(name):
    """Run `examples/<name>.py` as a fresh module `name` (its `main` not called)."""
    if str(EXAMPLES) not in sys.path:  # the scripts import their shared `_porting`
        sys.path.append(str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses (Equinox modules) look their module up here
    spec.loader.exec_module(module)
    return module


def as_bits(leaf):
    """A NumPy array of `leaf`'s exact bits (typed keys compared by key data)."""
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    return np.atleast_1d(np.asarray(leaf))


def _compare(a, b, *, float_rtol):
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b, f"{tree_a} != {tree_b}"
    for x, y in zip(leaves_a, leaves_b, strict=True):
        x, y = as_bits(x), as_bits(y)
        assert x.dtype == y.dtype and x.shape == y.shape, (x, y)
        if float_rtol and np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, rtol=float_rtol, atol=float_rtol)
        else:
            np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8))


def assert_bitwise_equal(a, b):
    """Same structure, dtypes and shapes, and bit-identical leaves (keys included)."""
    _compare(a, b, float_rtol=0.0)


def assert_transparent(compiled, eager, *, rtol=1e-6):
    """What a compiled run must share with the eager run of the same program.

    Keys, integers and booleans bit for bit. Floating-point leaves to within a few
    ulps: XLA fuses a compiled program's arithmetic (e.g. a reduction) differently
    from op-by-op eager dispatch, which no effect system can change; the same
    program compiled two ways (nested handles, effax vs hand-plumbed) is compared
    bitwise with `assert_bitwise_equal`.
    """
    _compare(compiled, eager, float_rtol=rtol)


# --- a user-defined effect ----------------------------------------------------------


class Counter(fx.Effect["Tally"]):
    """A user-defined effect: `tick()` adds one to its handler's count."""

    def __init__(self, name):
        self.name = name

    def tick(self):
        tally = self.handler()
        tally.count = tally.count + 1


@attrs.define(eq=False)
class Tally(fx.Handler[Counter]):
    """A user-defined handler on fields: the generated code inlines it."""

    effect: Counter
    count: jax.Array = attrs.field(factory=lambda: jnp.int32(0))
    fields = fx.Fields(carry="count")

    @property
    def value(self):
        return self.count

    @classmethod
    def rebuild(cls, effect, static, const, carry):
        return cls(effect, carry)


events = Counter("events")


# A user-defined effect whose handler exports its value as static (part of the
# cache key): an unhashable value is refused by name when compiled.
class Mode(fx.Effect["ModeHandler"]):
    def get(self):
        return self.handler().config


@attrs.define(eq=False)
class ModeHandler(fx.Handler[Mode]):
    effect: Mode
    config: object
    fields = fx.Fields(static="config")

    @property
    def value(self):
        return self.config

    @classmethod
    def rebuild(cls, effect, static, const, carry):
        return cls(effect, static)
