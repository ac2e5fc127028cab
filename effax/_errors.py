"""effax's error types and the long explanations their messages share.

Every misuse of effax raises an `EffectError`, through a subclass that also derives
from the builtin a Python user would catch:

- `LookupError`: `UnhandledEffectError`, `EffectLeakError`, `UndeclaredEffectError`
  (finding a handler failed);
- `TypeError`: `EffectTypeError` (a value of the wrong kind), and its subclass
  `StateTypeError`;
- `ValueError`: `EffectUsageError` (an effect used where its wrapper cannot carry it).
"""

from __future__ import annotations

__all__ = [
    "LEAK_EXPLANATION",
    "OWN_WRITE_LEAK",
    "STAGED_HANDLER",
    "WRITE_LEAK_EXPLANATION",
    "EffectError",
    "EffectLeakError",
    "EffectTypeError",
    "EffectUsageError",
    "StateTypeError",
    "UndeclaredEffectError",
    "UnhandledEffectError",
]


class EffectError(Exception):
    """Base class of every error effax raises for a misuse.

    Each subclass also derives from the builtin exception a Python user would catch
    for it (`LookupError`, `TypeError` or `ValueError`), so either can be caught.

    **Example:**

    >>> import effax
    >>> try:
    ...     effax.Ask[float]("temperature").ask()
    ... except effax.EffectError as e:
    ...     print(type(e).__name__, isinstance(e, LookupError))
    UnhandledEffectError True

    """

    __module__ = "effax"


class EffectTypeError(EffectError, TypeError):
    """A value or argument of the wrong kind was given to effax.

    For example something that is not a handler passed to `effax.handlers`, a seed
    that is not a key, an unhashable value for a static `Ask`. The message names
    what was expected and what was found. A subclass of `TypeError`.

    **Example:**

    >>> import effax
    >>> try:
    ...     effax.rng.seed("zero")
    ... except effax.EffectTypeError as e:
    ...     print(e)
    RandomKey('rng').seed(...) takes an int (or integer scalar array), a typed key
    (jax.random.key) or a raw uint32[2] key (jax.random.PRNGKey), not a str.

    """

    __module__ = "effax"


class EffectUsageError(EffectError, ValueError):
    """An effect was used where the effax wrapper around it cannot carry it.

    For example values emitted inside `effax.while_loop` (whose trip count is not
    known, so they cannot be stacked), branches of `effax.cond` that emit different
    structures, an effect changed inside `effax.while_loop`'s `cond_fun`. The
    message says what to do instead. A subclass of `ValueError`.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> log = effax.Emit[jnp.ndarray]("log")
    >>> with log.collect():
    ...     try:
    ...         effax.while_loop(lambda x: x < 3, lambda x: (log.emit(x), x + 1)[1], 0.0)
    ...     except effax.EffectUsageError as e:
    ...         print(str(e)[:60])
    Emit('log') sent out values (emitted, or recorded taps) insi

    """

    __module__ = "effax"


class UnhandledEffectError(EffectError, LookupError):
    """An effect was performed with no handler for it installed.

    The message names the effect and the handler to install around the call. A
    subclass of `LookupError`: the lookup of the effect's handler failed.

    **Example:**

    >>> import effax
    >>> temperature = effax.Ask[float]("temperature")
    >>> try:
    ...     temperature.ask()
    ... except effax.UnhandledEffectError as e:
    ...     print(e)
    Ask('temperature') was performed with no handler installed. Install one around the
    call, e.g. `with temperature.provide(value): ...` or ...
    >>> with temperature.provide(0.5):
    ...     temperature.ask()
    0.5
    >>> issubclass(effax.UnhandledEffectError, LookupError)
    True

    """

    __module__ = "effax"


class EffectLeakError(EffectError, LookupError):
    """A handler was used across a JAX transformation that would bake it in or leak it.

    Raised when an effect is performed inside a staging transformation (``jax.jit``,
    ``lax.scan``, ``jax.checkpoint``, ...) whose handler was installed outside it, and
    when a write would store a tracer of an inner transformation (``jax.grad``,
    ``jax.vmap``) in a handler that outlives it. The message names the effax wrapper
    to use instead (`effax.jit`, `effax.scan`, `effax.grad`, ...).

    **Example:**

    >>> import jax, effax
    >>> scale = effax.Ask[float]("scale")
    >>> def f(x):
    ...     return x * scale.ask()
    >>> with scale.provide(2.0):
    ...     try:
    ...         jax.jit(f)(1.0)
    ...     except effax.EffectLeakError as e:
    ...         print(e)
    Ask('scale') was performed inside jax.jit, but its handler was installed outside it.
    Use effax.jit (or effax.handle(fn, transform=jax.jit)) instead. ...
    >>> with scale.provide(2.0):
    ...     float(effax.jit(f)(1.0))
    2.0

    """

    __module__ = "effax"


class StateTypeError(EffectTypeError):
    """A ``State`` changed its structure, shape or dtype across a traced boundary.

    A state is the carry of a compiled function or loop, so it must come out with the
    pytree structure, shapes and dtypes it went in with. A subclass of `TypeError`.

    **Example:**

    >>> import jax.numpy as jnp, effax
    >>> total = effax.State[jnp.ndarray]("total")
    >>> def add(x):
    ...     total.set(total.get() + x)
    >>> with total.init(jnp.int32(0)):
    ...     try:
    ...         effax.jit(add)(1.5)  # int32 + float: the state would become float32
    ...     except effax.StateTypeError as e:
    ...         print(e)
    State('total') changed its type across a traced boundary: it entered as
    PyTreeDef(*) with leaves [int32[]] and left as PyTreeDef(*) with leaves [float32[]]. ...
    >>> with total.init(jnp.float32(0)) as cell:
    ...     effax.jit(add)(1.5)
    >>> float(cell.value)
    1.5

    """

    __module__ = "effax"


class UndeclaredEffectError(EffectError, LookupError):
    """A function performed an effect outside the row it declared with ``effax.uses``.

    The message names the function, the effect and the declared row, and says how to
    fix it: add the effect to the row, or handle it inside the function. An effect
    with no handler at all raises `UnhandledEffectError` instead.

    **Example:**

    >>> import effax
    >>> temperature = effax.Ask[float]("temperature")
    >>> steps = effax.State[int]("steps")
    >>> @effax.uses(temperature)
    ... def sneaky(x: float) -> float:
    ...     steps.set(steps.get() + 1)
    ...     return x * temperature.ask()
    >>> with effax.handlers(temperature.provide(2.0), steps.init(0)):
    ...     try:
    ...         sneaky(3.0)
    ...     except effax.UndeclaredEffectError as e:
    ...         print(e)
    sneaky performed State('steps'), which is not in its effect row
    effax.uses(Ask('temperature')). Add it to the row ...
    >>> issubclass(effax.UndeclaredEffectError, LookupError)
    True

    """

    __module__ = "effax"


LEAK_EXPLANATION = (
    "JAX caches the traced body of jax.jit, lax.scan, lax.cond, lax.while_loop and "
    "jax.checkpoint by function identity, not by the handlers around the call, so a "
    "handler read from inside would be baked in as a constant and silently go stale "
    "on the next call. Either install the handler inside the transformed function, or "
    "use the effax wrapper, which passes the handler's values in and out explicitly."
)

WRITE_LEAK_EXPLANATION = (
    "The value is a tracer of a JAX transformation (jax.grad, jax.vmap, ...) that "
    "runs inside the handler's scope; storing it would leak the tracer out of that "
    "transformation. Use the effax wrapper (effax.grad, effax.value_and_grad, "
    "effax.vmap, ...), which carries the state through the transformation, or install "
    "the handler inside it. Under jax.grad, storing jax.lax.stop_gradient(value) keeps "
    "the value without its derivative."
)

STAGED_HANDLER = (
    "The handler of {effect!r} was created outside the {where} that is being traced "
    "here, and is installed inside it (e.g. by `effax.jit(effax.handle(f, handler))`), "
    "so its value would be baked into the compiled program and what the program writes "
    "to it would be tracers. Install it around the compiled call: `effax.handle(f, "
    "handler, transform=jax.jit)`, or `with handler: effax.jit(f)(...)`; or create it "
    "inside the traced function."
)

OWN_WRITE_LEAK = (
    "Writing a traced value to {effect!r}, whose handler was passed to effax.handle "
    "and lives outside the JAX transformation (jax.grad, jax.vmap, ...) around this "
    "call, so storing the value would leak a tracer out of it. No effax wrapper can "
    "carry a handler that only the handled function knows: install it around the "
    "transformation instead (`with handler: effax.grad(fn)(x)`), or create it inside."
)
