"""The warm path of a compiled handled function: generated straight-line code.

A warm call of ``effax.handle(fn, transform=jax.jit)`` must check that its
environment still holds, read every plumbed handler's inputs, call the compiled
program and write the outcomes back. Done through the protocol's methods that is
a few Python calls and two small objects per handler, more than the 10% of a
``jax.jit`` dispatch that effax's zero-cost principle allows (measured: ~1.5x on a
4-handler step, ~40 us for 100 `State` handlers; see benchmarks/profile_dispatch.py
and ``docs/benchmarks.md``). So,
once a program has run under a handler stack, the function `handle` returned runs
code generated for that program, with the handlers it reads in its one closure
cell (its *environment*, laid out by `HEAD`):

    def step(x):
        env = <cell>
        if env[0] is not TOKEN:               # an environment for other code
            return env[1]((x,), {})
        (_, dispatch, general, stack, get_stack, trace_state, trace, fn, retrace,
         mismatch, node, explain, h0, h1, h2, S0, T0, K1) = env
        if stack() is not get_stack() or trace_state.value is not trace:
            return dispatch((x,), {})        # another stack or trace
        v0 = h0.provided                      # a static export: compared as jit does
        if v0 is not S0 and (v0.__class__ is not T0 or v0 != S0):
            return general((x,), {})
        try:
            r = fn(h1.base_key, h1.counter, h2.value, x)
        except retrace:                       # a retrace looked up another effect
            return general((x,), {})
        except Exception as error:            # named for the user (see `explain`)
            raise explain(error)
        out, p = r
        if p.__class__ is not tuple:          # a retrace with another output layout
            return mismatch((h0, h1, h2), r)
        c0, = p
        h1.offset += K1                       # a known number of keys was drawn
        h2.value = c0
        return out

The same stack object means every lookup resolves as it did (a stack is never
mutated); everything else (tree structure, shapes, dtypes, None-ness of the
inputs) is checked by ``jax.jit``'s own cache. What is read and written comes
from each handler's `fields` (see `effax.Fields`), where the handler's class keeps
the `export` / `absorb` that `Handler` derives from them; otherwise the method is
called.

Two invariants keep this sound:

- *Threads.* Code and environment are swapped one after the other, so another
  thread may run a new code with an old environment or the reverse. Every code
  checks that the environment is its own (its template's token) and every
  environment carries the dispatcher at index 1, so a mismatched pair takes the
  general path or another stack's warm path, each always correct.
- *Garbage.* Code objects are not tracked by Python's cycle collector, so a code
  object must not hold (as a constant) anything that leads back to the function.
  The only object constant is the token, a bare `object()`; everything else lives
  in the closure cell, which the collector sees.
"""

from __future__ import annotations

import inspect
import itertools
import keyword
import linecache
import os
import types
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from . import _trace
from ._protocol import Fields, Handler, Outcome, RefusesOutcomes, derives, fields_of

if TYPE_CHECKING:
    from ._plan import Plan

__all__ = [
    "HEAD",
    "Form",
    "Template",
    "entry_form",
    "environment",
    "function_name",
    "general_template",
    "make_function",
    "template",
]

# The environment's head, in order; the handlers and the template's constants follow.
HEAD = (
    "token",  # the template's token: this environment is for this code
    "dispatch",  # ``dispatch(args, kwargs)``: another stack's warm path, or the general one
    "general",  # the general path, ``general(args, kwargs)``
    "stack",  # a weak reference to the handler stack the code was bound under
    "get_stack",  # the current stack getter
    "trace_state",  # `_trace.trace_state`: its `.value` is the current trace
    "trace",  # the trace the code was bound under
    "fn",  # the compiled program
    "retrace",  # the exception a trace raises to be retried on the general path
    "mismatch",  # ``mismatch(handlers, result)``: a retrace with another layout
    "node",  # the layout node of the layout the code writes for (None: the first)
    "explain",  # ``explain(error)``: the exception to raise for a failed call
)

# Compiled into generated code as a string constant, then replaced by the
# template's token (a bare object) with `code.replace(co_consts=...)`.
_TOKEN = "\0effax:token"


class Form(NamedTuple):
    """How the generated function takes its arguments: `fn`'s own parameters
    (`names`), or ``*args, **kwargs`` (`names` is None)."""

    names: tuple[str, ...] | None

    @property
    def params(self) -> str:
        return "*args, **kwargs" if self.names is None else ", ".join(self.names)

    @property
    def args(self) -> str:
        """The arguments as a tuple expression."""
        if self.names is None:
            return "args"
        return f"({''.join(f'{n}, ' for n in self.names)})"

    @property
    def kwargs(self) -> str:
        return "kwargs" if self.names is None else "{}"


def entry_form(fn: Callable[..., Any]) -> Form:
    """`fn`'s parameters if they are all positional without defaults, so that calls
    pass them on as they came; else ``*args, **kwargs``.

    (A default must not be passed on explicitly: ``jax.jit`` would then trace it as
    an argument instead of leaving it to `fn`.)
    """
    generic = Form(None)
    names: list[str] = []
    code = getattr(fn, "__code__", None)
    if (
        type(fn) is types.FunctionType
        and type(code) is types.CodeType
        and not hasattr(fn, "__wrapped__")
        and not hasattr(fn, "__signature__")
    ):
        # A plain function: its code says it all (inspect.signature costs ~50x more,
        # and handle() may be called in a loop).
        if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
            return generic
        if code.co_kwonlyargcount or fn.__defaults__ or fn.__kwdefaults__:
            return generic
        names = list(code.co_varnames[: code.co_argcount])
    else:
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            return generic
        for p in params:
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                return generic
            if p.default is not p.empty:
                return generic
            names.append(p.name)
    if any(_name(n) is None or n.startswith("_fx") for n in names):
        return generic
    return Form(tuple(names))


class Template(NamedTuple):
    """Generated code and what its environment needs besides the head and the
    handlers: its `token` (environment slot 0) and `constants` (the tail)."""

    code: types.CodeType
    token: object
    constants: tuple[Any, ...]


def _compile(name: str, params: str, body: Sequence[str]) -> Template:
    """Compile ``def name(params): body`` as a function with one free variable,
    ``_fxcell``, and give its code a token.

    Compiled once per source text (the cache is bounded by the shapes of plans and
    parameter lists, not by how many functions are handled): functions whose code
    reads the same are given the same code object, renamed.
    """
    source = "\n".join(
        [
            "def _fxmake(_fxcell):",
            f"    def handled({params}):",
            f"        _fxtoken = {_TOKEN!r}",
            "        _fxenv = _fxcell",
            "        try:",  # free in Python >= 3.11 unless it raises
            *[f"            {line}" for line in body],
            "        except Exception as _fxerror:",
            "            _fxhide(_fxerror)",  # this frame too, as JAX hides its own
            "            raise",
            "    return handled",
            "",
        ]
    )
    compiled = _CODE.get(source)
    if compiled is None:
        # Registered with linecache, as dataclasses and attrs do, so that tracebacks
        # through a handled call show the line they passed.
        # (under effax's directory: hidden from tracebacks with effax's frames)
        filename = os.path.join(_trace.EFFAX_DIR, f"<effax.handle #{next(_SERIAL)}>")
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace: dict[str, Any] = {}
        exec(compile(source, filename, "exec"), namespace)
        code: types.CodeType = namespace["_fxmake"](None).__code__
        token = object()
        code = code.replace(co_consts=tuple(token if c == _TOKEN else c for c in code.co_consts))
        compiled = _CODE.setdefault(source, (code, token))
    code, token = compiled
    if name != code.co_name:
        code = code.replace(co_name=name, co_qualname=name)
    return Template(code, token, ())


_CODE: dict[str, tuple[types.CodeType, object]] = {}
_SERIAL = itertools.count()


def function_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", "")
    if isinstance(name, str) and _name(name) is not None and not name.startswith("_fx"):
        return name
    return "handled"


def general_template(fn: Callable[..., Any], form: Form) -> Template:
    """Code that takes the general path on every call: environment ``(token, general)``."""
    return _compile(
        function_name(fn), form.params, [f"return _fxenv[1]({form.args}, {form.kwargs})"]
    )


def make_function(code: Template, env: tuple[Any, ...]) -> types.FunctionType:
    """A function running `code` in `env` (what `handle` returns is one)."""
    return types.FunctionType(code.code, _GLOBALS, code.code.co_name, None, (types.CellType(env),))


_GLOBALS: dict[str, Any] = {"__builtins__": __builtins__, "_fxhide": _trace.hide_frames}


def _name(attribute: str | None) -> str | None:
    """`attribute` if it can be written into code as ``.attribute``, else None."""
    if attribute is None or not attribute.isidentifier() or keyword.iskeyword(attribute):
        return None
    return attribute


def _inline_fields(cls: type[Handler[Any]], fields: Fields | None, method: str) -> Fields | None:
    """The fields of a handler of class `cls`, if the class uses `Handler`'s
    derived `method` and every field can be written into code."""
    if fields is None or not derives(cls, method):
        return None
    names = [getattr(fields, f) for f in Fields._fields]
    if any(n is not None and _name(n) is None for n in names):
        return None
    return fields


class _Code:
    """The generated code's pieces, and the constants its environment's tail
    holds (every name is a local starting with `_fx`, which `entry_form` keeps
    out of fn's parameters; builtins included)."""

    def __init__(self) -> None:
        self.constants: list[Any] = [tuple]
        self.names: list[str] = ["_fxtuple"]

    def constant(self, value: Any, name: str) -> str:
        self.constants.append(value)
        self.names.append(name)
        return name


def _reads(code: _Code, plan: Plan) -> tuple[list[str], list[str], list[str]]:
    """How the warm path reads each plumbed handler: statements,
    the checks of the static exports (compared by identity first, as a static
    export rarely changes, then as jax.jit compares static arguments: same type
    and equal), and the input expressions in the plan's order."""
    body: list[str] = []
    checks: list[str] = []
    inputs: list[str] = []
    for i, slot in enumerate(plan.slots):
        h = f"_fxh{i}"
        value = slot.static
        f = _inline_fields(slot.cls, slot.fields, "export")
        static_expr: str | None
        if f is None:
            body.append(f"_fxe{i} = {h}.export()")
            static_expr = f"_fxe{i}[0]"
            inputs += [f"_fxe{i}[1]"] * slot.has_const + [f"_fxe{i}[2]"] * slot.has_carry
        else:
            static_expr = None if f.static is None else f"{h}.{f.static}"
            inputs += [f"{h}.{name}" for name in (f.const, f.carry) if name is not None]
        if static_expr is not None:
            s, t = code.constant(value, f"_fxS{i}"), code.constant(type(value), f"_fxT{i}")
            body.append(f"_fxv{i} = {static_expr}")
            v = f"_fxv{i}"
            checks.append(f"({v} is not {s} and ({v}.__class__ is not {t} or {v} != {s}))")
    return body, checks, inputs


def _writes(
    code: _Code,
    handlers: Sequence[Handler[Any]],
    layout: Sequence[tuple[Hashable, bool, bool]],
) -> tuple[list[str], int]:
    """How the warm path writes each outcome of `layout` back (what
    `Handler.absorb` does with it, for steps=1), and how many output parts the
    program returns."""
    writes: list[str] = []
    # `check_absorb` of the handlers that refuse some outcomes (`RefusesOutcomes`), every one
    # asked before anything is written
    refusals: list[str] = []
    n_parts = 0
    for i, (handler, (static, has_carry, has_values)) in enumerate(
        zip(handlers, layout, strict=True)
    ):
        h = f"_fxh{i}"
        carry = values = "None"
        if has_carry:
            carry, n_parts = f"_fxc{n_parts}", n_parts + 1
        if has_values:
            values, n_parts = f"_fxc{n_parts}", n_parts + 1
        f = _inline_fields(type(handler), fields_of(handler), "absorb")
        refuses = issubclass(type(handler), RefusesOutcomes)
        if refuses or (f is None and (static is not None or has_carry or has_values)):
            t = code.constant(static, f"_fxO{i}")
            if "_fxOutcome" not in code.names:
                code.constant(Outcome, "_fxOutcome")
            outcome = f"_fxOutcome({t}, {carry}, {values})"
            if refuses:
                refusals.append(f"{h}.check_absorb({outcome})")
            if f is None:
                writes.append(f"{h}.absorb({outcome}, steps=1)")
        if f is None:
            continue
        if f.advance is not None and type(static) is int:
            if static:
                writes.append(f"{h}.{f.advance} += {code.constant(static, f'_fxK{i}')}")
        elif f.carry is not None and has_carry:
            writes.append(f"{h}.{f.carry} = {carry}")
        if f.values is not None and has_values:
            writes.append(f"{h}.{f.values}.extend({values})")
    return refusals + writes, n_parts


def _call(form: Form, inputs: Sequence[str]) -> list[str]:
    """The call of the compiled program with the plumbed inputs, then `fn`'s
    arguments, into ``_fxr``."""
    call_args = "".join(f"{a}, " for a in inputs)
    if form.names is None:
        # one tuple for all positional arguments: cheaper than ``f(a, b, *args)``
        return [
            "    if kwargs:",
            f"        _fxr = _fxfn(*({call_args}) + args, **kwargs)",
            "    else:",
            f"        _fxr = _fxfn(*({call_args}) + args)",
        ]
    return [f"    _fxr = _fxfn({call_args}{''.join(f'{n}, ' for n in form.names)})"]


def template(
    fn: Callable[..., Any],
    form: Form,
    plan: Plan,
    handlers: Sequence[Handler[Any]],
    layout: Sequence[tuple[Hashable, bool, bool]],
    *,
    first: bool,
    outer: bool,
    box: Callable[[Any], Any] | None,
) -> Template:
    """Generate the warm path of `fn`'s handled function for one program.

    `plan` is the program's input layout (with its static exports); `handlers`
    are a representative set (only their classes and fields are used); `layout`
    is the output layout to write for: the first trace's (`first`: outputs come
    back as a tuple) or another one (a list ending with the layout's static
    node). `outer`: whether the program depends on the installed stack (if not,
    the code runs under any stack, and only checks the trace). `box`: what each input
    goes through first, if anything (`_plumb.box`: Python numbers as NumPy
    scalars). Run it in an `environment`.
    """
    code = _Code()
    body, checks, inputs = _reads(code, plan)
    if box is not None and inputs:
        boxed = code.constant(box, "_fxbox")
        inputs = [f"{boxed}({x})" for x in inputs]
    writes, n_parts = _writes(code, handlers, layout)
    handler_names = [f"_fxh{i}" for i in range(len(handlers))]
    names = [f"_fx{name}" for name in HEAD] + handler_names + code.names
    general = f"_fxgeneral({form.args}, {form.kwargs})"
    lines = [
        "if _fxenv[0] is not _fxtoken:",
        f"    return _fxenv[1]({form.args}, {form.kwargs})",
        f"({''.join(f'{n}, ' for n in names)}) = _fxenv",
        "if _fxstack() is not _fxget_stack() or _fxtrace_state.value is not _fxtrace:"
        if outer
        else "if _fxtrace_state.value is not _fxtrace:",
        f"    return _fxdispatch({form.args}, {form.kwargs})",
        *body,
    ]
    if checks:
        lines += [f"if {' or '.join(checks)}:", f"    return {general}"]
    lines += [
        "try:",
        *_call(form, inputs),
        "except _fxretrace:",
        f"    return {general}",
        "except Exception as _fxerror:",
        "    raise _fxexplain(_fxerror)",
        "_fxout, _fxp = _fxr",
        "if _fxp.__class__ is not _fxtuple:"
        if first
        else "if _fxp.__class__ is _fxtuple or _fxp[-1] is not _fxnode:",
        f"    return _fxmismatch(({''.join(f'{n}, ' for n in handler_names)}), _fxr)",
    ]
    unpacked = [f"_fxc{j}" for j in range(n_parts)] + ([] if first else ["_fxlayout"])
    if unpacked:
        lines.append(f"{''.join(f'{n}, ' for n in unpacked)}= _fxp")
    lines += writes
    lines.append("return _fxout")
    compiled = _compile(function_name(fn), form.params, lines)
    return compiled._replace(constants=tuple(code.constants))


def environment(code: Template, handlers: Sequence[Handler[Any]], **head: Any) -> tuple[Any, ...]:
    """The environment `code` runs with: its token, then the rest of `HEAD` (given
    by name), the handlers and the template's constants."""
    head["token"] = code.token
    return (*(head[name] for name in HEAD), *handlers, *code.constants)
