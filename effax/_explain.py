"""Errors of a compiled call, named for the effect that caused them.

A compiled call's plumbed handler values are positional arguments of the program
JAX traces and compiles; when one makes JAX fail (a value that cannot be an input,
an int that overflows, Python control flow on a traced `Ask`), JAX's message names
an argument no user wrote. `explain` turns such an error into an `EffectTypeError`
that names the effect and the fix, chained to JAX's.
"""

from __future__ import annotations

import re

import jax

from ._boundary import unplumbable
from ._environment import Resolved
from ._errors import EffectError, EffectTypeError
from ._plan import Plan

__all__ = ["explain"]

_PLUMBED = re.compile(r"_effax_plumbed_(\d+)")


def explain(plan: Plan, error: BaseException, resolved: Resolved | None = None) -> BaseException:
    """The exception to raise for `error`, raised by a compiled call whose inputs
    `plan` lays out: an `EffectTypeError` naming the effect if a plumbed handler's
    value caused it (a value that cannot be an input; JAX naming a plumbed
    argument, which no user knows), else `error` itself (also if effax named it
    already)."""
    if isinstance(error, EffectError):
        return error
    if resolved is not None and isinstance(error, TypeError):
        for handler, export in zip(resolved.handlers, resolved.exports, strict=True):
            why = unplumbable(handler.effect, export, "a compiled call", keyed=True)
            if why is not None:
                return _chained(EffectTypeError(why), error)
    text = str(error)
    if "_effax_plumbed_" not in text:
        return error
    # what each plumbed argument is: (effect, "<effect> (its handler's `<field>`)")
    owners = [(effect, f"{effect!r} (its handler's `{name}`)") for effect, name in plan.owners()]
    found = [owners[int(i)] for i in _PLUMBED.findall(text) if int(i) < len(owners)]
    if not found:
        return error
    effect = found[0][0]
    text = _PLUMBED.sub(lambda m: owners[int(m.group(1))][1], text)
    hint = ""
    if _needs_concrete(error):
        hint = effect.traced_value_hint()
        hint = f"\n\n{hint}" if hint else ""
    message = f"{type(error).__name__} for {effect!r} in a compiled call: {text}{hint}"
    return _chained(EffectTypeError(message), error)


# JAX's errors for Python needing the value of a traced input (`if`, `int()`,
# indexing, a shape): a traced `Ask` there wants `static=True`.
_CONCRETE_ERRORS = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerArrayConversionError,
)


def _needs_concrete(error: BaseException) -> bool:
    return isinstance(error, _CONCRETE_ERRORS) or (
        isinstance(error, TypeError) and "concrete" in str(error)
    )


def _chained(new: BaseException, cause: BaseException) -> BaseException:
    new.__cause__ = cause
    return new
