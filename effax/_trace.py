"""The one module that reads JAX internals, self-tested at import.

What effax needs and JAX does not expose publicly, in this module's order: (1) the
current trace, and a cheap identity key for it; (2) how traces nest
(``parent_trace``; for the fresh traces of custom derivative rules, ``prev_trace``
in ``Primitive.bind``'s frame); (3) what a trace does (stage out:
``DynamicJaxprTrace``; batch; differentiate) and which trace a tracer belongs to;
(4) traceback filtering; (5) which JAX API is staging, only to word messages; (6)
dead-code elimination and evaluation of jaxprs; (7) making a trace current, and
whether operations run now; (8) weak types, and how many processes
``jax.distributed`` started; (9) the options of ``jax.jit(**options)``, kept in its
closure variable ``kwds``.

Everything else in effax is written against the small API below. The self-test
checks 1-3, 7 (whether operations run), 8 (weak types) and 9: if a future JAX
changes them, importing effax fails naming the installed version and the supported
range, instead of silently misclassifying a trace (which would let a stale constant
through ``jax.jit``). Checked on jax 0.10.2 (Python 3.11), 0.11.2, 0.12.0.1 (3.12).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, Literal, TypeVar

import jax
import jax.numpy as jnp
from jax._src import config as _config, core as _core, traceback_util as _traceback_util
from jax._src.interpreters import ad as _ad, batching as _batching, partial_eval as _pe
from jax._src.lax import lax as _lax

__all__ = [
    "SHARD_MAP_MODULE",
    "SUPPORTED_JAX",
    "EFFAX_DIR",
    "api_boundary",
    "EffaxInternalsError",
    "Trace",
    "TraceRef",
    "batched_here",
    "batching_around",
    "current_trace_ref",
    "custom_rule_traced",
    "evaluating",
    "foreign_tracers",
    "hide_frames",
    "is_vmap_frame",
    "is_tracer",
    "jit_disabled",
    "jit_factory_options",
    "output_program",
    "process_count",
    "prune",
    "reachability",
    "stagings_between",
    "trace_state",
    "transformed_between",
    "under",
    "varying_axes",
    "weakly_typed",
]

SUPPORTED_JAX: Final = "0.10.x to 0.12.x"

# A trace object and its identity key (a weakref, so that recording a trace in a
# handler entry does not keep a finished jaxpr trace alive).
Trace = Any
TraceRef = Any

_trace_ctx = _core.trace_ctx
# `trace_state.value` is the current trace's `_weakref` (jax >= 0.10): the cheapest
# identity key JAX keeps for it (about 0.05 us against 0.09 us for `trace_ctx.trace`).
_trace_state = _core.trace_state
# Exposed for generated code that must read it with no Python call in between:
# ``trace_state.value`` is ``current_trace_ref()``.
trace_state: Final = _trace_state
_Staging = _pe.DynamicJaxprTrace
_Batching = _batching.BatchTrace
_Differentiating = (_ad.JVPTrace, _ad.LinearizeTrace)
_Tracer = _core.Tracer
_EvalTrace = _core.EvalTrace

Reach = Literal["ok", "staged", "detached"]


# effax's frames are hidden from tracebacks as JAX hides its own (JAX_TRACEBACK_
# FILTERING=off shows them): below every effax entry point (`api_boundary`), and
# below JAX's own boundaries inside effax.
EFFAX_DIR: Final = os.path.dirname(os.path.abspath(__file__))
_traceback_util.register_exclusion(EFFAX_DIR)
_F = TypeVar("_F", bound=Callable[..., Any])


def api_boundary(fn: _F) -> _F:
    """`fn`, as a public entry point whose tracebacks show no effax frame."""
    return _traceback_util.api_boundary(fn)


def hide_frames(error: BaseException) -> None:
    """Hide effax's frames from `error`'s traceback, as `api_boundary` does (for
    generated code, which catches and re-raises instead)."""
    mode = _traceback_util._filtering_mode()
    if mode == "off" or error.__traceback__ is None:
        return
    if mode == "tracebackhide":
        _traceback_util._add_tracebackhide_to_hidden_frames(error.__traceback__)
    elif not _traceback_util._is_under_reraiser(error):
        error.with_traceback(_traceback_util.filter_traceback(error.__traceback__))


def current_trace_ref() -> TraceRef:
    """A cheap identity key for the current trace."""
    return _trace_state.value


def reachability(set_ref: TraceRef) -> Reach:
    """Classify reading, from the current trace, a value set under ``set_ref``.

    Walks from the current trace (inclusive) through ``parent_trace`` to the trace
    where the value was set (exclusive):

    - ``"ok"``: reached without crossing a staging trace (same trace, or only
      grad / jvp / vjp / linearize / vmap traces in between);
    - ``"staged"``: a ``DynamicJaxprTrace`` lies in between (jit, a control-flow
      body, checkpoint, ...): reading would bake a stale constant into the jaxpr;
    - ``"detached"``: the chain ends without reaching it (eager shard_map, or a
      value set under a trace that has already finished).
    """
    if _trace_state.value is set_ref:
        return "ok"
    count = stagings_between(set_ref)
    return "detached" if count is None else "staged" if count else "ok"


def stagings_between(set_ref: TraceRef) -> int | None:
    """How many staging traces lie between the current trace (inclusive) and the
    trace of ``set_ref`` (exclusive), or None if that trace is not an ancestor."""
    count = 0
    for trace in _lineage():
        if trace._weakref is set_ref:
            return count
        if isinstance(trace, _Staging):
            count += 1
    return 0 if _related_unstaged(set_ref) else None


def _lineage() -> Iterator[Trace]:
    """The current trace and its ancestors, innermost first, seen through the
    traces of custom derivative functions and rules: JAX traces those afresh for
    each call, like the body of a Python function, but their `parent_trace` is not
    the trace that called them, so the walk continues from that caller."""
    trace = _trace_ctx.trace
    callers: Iterator[Trace] | None = None
    while trace is not None:
        if _custom_rule(trace) is not None:
            callers = _custom_callers() if callers is None else callers
            trace = next(callers, None)
            continue
        yield trace
        trace = getattr(trace, "parent_trace", None)


def batching_around() -> bool:
    """Whether a batching trace (``jax.vmap``) is the current trace or one of its
    ancestors: a value traced now may be batched once that vmap batches the
    jaxpr being traced."""
    return any(isinstance(trace, _Batching) for trace in _lineage())


def transformed_between(set_ref: TraceRef, kind: Literal["batching", "differentiating"]) -> bool:
    """Whether a batching trace (``jax.vmap``), or a differentiating one
    (``jax.grad``, ``jax.jvp``), lies between the current trace (inclusive) and the
    trace of ``set_ref`` (exclusive)."""
    traces = _Batching if kind == "batching" else _Differentiating
    for trace in _ancestors(_trace_ctx.trace):
        if trace._weakref is set_ref:
            return False
        if isinstance(trace, traces):
            return True
    return False


def varying_axes(value: Any) -> frozenset[Any]:
    """The manual mesh axes `value` varies over inside ``shard_map`` (with
    ``check_vma``; empty elsewhere)."""
    aval = jax.typeof(value)
    manual = getattr(aval, "manual_axis_type", None)
    return frozenset(getattr(manual, "varying", None) or getattr(aval, "vma", None) or ())


def _related_unstaged(set_ref: TraceRef) -> bool:
    """Whether the trace of `set_ref` is live and shares an ancestor with the
    current trace, with no staging trace strictly between either and it.

    JAX runs a custom derivative's function and rules for a grad or vmap trace at
    that trace's parent, or under a sibling trace it creates (linearize's partial
    evaluation, vmap's subtrace): nothing is staged and cached in between, so a
    value of a handler installed under the grad or vmap trace may be read.
    """
    owner = set_ref() if callable(set_ref) else None
    if owner is None or not owner.is_valid():
        return False
    lineage = set()  # the owner's ancestors up to the first staging trace (included)
    for trace in _ancestors(owner):
        lineage.add(id(trace))
        if isinstance(trace, _Staging):
            break
    for trace in _lineage():
        if id(trace) in lineage:
            return True
        if isinstance(trace, _Staging):
            return False
    return False


# jax.custom_jvp / custom_vjp trace their function (and rules) under a fresh
# DynamicJaxprTrace whose `parent_trace` is not the trace that called them (JAX
# swaps the current trace out in `Primitive.bind`). The trace that called them is
# `prev_trace` in that `bind` frame.
_CUSTOM_RULES: Final = ("custom_jvp", "custom_vjp")
_CUSTOM_CALLS: Final = frozenset({"custom_jvp_call", "custom_vjp_call"})
_BIND_CODE: Final = _core.Primitive.bind.__code__


def _custom_rule(trace: Trace) -> str | None:
    """What `trace` traces if it is a custom derivative's function or rule (e.g.
    ``"custom_jvp jvp"``), else None."""
    if not isinstance(trace, _Staging):
        return None
    info = getattr(getattr(trace, "frame", None), "debug_info", None)
    traced_for = str(getattr(info, "traced_for", ""))
    return traced_for if traced_for.startswith(_CUSTOM_RULES) else None


def custom_rule_traced() -> str | None:
    """What JAX is tracing if the current trace is (inside) a custom derivative's
    function or rule, e.g. ``"custom_jvp jvp"``; otherwise None. For messages."""
    rules = (_custom_rule(trace) for trace in _ancestors(_trace_ctx.trace))
    return next((rule for rule in rules if rule is not None), None)


def _custom_callers() -> Iterator[Trace]:
    """The traces that called the custom-derivative functions being traced,
    innermost first (from the `bind` frames of their primitives)."""
    frame: Any = sys._getframe(2)
    while frame is not None:
        if frame.f_code is _BIND_CODE:
            prim = frame.f_locals.get("self")
            if getattr(prim, "name", None) in _CUSTOM_CALLS:
                yield frame.f_locals.get("prev_trace")
        frame = frame.f_back


def _ancestors(trace: Trace) -> Iterable[Trace]:
    while trace is not None:
        yield trace
        trace = getattr(trace, "parent_trace", None)


def foreign_tracers(leaves: Iterable[Any], set_ref: TraceRef, *, unmapped: bool = False) -> bool:
    """Whether any leaf is a tracer that must not outlive the current call: one
    whose trace is not ``set_ref``'s or an ancestor (e.g. a ``JVPTracer`` of a raw
    ``jax.grad`` around a write would leak out of its transformation). With
    `unmapped`, a vmap's tracer that does not map its value counts as the value.
    """
    allowed: set[int] | None = None
    for leaf in leaves:
        while unmapped and isinstance(leaf, _batching.BatchTracer) and leaf.batch_dim is None:
            leaf = leaf.val
        if isinstance(leaf, _Tracer):
            if allowed is None:
                owner = set_ref()
                allowed = {id(t) for t in _ancestors(owner)} if owner is not None else set()
            if id(leaf._trace) not in allowed:
                return True
    return False


# JAX's own frames that `_naming` recognises on the stack (to name them in messages)
SHARD_MAP_MODULE: Final = "jax._src.shard_map"


def is_vmap_frame(frame: Any) -> bool:
    """Whether `frame` is `jax.vmap`'s batched function being called."""
    return bool(
        frame.f_code.co_name == "vmap_f" and frame.f_globals.get("__name__") == "jax._src.api"
    )


def prune(
    closed_jaxpr: Any, used_outputs: Sequence[bool]
) -> tuple[Callable[..., list[Any]], list[bool]]:
    """Dead-code elimination of a traced program (``jax.jit(f).trace(...).jaxpr``).

    Returns a function evaluating only the equations that `used_outputs` need (its
    arguments: the inputs that are still used; its results: the used outputs) and,
    for each input, whether it is used.
    """
    jaxpr, consts = closed_jaxpr.jaxpr, closed_jaxpr.consts
    pruned, used_inputs = _pe.dce_jaxpr(jaxpr, list(used_outputs))

    def evaluate(*args: Any) -> list[Any]:
        return _core.eval_jaxpr(pruned, consts, *args)

    return evaluate, list(used_inputs)


def output_program(closed_jaxpr: Any, index: int) -> tuple[Any, Callable[..., Any], list[bool]]:
    """Output `index` of a traced program alone: a key that is equal for two
    programs computing it the same way from the same inputs (the dead-code
    eliminated equations, printed, and the identities of the constants they read),
    a function computing it from the inputs it uses, and which inputs those are."""
    jaxpr, consts = closed_jaxpr.jaxpr, closed_jaxpr.consts
    opened = _pe.convert_constvars_jaxpr(jaxpr)  # constants become leading inputs
    used = [i == index for i in range(len(jaxpr.outvars))]
    pruned, used_inputs = _pe.dce_jaxpr(opened, used)
    n = len(consts)
    read = [c for c, u in zip(consts, used_inputs[:n], strict=True) if u]
    key = (str(pruned), tuple(id(c) for c in read))

    def evaluate(*args: Any) -> Any:
        return _core.eval_jaxpr(pruned, (), *read, *args)[0]

    return key, evaluate, list(used_inputs[n:])


@contextlib.contextmanager
def under(ref: TraceRef) -> Iterator[None]:
    """Make the (live) trace of `ref` current: what is computed inside is
    recorded there, not in the trace in progress (which would close over it)."""
    trace = ref() if callable(ref) else None
    if trace is None or ref is _trace_state.value:
        yield
        return
    with _core.set_current_trace(trace):  # type: ignore[no-untyped-call]
        yield


def evaluating() -> bool:
    """Whether operations run now: no JAX transformation is tracing, and
    ``jax.disable_jit`` is off (under it a ``jax.jit`` runs its function eagerly)."""
    return type(_trace_ctx.trace) is _EvalTrace and not _config.disable_jit.value


def jit_disabled() -> bool:
    """Whether ``jax.disable_jit`` is on (a ``jax.jit`` runs its function itself)."""
    return bool(_config.disable_jit.value)


def is_tracer(value: Any) -> bool:
    """Whether `value` is a tracer (an abstract value of a trace in progress)."""
    return isinstance(value, _Tracer)


def process_count() -> int:
    """How many processes ``jax.distributed.initialize`` started (1 if it was not
    called), without starting a backend as ``jax.process_count()`` would."""
    from jax._src import distributed

    return int(getattr(distributed.global_state, "num_processes", 1) or 1)


def batched_here(value: Any) -> bool:
    """Whether `value` is batched by the current trace (a ``jax.vmap`` running
    the code that holds it)."""
    return (
        isinstance(value, _batching.BatchTracer)
        and value._trace is _trace_ctx.trace
        and value.batch_dim is not None  # None: not mapped
    )


def weakly_typed(x: Any) -> Any:
    """`x` (an array or tracer) with a weak type: what a Python number passed to
    ``jax.jit`` becomes, so that a value that went in as one can come out with
    the same type (and the next call reuse the compiled program)."""
    if getattr(jax.typeof(x), "weak_type", True):
        return x
    return _lax._convert_element_type(x, None, weak_type=True)


def jit_factory_options(transform: Callable[..., Any]) -> dict[str, Any] | None:
    """The options of ``jax.jit(**options)`` called without a function that differ
    from ``jax.jit``'s defaults (JAX returns a lambda keeping every option in its
    closure variable ``kwds``), or None if `transform` is no such decorator."""
    if (
        getattr(transform, "__module__", None) != jax.jit.__module__
        or getattr(transform, "__qualname__", None) != "jit.<locals>.<lambda>"
    ):
        return None
    code, cells = getattr(transform, "__code__", None), getattr(transform, "__closure__", None)
    free = (code.co_freevars, (c.cell_contents for c in cells)) if code and cells else ((), ())
    kwds = dict(zip(*free, strict=True)).get("kwds")
    if not isinstance(kwds, dict):
        return None
    # jax.jit's public options not left at their defaults (which JAX passes as
    # themselves); not internal ones (`use_resource_env`), set by jax.jit itself.
    defaults = inspect.signature(jax.jit).parameters
    return {k: v for k, v in kwds.items() if k in defaults and v is not defaults[k].default}


# --- self-test --------------------------------------------------------------------


class EffaxInternalsError(ImportError):
    """JAX's internals changed in a way effax's trace classification cannot follow."""


def _self_test() -> None:
    """Check the facts above on the installed JAX, on abstract values only: it runs
    at import, which must not start an XLA backend (a program calls
    ``jax.distributed.initialize()`` after importing its libraries)."""
    seen: dict[str, Reach] = {}
    staged: dict[str, Reach] = dict.fromkeys(("jit", "scan", "checkpoint"), "staged")
    expected = staged | dict.fromkeys(("vmap", "grad", "custom_jvp", "root"), "ok")

    def probes(x: Any) -> Any:
        root = current_trace_ref()

        def probe(name: str) -> Any:
            def fn(y: Any) -> Any:
                seen[name] = reachability(root)
                return y

            return fn

        @jax.custom_jvp
        def custom(y: Any) -> Any:  # traced afresh, as the body of a Python function
            seen["custom_jvp"] = reachability(root)
            return y

        custom.defjvp(lambda primals, tangents: (primals[0], tangents[0]))
        custom(x)
        jax.jit(probe("jit"))(x)
        jax.lax.scan(lambda c, _: (probe("scan")(c), None), x, None, length=1)
        jax.checkpoint(probe("checkpoint"))(x)
        jax.vmap(probe("vmap"))(jnp.stack([x]))
        jax.grad(lambda y: probe("grad")(y) * 1.0)(x)
        seen["root"] = reachability(root)
        if not jax.typeof(weakly_typed(x + jnp.zeros((), x.dtype))).weak_type:
            seen["weak_type"] = "detached"  # weak types are made another way
        if _trace_ctx.trace._weakref is not root:
            seen["trace_state"] = "detached"  # the cheap identity key is not the trace's
        if evaluating():
            seen["evaluating"] = "detached"  # a trace in progress is not told apart
        if jit_factory_options(jax.jit(static_argnums=1)) != {"static_argnums": 1}:
            seen["jit_options"] = "detached"  # jax.jit(**options) keeps them elsewhere
        return x

    jax.make_jaxpr(probes)(jax.ShapeDtypeStruct((), jnp.float32))  # type: ignore[no-untyped-call]
    if seen != expected:
        raise EffaxInternalsError(
            f"effax cannot classify JAX traces (or read jax.jit's options) with jax "
            f"{jax.__version__} (supported: {SUPPORTED_JAX}): expected {expected}, observed "
            f"{seen}. Install a supported JAX version, or report this at effax's issue tracker."
        )


try:
    _self_test()
except EffaxInternalsError:
    raise
except Exception as exc:  # pragma: no cover - only on an unsupported JAX
    raise EffaxInternalsError(
        f"effax's self-test of JAX internals failed on jax {jax.__version__} "
        f"(supported: {SUPPORTED_JAX}): {type(exc).__name__}: {exc}"
    ) from exc
