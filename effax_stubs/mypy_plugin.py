"""A mypy plugin that checks effax effect rows.

Enable it in the mypy configuration of a project that uses effax:

.. code-block:: toml

    [tool.mypy]
    plugins = ["effax_stubs.mypy_plugin"]

Types already check *values*; the plugin checks what they cannot say (docs/typing.md):

- ``effax-undeclared``: inside a function decorated with ``@effax.uses(...)``, an
  effect operation, a call of a function with a row (made by ``effax.handle`` /
  ``jit`` / ``grad`` / ... too: ``handle``'s row is ``f``'s minus what its handlers
  discharge) or effax's control flow (which performs its bodies' rows) that needs an
  effect neither in the row nor handled by an enclosing ``with`` there.
- ``effax-unhandled``: the same at module level, where no caller can install a
  handler (an ``Ask`` with a ``default=`` is answered there, but still in rows).
- ``effax-handler-type``: a handler given a value its effect cannot carry although
  the types agree (unhashable for a static ``Ask``; text for a traced one or a
  ``State``, where a compiled call performs it; an ``int`` for a ``State[float]``).

What the plugin understands, and where it stays silent rather than guess, is the
table of docs/typing.md: effects are module-level declarations (user-defined ones
too), rows are what ``@effax.uses(...)`` says (never inferred), handlers are read from
``with`` statements, ``effax.handlers(...)`` and ``effax.handle(f, ...)`` (through
variables, as the code binds them), an interceptor's functions run where it is
installed, default values where their ``def`` runs, and any context manager of the
user's own may install handlers (nothing under it is reported). Module level includes
class bodies; a call there is checked from the hook mypy calls for it or, where mypy
calls none (``effax.jit(f)(x)``), from the hook of a call inside it, against the
handlers one walk of the module found around it.

How: the plugin records what it learns in the types it returns (which effect a
declaration or a handler is, which row a function has) as markers in
``Instance.extra_attrs``, and a user-defined effect's operations (an interceptor
class's forwarding methods) in its class's ``TypeInfo.metadata``; mypy keeps both
for other modules and in its incremental cache. It
keeps nothing between hooks but one walk per module, returns ``None`` from every
hook that is not about effax (``functools.partial``'s are mypy's own, with the
row added); a failure of its own analysis falls back to mypy's default behaviour
(``EFFAX_MYPY_PLUGIN_DEBUG=1`` raises it). Supported mypy versions: `SUPPORTED_MYPY`;
under any other version the plugin loads with no hooks and says so on stderr.

Layout: this module holds the hooks; `_lookups` (what the names mypy asks about
refer to), `_names` (what effax looks like to the plugin), `_marks` (declarations:
markers in types), `_tree` (the syntax tree), `_source` (function bodies mypy freed,
read from their file),
`_scope` (what names in a body refer to), `_handling` (what handler expressions
handle and forward), `_rows` (what code performs and declares), `_walker`
(statements in order, with the handlers around each call), `_calls` (rules 1 and
2), `_values` (rule 3) and `_report` (error codes and message wording).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final

from mypy.nodes import (
    ARG_POS,
    ARG_STAR,
    CallExpr,
    MypyFile,
    NameExpr,
    Var,
)
from mypy.plugin import (
    AttributeContext,
    ClassDefContext,
    FunctionContext,
    MethodContext,
    Plugin,
)
from mypy.plugins.functools import partial_call_callback, partial_new_callback
from mypy.types import CallableType, TupleType, Type, get_proper_type

from ._calls import check_function, check_module, report_pending, scope_stack
from ._lookups import Lookups, sources_digest
from ._marks import (
    CODE,
    FORWARDS,
    HANDLES,
    INTERCEPTS,
    declaration_in,
    declaration_marks,
    declaration_of_type,
    handles_of_type,
    row_marks,
    row_of_type,
    with_marks,
)
from ._names import (
    HIGHER_ORDER_PACKAGES,
    KINDS,
    MAKERS,
    METADATA,
    OPERATIONS,
    PERFORMING,
    RETURNING,
    Row,
    effax_method,
    effax_name,
    effect_operations,
    foreign_higher_order,
    is_handler_maker,
    is_sampler,
    kind_of,
)
from ._report import HANDLER_TYPE, UNDECLARED, UNHANDLED
from ._tree import effect_operations_in, forwarding_methods, index_of
from ._values import check_value

__all__ = ["HANDLER_TYPE", "SUPPORTED_MYPY", "UNDECLARED", "UNHANDLED", "EffaxPlugin", "plugin"]

__version__: Final = sources_digest()
"""A digest of the plugin's sources: mypy keys its incremental cache by a plugin
module's file and its ``__version__``, so a change in any of the plugin's modules
(an upgrade of effax) checks the user's modules again instead of replaying old reports."""

SUPPORTED_MYPY: Final = ((1, 20), (2, 5))
"""The mypy versions the plugin is tested with: at least the first, below the second."""


_SUBSCRIPTS: Final = frozenset(f"builtins.{t}.__getitem__" for t in ("list", "tuple", "dict"))


class EffaxPlugin(Lookups):
    """Checks effect rows; see the module docstring."""

    # -- hook selection: effax's own functions, and functions with a row

    def get_function_hook(self, fullname: str) -> Callable[[FunctionContext], Type] | None:
        name = effax_name(fullname)
        if name in KINDS:
            return self._declare
        if name == "uses":
            return self._uses
        if name == "handle":
            return self._handled
        if name in RETURNING:
            return self._through
        if name == "handlers":
            return self._handlers
        if name == "intercept":
            return self._intercept
        if (name is not None and name in PERFORMING) or is_sampler(fullname):
            return self._module_level
        if fullname == "functools.partial":
            return self._partial
        higher_order = foreign_higher_order(fullname)
        if higher_order == "returns":
            return self._through  # `jax.grad(f)`: a function with `f`'s row
        if higher_order == "calls":
            return self._module_level  # `list(map(f, xs))`, `jax.lax.scan(f, ...)`
        if self._has_row(fullname):
            return self._module_level
        if self._user_effect(fullname) is not None:
            return self._declare  # `events = Counter("events")`, a user-defined effect
        return None

    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        if fullname in _SUBSCRIPTS:  # `readers[0](x)` at module level: reported from here
            return self._subscript
        method = effax_method(fullname)
        if method is not None:
            kind, name = method
            if name in OPERATIONS[kind]:
                return self._module_level
            if name in MAKERS[kind]:
                return self._handler
            return None
        if fullname == "functools.partial.__call__":
            return self._partial_call
        owner, _, name = fullname.rpartition(".")
        if effax_name(owner) == "Compiled" and name in ("__call__", "trace", "lower"):
            return self._module_level  # a compiled handled function, `effax.jit(f)`
        if foreign_higher_order(fullname) == "calls":
            return self._module_level  # `xs.sort(key=f)`
        if name == "__call__" and owner.startswith(HIGHER_ORDER_PACKAGES):
            return self._module_level  # a function JAX transformed (`jax.jit(f)`)
        if self._has_row(fullname):
            return self._module_level
        info = self._user_effect(owner)
        if info is not None:
            if name in effect_operations(info):
                return self._module_level
            if is_handler_maker(info, name):
                return self._handler
        return None

    def get_attribute_hook(self, fullname: str) -> Callable[[AttributeContext], Type] | None:
        """Reading a property whose getter has a row performs it (checked here at
        module level; inside functions, from their `effax.uses`)."""
        if self._has_row(fullname):
            return self._property_read
        owner, _, name = fullname.rpartition(".")
        info = self._user_effect(owner)  # an operation of an effect, as a property
        return self._property_read if info is not None and name in effect_operations(info) else None

    def get_base_class_hook(self, fullname: str) -> Callable[[ClassDefContext], None] | None:
        """A user-defined effect class: record its operations in its metadata."""
        if effax_name(fullname) == "Effect" or self._user_effect(fullname) is not None:
            return self._effect_class
        if effax_name(fullname) == "Interceptor" or self._user_interceptor(fullname):
            return self._interceptor_class
        return None

    # -- hooks that mark types

    def _declare(self, ctx: FunctionContext) -> Type:
        """`name = effax.Ask[T]("name")` at module level: mark the effect's type."""
        result: list[Type] = [ctx.default_return_type]

        def check() -> None:
            stack = scope_stack(ctx.api)
            module = stack[0] if len(stack) == 1 and isinstance(stack[0], MypyFile) else None
            assigned = index_of(module.defs).assigned if module is not None else {}
            statement = assigned.get(id(ctx.context))
            target = statement.lvalues[0] if statement and len(statement.lvalues) == 1 else None
            if not isinstance(target, NameExpr) or not isinstance(ctx.context, CallExpr):
                return
            assert module is not None
            declaration = declaration_in(ctx.context, f"{module.fullname}.{target.name}")
            if declaration is None:
                return
            marks = declaration_marks(declaration)
            result[0] = with_marks(ctx.default_return_type, marks)
            var = target.node
            if isinstance(var, Var) and not var.is_inferred and var.type is not None:
                # `x: fx.Ask[float] = ...` (or `Final[...]`): the annotation's type is
                # what other modules read (symbol tables, the cache): mark it too
                var.type = with_marks(var.type, marks)

        self._guarded(check)
        return result[0]

    def _uses(self, ctx: FunctionContext) -> Type:
        """`effax.uses(...)`: mark the decorated function's row, check its body."""
        result: list[Type] = [ctx.default_return_type]

        def mark() -> None:
            row: set[str] = set()
            if not ctx.arg_types:
                return
            for typ, kind in zip(ctx.arg_types[0], ctx.arg_kinds[0], strict=True):
                star = get_proper_type(typ) if kind == ARG_STAR else None
                # `effax.uses(*ROW)` with `ROW = (temperature, steps)`: the tuple's items
                for item in star.items if isinstance(star, TupleType) else [typ]:
                    declaration = declaration_of_type(item)
                    if declaration is None:
                        return
                    row.add(declaration.fullname)
            decorator = get_proper_type(ctx.default_return_type)
            if isinstance(decorator, CallableType):
                marked = with_marks(decorator.ret_type, row_marks(frozenset(row)))
                result[0] = decorator.copy_modified(ret_type=marked)

        self._guarded(mark)
        self._guarded(lambda: check_function(ctx.api, ctx.context, self._module_map()))
        return result[0]

    def _handled(self, ctx: FunctionContext) -> Type:
        return self._through(ctx, handle=True)

    def _through(self, ctx: FunctionContext, *, handle: bool = False) -> Type:
        """`effax.handle(f, *handlers)`, `effax.jit(f)`, `effax.grad(f)`, ... (and
        JAX's `jax.grad(f)`, ...): the returned function's row is `f`'s, minus what
        the handlers discharge."""
        result: list[Type] = [ctx.default_return_type]

        def mark() -> None:
            if not ctx.arg_types or not ctx.arg_types[0]:
                return  # a decorator factory, e.g. effax.jit(static_argnames=...)
            row = row_of_type(ctx.arg_types[0][0])
            if row is None and ctx.args and ctx.args[0]:
                # no row in the type (an overloaded function): read the argument
                row = self._names().row_of(ctx.args[0][0])
            if row is None:
                return
            if handle and len(ctx.arg_types) > 1:
                arguments = zip(ctx.arg_types[1], ctx.arg_kinds[1], ctx.args[1], strict=True)
                for typ, kind, arg in arguments:
                    star = get_proper_type(typ) if kind == ARG_STAR else None
                    # `effax.handle(f, *cells)` with a tuple of handlers: its items
                    for item in star.items if isinstance(star, TupleType) else [typ]:
                        handles = handles_of_type(item)
                        if handles is None and star is None:
                            # (an interceptor's type loses its marks in this context)
                            handles = self._names().discharged(arg)
                        if handles is None:
                            return
                        row = row - handles
            result[0] = with_marks(ctx.default_return_type, row_marks(row))

        self._guarded(mark)
        # at module level, `effax.jit(f)(x)` is checked by the walk this starts
        self._guarded(lambda: check_module(ctx.api, self._module_map(), ctx.context))
        return result[0]

    def _handler(self, ctx: MethodContext) -> Type:
        """`X.provide(v)`, `X.init(v)`, `X.seed(k)`, `X.collect()`, `X.record()`, ...:
        mark the handler's effect, and check the value (rule 3)."""
        result: list[Type] = [ctx.default_return_type]

        def mark() -> None:
            declaration = declaration_of_type(ctx.type)
            if declaration is not None:
                marks = {HANDLES, f"{HANDLES}:{declaration.fullname}"}
                result[0] = with_marks(ctx.default_return_type, marks)

        self._guarded(mark)
        self._guarded(lambda: check_value(ctx, self._module_map()))
        self._guarded(lambda: check_module(ctx.api, self._module_map(), ctx.context))
        return result[0]

    def _handlers(self, ctx: FunctionContext) -> Type:
        """`effax.handlers(*handlers)`: the union of what they handle."""

        def found() -> Row | None:
            if len(ctx.arg_kinds) != 1 or any(k != ARG_POS for k in ctx.arg_kinds[0]):
                return None
            rows = [handles_of_type(typ) for typ in ctx.arg_types[0]]
            return None if None in rows else frozenset().union(*filter(None, rows))

        return self._handles(ctx, found)

    def _intercept(self, ctx: FunctionContext) -> Type:
        """`effax.intercept(effect, **ops)`: what it handles by itself (its effect where
        no function of it calls `outer`; else nothing)."""
        call = ctx.context
        if not isinstance(call, CallExpr):
            return ctx.default_return_type
        names = self._names()
        extra = lambda: (  # what other modules read from its type
            {f"{INTERCEPTS}:{e}" for e in names.intercepted_by(call)}
            | {f"{CODE}:{e}" for e in names.handler_code(call)}
            | ({FORWARDS} if names.forwarded(call) else set())
        )
        return self._handles(ctx, lambda: names.discharged(call), extra)

    def _handles(
        self,
        ctx: FunctionContext,
        found: Callable[[], Row | None],
        extra: Callable[[], set[str]] = set,
    ) -> Type:
        """The type `ctx`'s call returns, marked with what `found()` says it handles."""
        result: list[Type] = [ctx.default_return_type]

        def mark() -> None:
            handled = found()
            if handled is not None:
                marks = {HANDLES} | {f"{HANDLES}:{name}" for name in handled} | extra()
                result[0] = with_marks(ctx.default_return_type, marks)

        self._guarded(mark)
        self._guarded(lambda: check_module(ctx.api, self._module_map(), ctx.context))
        return result[0]

    def _partial(self, ctx: FunctionContext) -> Type:
        """`functools.partial(f, ...)`: mypy's own inference, with `f`'s row."""
        result: list[Type] = [partial_new_callback(ctx)]

        def mark() -> None:
            row = row_of_type(ctx.arg_types[0][0]) if ctx.arg_types and ctx.arg_types[0] else None
            if row is not None:
                result[0] = with_marks(result[0], row_marks(row))
                # `functools.partial(f, 2)()` at module level: the call of the partial
                # has no hook of its own, so what it performs is reported from here
                check_module(ctx.api, self._module_map(), ctx.context)

        self._guarded(mark)
        return result[0]

    def _partial_call(self, ctx: MethodContext) -> Type:
        """Calling a partial: mypy's own inference; a row is checked at module level."""
        if row_of_type(ctx.type):
            self._guarded(lambda: check_module(ctx.api, self._module_map(), ctx.context))
        return partial_call_callback(ctx)

    def _property_read(self, ctx: AttributeContext) -> Type:
        self._guarded(lambda: check_module(ctx.api, self._module_map(), ctx.context))
        return ctx.default_attr_type

    def _effect_class(self, ctx: ClassDefContext) -> None:
        def record() -> None:
            info = ctx.cls.info
            if kind_of(info) is not None:
                return  # a subclass of effax's own kinds: their operations
            inherited = frozenset().union(*(effect_operations(b) for b in info.mro[1:]))
            operations = effect_operations_in(ctx.cls, inherited)
            info.metadata[METADATA] = {"operations": sorted(operations)}

        self._guarded(record)

    def _interceptor_class(self, ctx: ClassDefContext) -> None:
        """A forwarding handler of the user's: record which of its methods forward
        (call `self.outer()`), for other modules (mypy frees their bodies)."""

        def record() -> None:
            info = ctx.cls.info
            info.metadata[METADATA] = {"forwards": forwarding_methods(ctx.cls)}

        self._guarded(record)

    def _subscript(self, ctx: MethodContext) -> Type:
        self._guarded(lambda: report_pending(ctx.api, ctx.context))
        return ctx.default_return_type

    def _module_level(self, ctx: FunctionContext | MethodContext) -> Type:
        self._guarded(lambda: check_module(ctx.api, self._module_map(), ctx.context))
        return ctx.default_return_type


class _Disabled(Plugin):
    """What an unsupported mypy version gets: no hooks at all."""


def _version(version: str) -> tuple[int, int]:
    parts = [*version.split("+")[0].split(".")[:2], "0", "0"][:2]
    numbers = [int("".join(c for c in part if c.isdigit()) or 0) for part in parts]
    return numbers[0], numbers[1]


def plugin(version: str) -> type[Plugin]:
    """mypy's entry point: the plugin class for this mypy `version`."""
    low, high = SUPPORTED_MYPY
    if not low <= _version(version) < high:
        sys.stderr.write(
            f"effax_stubs.mypy_plugin supports mypy >={low[0]}.{low[1]},<{high[0]}.{high[1]} "
            f"but runs under mypy {version}: effect rows are not checked.\n"
        )
        return _Disabled
    return EffaxPlugin
