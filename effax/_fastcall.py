"""The per-call path of a compiled handled function, as generated straight-line code.

A call of ``effax.handle(fn, transform=jax.jit)`` must read every plumbed handler's
export, call the compiled function, and absorb every outcome. Done through the
protocol's methods, that is a few Python calls and two small objects per handler;
on a ~10 us dispatch that alone is more than the 10% DESIGN principle 5 allows (and
100 `State` handlers cost ~40 us). Measured on the dispatch loop, even forwarding
``*args`` or a second Python frame costs a few percent. So the function `handle`
returns is generated with `fn`'s own parameters, and once a compiled function has
run under an installed handler stack, its code (``__code__``) is replaced by code
written for that plan, and its one closure cell by the objects that code runs with
for that stack and trace (its *environment*):

    def step(x):
        env = <cell>
        if env[0] is not TOKEN:               # an environment for other code
            return env[1]((x,), {})
        (_, slow, stack, get_stack, trace_state, trace, fn, retry, mismatch, node,
         h0, h1, h2, K1) = env
        if stack() is not get_stack() or trace_state.value is not trace:
            return slow((x,), {})            # another stack or trace: general path
        try:
            r = fn(h0.provided, h1.base_key, h1.counter, h2.value, x)
        except NeedsEffect:                   # a retrace performed another effect
            return retry((x,), {})
        out, p = r
        if p.__class__ is not tuple:          # a retrace with another output layout
            return mismatch((h0, h1, h2), r)
        c0, = p
        h1.offset += K1                       # a known number of keys was drawn
        h2.value = c0
        return out

What it reads and writes comes from each handler's `fields` (see `effax.Fields`),
and only where the handler's class keeps the `export` / `absorb` that `Handler`
derives from them; a handler that overrides either is called through the method.

Two invariants keep this sound:

- *Threads.* Code and environment are swapped one after the other, so another
  thread may run a new code with an old environment or the reverse. Every code
  checks that the environment is its own (its template's token) and every
  environment carries the general path at index 1, so a mismatched pair takes the
  general path, which is always correct. Each environment is also checked against
  the stack and trace current in the calling thread.
- *Garbage.* Code objects are not tracked by Python's cycle collector, so a code
  object must not hold (as a constant) anything that leads back to the function:
  such a cycle could never be freed. The only object constant is the token, a bare
  `object()`; everything else lives in the closure cell, which the collector sees.
"""

from __future__ import annotations

import inspect
import itertools
import keyword
import linecache
import types
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

from ._effects import Fields, Handler, NeedsEffect, Outcome

__all__ = [
    "Form",
    "Layout",
    "Parts",
    "Template",
    "entry_form",
    "environment",
    "make_function",
    "slow_template",
    "template",
]

# Per handler: whether its export's const and carry are passed in (in that order).
Parts = tuple[tuple[bool, bool], ...]
# Per handler: its outcome's static part, and whether a carry and values came out.
Layout = tuple[tuple[Hashable, bool, bool], ...]

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
    """Generated code and what its environment needs besides the handlers: its
    `token` (environment slot 0) and `constants` (the environment's tail)."""

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
            *[f"        {line}" for line in body],
            "    return handled",
            "",
        ]
    )
    compiled = _CODE.get(source)
    if compiled is None:
        # Registered with linecache, as dataclasses and attrs do, so that tracebacks
        # through a handled call show the line they passed.
        filename = f"<effax.handle #{next(_SERIAL)}>"
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


def _function_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", "")
    if isinstance(name, str) and _name(name) is not None and not name.startswith("_fx"):
        return name
    return "handled"


def slow_template(fn: Callable[..., Any], form: Form) -> Template:
    """Code that takes the general path on every call: environment ``(token, slow)``."""
    return _compile(
        _function_name(fn), form.params, [f"return _fxenv[1]({form.args}, {form.kwargs})"]
    )


def make_function(code: Template, env: tuple[Any, ...]) -> types.FunctionType:
    """A function running `code` in `env` (what `handle` returns is one)."""
    return types.FunctionType(code.code, _GLOBALS, code.code.co_name, None, (types.CellType(env),))


_GLOBALS: dict[str, Any] = {"__builtins__": __builtins__}


def _name(attribute: str | None) -> str | None:
    """`attribute` if it can be written into code as ``.attribute``, else None."""
    if attribute is None or not attribute.isidentifier() or keyword.iskeyword(attribute):
        return None
    return attribute


def _inline_fields(handler: Handler[Any], method: str) -> Fields | None:
    """The handler's fields, if its class uses `Handler`'s derived `method`."""
    if getattr(type(handler), method) is not getattr(Handler, method):
        return None
    fields = handler.fields
    if fields is None:
        return None
    names = [getattr(fields, f) for f in Fields._fields]
    if any(n is not None and _name(n) is None for n in names):
        return None
    return fields


def template(
    fn: Callable[..., Any],
    form: Form,
    handlers: Sequence[Handler[Any]],
    statics: Sequence[Hashable],
    parts: Parts,
    layout: Layout,
    *,
    first: bool,
    outer: bool,
) -> Template:
    """Generate the specialised code of `fn`'s handled function for one plan.

    `handlers` are a representative set (only their classes and fields are used);
    `statics` and `parts` are the plan's; `layout` is the output layout to write
    for: the first trace's (`first`: outputs come back as a tuple) or another one
    (a list ending with the layout's static node). `outer`: whether the plan reads
    handlers from the installed stack (if not, the code runs under any stack, and
    only checks the trace). Run it in an `environment`.
    """
    # Every name the code uses is a local starting with `_fx` (which `entry_form`
    # keeps out of fn's parameters), builtins included.
    env: list[Any] = [NeedsEffect, tuple]
    env_names: list[str] = ["_fxNeedsEffect", "_fxtuple"]

    def constant(value: Any, name: str) -> str:
        env.append(value)
        env_names.append(name)
        return name

    body: list[str] = []
    checks: list[str] = []
    inputs: list[str] = []
    for i, (handler, static, (has_const, has_carry)) in enumerate(
        zip(handlers, statics, parts, strict=True)
    ):
        h = f"_fxh{i}"
        f = _inline_fields(handler, "export")
        if f is not None and (
            (f.static is None and static is not None)
            or (has_const and f.const is None)
            or (has_carry and f.carry is None)
        ):
            f = None  # the fields do not say what the plan was built from
        static_expr: str | None
        if f is None:
            body.append(f"_fxe{i} = {h}.export()")
            static_expr, const_expr, carry_expr = f"_fxe{i}[0]", f"_fxe{i}[1]", f"_fxe{i}[2]"
        else:
            static_expr = None if f.static is None else f"{h}.{f.static}"
            const_expr, carry_expr = f"{h}.{f.const}", f"{h}.{f.carry}"
        if static_expr is not None:
            # compared by identity first: a handler's static export rarely changes
            s = constant(static, f"_fxS{i}")
            body.append(f"_fxv{i} = {static_expr}")
            checks.append(f"(_fxv{i} is not {s} and _fxv{i} != {s})")
        if has_const:
            inputs.append(const_expr)
        if has_carry:
            inputs.append(carry_expr)

    writes: list[str] = []
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
        f = _inline_fields(handler, "absorb")
        if f is None:
            if static is not None or has_carry or has_values:
                t = constant(static, f"_fxT{i}")
                if "_fxOutcome" not in env_names:
                    constant(Outcome, "_fxOutcome")
                writes.append(f"{h}.absorb(_fxOutcome({t}, {carry}, {values}), steps=1)")
            continue
        # what `Handler.absorb` does with this outcome, for steps=1
        if f.advance is not None and type(static) is int:
            if static:
                writes.append(f"{h}.{f.advance} += {constant(static, f'_fxK{i}')}")
        elif f.carry is not None and has_carry:
            writes.append(f"{h}.{f.carry} = {carry}")
        if f.values is not None and has_values:
            writes.append(f"{h}.{f.values}.extend({values})")

    handler_names = [f"_fxh{i}" for i in range(len(handlers))]
    names = [
        "_fxtoken0",
        "_fxslow",
        "_fxstack",
        "_fxget",
        "_fxts",
        "_fxtrace",
        "_fxfn",
        "_fxretry",
        "_fxmismatch",
        "_fxnode",
        *handler_names,
        *env_names,
    ]
    call_args = "".join(f"{a}, " for a in inputs)
    if form.names is None:
        # one tuple for all positional arguments: cheaper than ``f(a, b, *args)``
        call = [
            "    if kwargs:",
            f"        _fxr = _fxfn(*({call_args}) + args, **kwargs)",
            "    else:",
            f"        _fxr = _fxfn(*({call_args}) + args)",
        ]
    else:
        call = [f"    _fxr = _fxfn({call_args}{''.join(f'{n}, ' for n in form.names)})"]
    slow = f"({form.args}, {form.kwargs})"
    lines = [
        "if _fxenv[0] is not _fxtoken:",
        f"    return _fxenv[1]{slow}",
        f"({''.join(f'{n}, ' for n in names)}) = _fxenv",
        "if _fxstack() is not _fxget() or _fxts.value is not _fxtrace:"
        if outer
        else "if _fxts.value is not _fxtrace:",
        f"    return _fxslow{slow}",
        *body,
    ]
    if checks:
        lines += [f"if {' or '.join(checks)}:", f"    return _fxretry{slow}"]
    lines += [
        "try:",
        *call,
        "except _fxNeedsEffect:",
        f"    return _fxretry{slow}",
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
    code = _compile(_function_name(fn), form.params, lines)
    return code._replace(constants=tuple(env))


def environment(
    code: Template,
    slow: Callable[..., Any],
    check: tuple[Any, ...],
    call: tuple[Any, ...],
    handlers: Sequence[Handler[Any]],
) -> tuple[Any, ...]:
    """The environment `code` runs with: its token, the general path, the stack
    and trace `check` (stack weakref, stack getter, trace state, trace), the `call`
    objects (compiled function, retry, mismatch, layout node), the handlers and the
    template's constants."""
    return (code.token, slow, *check, *call, *handlers, *code.constants)
