"""effax's error types and the long explanations their messages share."""

from __future__ import annotations

__all__ = [
    "EffectLeakError",
    "StateTypeError",
    "UndeclaredEffectError",
    "UnhandledEffectError",
]


class UnhandledEffectError(LookupError):
    """An effect was performed with no handler for it installed."""

    __module__ = "effax"


class EffectLeakError(LookupError):
    """A handler was used across a JAX transformation that would bake it in or leak it.

    Raised when an effect is performed inside a staging transformation (``jax.jit``,
    ``lax.scan``, ``jax.checkpoint``, ...) whose handler was installed outside it, and
    when a write would store a tracer of an inner transformation (``jax.grad``,
    ``jax.vmap``) in a handler that outlives it.
    """

    __module__ = "effax"


class StateTypeError(TypeError):
    """A ``State`` changed its structure, shape or dtype across a traced boundary."""

    __module__ = "effax"


class UndeclaredEffectError(LookupError):
    """A function performed an effect outside the row it declared with ``effax.uses``."""

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
    "transformation. Use the effax wrapper (effax.grad, effax.vmap, ...), which "
    "carries the state through the transformation, or install the handler inside it."
)
