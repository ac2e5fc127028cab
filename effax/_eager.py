"""Eager control flow, traced once per handler environment.

JAX's own `lax.scan`, `cond`, `while_loop`, ... trace their body once per body
function (and shapes): called again eagerly, they reuse the jaxpr and the compiled
program. An effax wrapper cannot lean on that cache, since what its body computes
also depends on the handlers around the call (which are plumbed into it), and on
trace-time facts of the body (how many keys a step draws, which handlers it
changes) that must be known to absorb its outcome. So an eager call runs as the
compiled call of a `_Again`: a function that performs the same wrapper under the
trace of `effax.jit`, whose program cache keys on the handler environment and
keeps those facts with the program. The body is traced once and compiled once per
environment; later calls take `effax.jit`'s warm path.

Programs are cached by wrapper, options and body functions, which are held weakly
(a program dies with its functions). A body that cannot be weakly referenced, or
that reads a handler whose static export cannot be part of a cache key (an
unhashable one: legal eagerly), is traced on every call (the latter twice on the
first: the compiled attempt learns the body reads it, then the wrapper runs
directly; later attempts fail before tracing).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from . import _trace
from ._boundary import is_cannot_compile
from ._errors import EffectTypeError
from ._handle import handle, jit
from ._plumb import Transform

__all__ = ["run"]

Rerun = Callable[..., Any]  # rerun(fns, options, *args): the wrapper, called again


class _Again:
    """The wrapper `rerun` over `fns` (held weakly) and `options`, as a function of
    the call's arguments: what `effax.jit` compiles for an eager call."""

    __slots__ = ("__weakref__", "compiled", "options", "refs", "rerun")

    def __init__(
        self,
        rerun: Rerun,
        refs: list[weakref.ref[Any]],
        options: Hashable,
        transform: Transform | None,
    ) -> None:
        self.rerun = rerun
        self.refs = refs
        self.options = options
        self.compiled = jit(self) if transform is None else handle(self, transform=transform)

    def __call__(self, *args: Any) -> Any:
        return self.rerun([ref() for ref in self.refs], self.options, *args)

    def holds(self, fns: Sequence[Any]) -> bool:
        return all(ref() is fn for ref, fn in zip(self.refs, fns, strict=True))


_PROGRAMS: dict[Hashable, _Again] = {}


def run(
    rerun: Rerun,
    fns: Sequence[Callable[..., Any]],
    options: Hashable,
    *args: Any,
    transform: Transform | None = None,
) -> Any:
    """`rerun(fns, options, *args)`: a control-flow wrapper's implementation (which
    traces its bodies) over its body functions, options and arguments; eagerly, the
    compiled program that runs it, cached (compiled by `effax.jit`, or by
    ``effax.handle(..., transform=transform)``: `effax.nnx` passes ``nnx.jit``,
    which carries the modules among the arguments)."""
    if _trace.evaluating():
        program = _compiled(rerun, fns, options, transform)
        if program is not None:
            try:
                return program(*args)
            except EffectTypeError as error:
                if not is_cannot_compile(error):
                    raise
                # it reads a handler that cannot cross a compiled call: run it directly
    return rerun(fns, options, *args)


def _compiled(
    rerun: Rerun, fns: Sequence[Callable[..., Any]], options: Hashable, transform: Any
) -> Callable[..., Any] | None:
    """The compiled program that runs `rerun(fns, options, *args)`, or None if it
    cannot be cached (a function that cannot be weakly referenced, unhashable
    options)."""
    key = (rerun, options, transform, *map(id, fns))
    try:
        again = _PROGRAMS.get(key)
    except TypeError:  # unhashable options
        return None
    if again is not None and again.holds(fns):
        return again.compiled

    def drop(_: Any, programs: dict[Hashable, _Again] = _PROGRAMS) -> None:
        programs.pop(key, None)  # a function died: so does its program

    try:
        refs = [weakref.ref(fn, drop) for fn in fns]
    except TypeError:
        return None
    again = _PROGRAMS[key] = _Again(rerun, refs, options, transform)
    return again.compiled
