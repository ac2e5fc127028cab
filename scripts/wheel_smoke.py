"""The smoke program of scripts/wheel_smoke.sh: effax as a user gets it from its wheel.

Run by the fresh environment's python from a directory outside the checkout, with the
version the checkout declares: ``python wheel_smoke.py 0.3.0``.
"""

import importlib.metadata
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

import effax as fx
import effax_stubs.mypy_plugin as mypy_plugin

expected = sys.argv[1]
package = Path(fx.__file__).resolve().parent
environment = Path(sys.prefix).resolve()

# installed from the wheel into this environment (not an editable install of a checkout)
for module in (fx, mypy_plugin):
    where = Path(module.__file__ or "").resolve()
    assert where.is_relative_to(environment), f"{module.__name__} imported from {where}"
assert not list(environment.glob("lib/python*/site-packages/*effax*.pth")), "editable install"
assert fx.__version__ == importlib.metadata.version("effax") == expected, (
    fx.__version__,
    importlib.metadata.version("effax"),
    expected,
)
assert (package / "py.typed").is_file(), "effax/py.typed is missing from the wheel"
assert (package.parent / "effax_stubs" / "mypy_plugin.py").is_file()
assert mypy_plugin.plugin(importlib.metadata.version("mypy")) is mypy_plugin.EffaxPlugin

# a tiny handled program, compiled and eager: state and keys cross the compiled call
steps = fx.State[jax.Array]("steps")
noise = fx.RandomKey("noise")


def step(x: jax.Array) -> jax.Array:
    steps.modify(lambda n: n + 1)
    return x + jax.random.normal(noise.next_key(), x.shape)


results = []
for run in (fx.jit(step), step):
    with fx.handlers(steps.init(jnp.int32(0)), noise.seed(0)) as hs:
        first, second = run(jnp.zeros(3)), run(jnp.zeros(3))
    assert int(hs[steps]) == 2
    assert not bool(jnp.array_equal(first, second)), "the key did not advance"
    results.append((first, second))
(jit_first, jit_second), (eager_first, eager_second) = results
assert bool(jnp.array_equal(jit_first, eager_first))
assert bool(jnp.array_equal(jit_second, eager_second))

print(f"effax {fx.__version__} from its wheel: jax {jax.__version__}, {package}")
