"""`Effect`: the base class of effect declarations, and how a perform finds its handler.

An *effect* is a typed token declared once at module level (`Ask[float]("t")`).
Library code *performs* it (`t.ask()`): the operation looks up the innermost
handler of the effect (`Effect.handler`), which is where trace safety of reads is
enforced; an operation that stores a value (`set`, `emit`) goes through
`Effect.handler_for_write`, where trace safety of writes is.
"""

from __future__ import annotations

import importlib
import keyword
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, NoReturn, TypeVar

import jax

from . import _context, _naming, _trace
from ._arguments import check_unleaked
from ._context import Blocked, is_marker
from ._errors import (
    LEAK_EXPLANATION,
    WRITE_LEAK_EXPLANATION,
    EffectLeakError,
    EffectTypeError,
    EffectUsageError,
    UnhandledEffectError,
)

if TYPE_CHECKING:
    from ._protocol import Handler

__all__ = [
    "Effect",
    "check_write",
    "declare_row",
    "declared_at",
    "declared_row",
    "installed_at",
    "leak_message",
    "raise_obstacle",
    "reaches",
    "unsplit_message",
]

H = TypeVar("H", bound="Handler[Any]")


class Effect(Generic[H]):
    """Base class of effect declarations; effects are compared by identity.

    Two effects with the same name are different effects, each with its own handler.
    Subclass it to declare your own effect (see :class:`Handler`); its operations
    reach the innermost handler with :meth:`handler`.

    **Example:**

    >>> import effax
    >>> a, b = effax.Ask[int]("n"), effax.Ask[int]("n")
    >>> a == b, a == a
    (False, True)
    >>> with a.provide(1) as provider, b.provide(2):
    ...     a.ask(), b.ask(), a.handler() is provider
    (1, 2, True)

    """

    __slots__ = ("_effax_where", "name")
    # How a handler of this kind of effect is made, for messages; `{name}` is the
    # effect's name (e.g. "{name}.init(value)").
    handler_hint: ClassVar[str] = "a handler"
    # The names of the effect's operations: the handler methods its operations call,
    # which `effax.intercept` may answer (None: any name, for effects that do not
    # say). `derived_operations` are answered, by an interceptor that does not
    # answer them itself, in terms of the others: ``fn(interceptor, *args)``.
    operations: ClassVar[tuple[str, ...] | None] = None
    derived_operations: ClassVar[Mapping[str, Callable[..., Any]]] = MappingProxyType({})
    name: str

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            got = repr(name) if isinstance(name, str) else type(name).__name__
            raise EffectTypeError(
                "An effect's name must be a non-empty string (e.g. "
                f'`State[int]("steps")`), got {got}.'
            )
        self.name = name
        self._effax_where = _caller_outside_effax()

    def handler_example(self) -> str:
        """How a handler of this effect is made, e.g. ``steps.init(value)`` (for
        messages that tell the user what to install): valid Python, naming the
        effect by its name if that is an identifier, else ``effect``."""
        return self.handler_hint.format(name=self.variable_name())

    def variable_name(self) -> str:
        """The effect's name if it can name a Python variable, else ``"effect"``."""
        name = self.name
        return name if name.isidentifier() and not keyword.iskeyword(name) else "effect"

    def where_variable(self) -> str:
        """For messages using `handler_example`: says which object ``effect`` is,
        when the example could not use the effect's own name."""
        return "" if self.variable_name() == self.name else f" (where `effect` is {self!r})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # An effect is an identity: copies are the effect itself, and pickling refers
    # to the module-level name it is bound to (as pickle does for classes).
    def __copy__(self) -> Effect[H]:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Effect[H]:
        return self

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        where = _module_global(self)
        if where is None:
            raise EffectTypeError(
                f"{self!r} cannot be pickled: an effect is an identity, so it pickles as a "
                "reference to the module-level name it is bound to, and it is not bound to "
                "one in any imported module. Declare it at module level "
                f"(`{self.variable_name()} = {self!r}` in a module), or pickle the values "
                "of its handlers instead."
            )
        return _load_effect, where

    def handler(self) -> H:
        """The innermost handler of this effect, checked for trace safety.

        Operations of user-defined effects call this (or `handler_for_write`, which
        also refuses a value that would leak a tracer) to reach their handler.
        Raises `UnhandledEffectError` if there is none, `EffectLeakError` if it was
        installed outside a staging transformation around this call.
        """
        entry = _context.current_stack().get(self)
        if entry is None:
            _context.note_missing(self)
            processes = _trace.process_count()
            raise UnhandledEffectError(
                f"{self!r} was performed with no handler installed. Install one around "
                f"the call, e.g. `with {self.handler_example()}: ...` or "
                f"`effax.handle(fn, {self.handler_example()})`{self.where_variable()}."
                + self.unhandled_hint()
                + _namesakes(self)
                + (_MULTI_PROCESS.format(n=processes) if processes > 1 else "")
            )
        handler, ref = entry
        if ref is not _trace.current_trace_ref():  # the fast path of `obstacle`
            why = _context.obstacle(self, entry)
            if why is not None:
                _context.note_missing(self)
                raise_obstacle(self, why)
        return handler  # type: ignore[return-value]

    def handler_for_write(self, value: Any) -> H:
        """`handler()`, refusing `value` if it holds a tracer that would outlive its
        transformation once stored in the handler (raises `EffectLeakError`)."""
        handler = self.handler()
        self.check_store(handler, value)
        return handler

    def outer_of(self, handler: Handler[Any]) -> H:
        """The handler of this effect that `handler` shadows (`Handler.outer`),
        checked for trace safety as `handler()` is: the next one outward in the
        installed chain, or the innermost one if `handler` is not installed here
        (what it would shadow if it were, as for a handler of `effax.handle`)."""
        outer, why = self.shadowed(handler)
        if outer is None:
            _context.note_missing(self)
            raise UnhandledEffectError(
                f"{handler!r} forwarded {self!r} to the handler outside it, but there is "
                f"none: install one around it, e.g. `with {self.handler_example()}: ...`"
                f"{self.where_variable()}. An interceptor only reinterprets an "
                "operation; a handler outside it answers it."
            )
        if why is not None:
            _context.note_missing(self)
            raise_obstacle(self, why)
        return outer  # type: ignore[return-value]

    def shadowed(
        self, handler: Handler[Any], *, track: bool | Literal["plumbing"] = True
    ) -> tuple[Handler[Any] | None, _context.Obstacle | None]:
        """`outer_of` without raising: the handler `handler` shadows (None if there
        is none), and why it cannot be used here (None if it can). `track` as
        `_context.obstacle` takes it: plumbing a forwarding handler across a region
        is ``"plumbing"`` (a region around needs the handler, but its body did
        not perform the effect)."""
        entry = _outer_entry(self, handler)
        if entry is None:
            return None, None
        if entry[1] is _trace.current_trace_ref():
            return entry[0], None
        return entry[0], _context.obstacle(self, entry, track=track)

    def check_store(self, handler: Handler[Any], value: Any, operation: str | None = None) -> None:
        """Refuse `value`, about to be stored in `handler` (a handler of this
        effect), if it holds a tracer that would outlive its transformation: the
        write check of `handler_for_write`, for a handler reached by forwarding
        (`EffectLeakError`). A tracer of a transformation that has already finished
        (saved out of a ``jax.jit``) is refused wherever the handler is, naming
        `operation` (the operation storing it, e.g. ``"set"``); a handler that is
        not installed here is not checked for the rest."""
        current = _trace.current_trace_ref()
        where = f"{self!r}.{operation}(...)" if operation else f"{self!r}'s handler"
        check_unleaked(value, "the value it stores", where)
        ref = installed_at(self, handler)
        if ref is not None and ref is not current:
            check_write(self, value, ref)

    def unhandled_hint(self) -> str:
        """For the message of performing this effect with no handler: another
        way to handle it, if there is one ("" if not; starts with a space)."""
        return ""

    def uncompilable_fix(self, where: str) -> str:
        """For a message saying that this effect's handler holds a value that cannot
        cross `where` (not an array): what to do instead. Effects whose handlers
        can hold other values (a static `Ask`) say so."""
        return f"Hold an array (or a Python number) in it, or use it outside {where}."

    def traced_value_hint(self) -> str:
        """For a message saying that Python control flow needed a concrete value of
        this effect inside a compiled call: how to give it one ("" if nothing
        applies)."""
        return ""


_MULTI_PROCESS = (
    " This program runs in {n} processes: the others may now be blocked in a collective "
    "waiting for this one; every process must install the same handlers."
)


def reaches(handler: Handler[Any], target: Handler[Any]) -> bool:
    """Whether what `handler` answers can reach `target`: it is `target`, or holds
    (`Handler._effax_holds`) a chain of forwarding handlers that ends there."""
    current: Handler[Any] | None = handler
    while current is not target:
        if current is None:
            return False
        current = current._effax_holds
    return True


def installed_at(effect: Effect[Any], handler: Handler[Any]) -> Any:
    """The trace ref of the entry through which `handler` (of `effect`) is
    reached here (its own entry, or that of an interceptor forwarding to it), or
    None if it is not reached from the current stack."""
    stack = _context.current_stack()
    entry = stack.get(effect)
    if entry is not None and entry[0] is handler:
        ref = entry[1]
    elif stack.runs is not None and stack.runs[0] is handler:  # its code, outside it
        ref = stack.runs[1]
    else:
        ref = next((e[1] for e in _context.chain(stack, effect) if reaches(e[0], handler)), None)
    return None if is_marker(ref) else ref


def _outer_entry(effect: Effect[Any], handler: Handler[Any]) -> _context.Entry | None:
    """The entry `handler` shadows in the chain of `effect` (see `outer_of`)."""
    entries = _context.chain(_context.current_stack(), effect)
    for entry in entries:
        if reaches(entry[0], handler):
            outer = next(entries, None)
            # forwarding goes on outward through the stack while it meets handlers
            # that forward to the one installed outside them; meeting `handler`
            # again would forward forever
            further = outer
            while further is not None:
                if reaches(further[0], handler):
                    raise EffectUsageError(
                        f"{handler!r} is installed twice in the chain of handlers of "
                        f"{effect!r}, so the handler it forwards to is ambiguous (forwarding "
                        "would reach it again). Install it once, or create a second one."
                    )
                if not _context.forwards_outward(further[0]):
                    break
                further = next(entries, None)
            return outer
    return _context.current_stack().get(effect)


def unsplit_message(effect: Effect[Any]) -> str:
    """The message of performing `effect` (whose handler must give each batch
    element its own result, as a key stream does) under a raw ``jax.vmap``."""
    vmap, wrapper = (
        ("Flax NNX's nnx.vmap", "effax.nnx.vmap")
        if _naming.inside_nnx_vmap()
        else ("jax.vmap", "effax.vmap")
    )
    return (
        f"{effect!r} was performed inside {vmap}, but its handler was installed outside "
        "it, so every element of the batch would get the same result (the same key). "
        f"Use {wrapper}(fn, keys='split') for a distinct stream per element, or "
        f"{wrapper}(fn, keys='shared') for the keys the unbatched function draws; or "
        "install the handler inside the vmapped function."
    )


def leak_message(effect: Effect[Any], reach: str) -> str:
    """The message of performing `effect` where its handler cannot be reached."""
    rule = _trace.custom_rule_traced()
    if rule is not None:
        return (
            f"{effect!r} was performed in a {rule.split()[0]} function or rule that JAX "
            "traced when it differentiated a compiled function, after that function's call "
            "had returned; "
            "JAX caches the traced rule with the compiled function, so the handler's value "
            "would be baked in. Read the value in the custom function itself and pass it "
            "to the rule (as a residual of custom_vjp's fwd, or an argument of the "
            "custom_jvp function), or differentiate inside the compiled function: "
            "effax.jit(jax.grad(f)) rather than jax.grad(effax.jit(f))."
        )
    api = _naming.innermost_staging_api()
    if reach == "staged":
        where = f"inside {api[0]}" if api else "inside a staging JAX transformation"
        fix = (
            f"Use {api[1]} instead."
            if api
            else "Install the handler inside the transformed function, or use the effax "
            "wrapper of the transformation (effax.jit, effax.scan, effax.cond, "
            "effax.while_loop, effax.checkpoint, effax.shard_map) if it has one."
        )
    else:
        where = f"inside {api[0]}" if api else "under a JAX trace"
        where += ", which is not nested inside the trace of its handler"
        fix = f"Use {api[1] if api else 'effax.shard_map or effax.handle'} instead."
    return (
        f"{effect!r} was performed {where}, but its handler was installed outside it. "
        f"{fix} {LEAK_EXPLANATION}"
    )


def raise_obstacle(effect: Effect[Any], why: _context.Obstacle) -> NoReturn:
    """Raise the error of performing `effect` where its handler cannot be used."""
    if isinstance(why, Blocked):  # (an error path: the ABC check narrows both ways)
        why.raise_for(effect)
    if why == "unsplit":
        raise EffectLeakError(unsplit_message(effect))
    raise EffectLeakError(leak_message(effect, why))


def check_write(effect: Effect[Any], value: Any, ref: Any) -> None:
    """Refuse to store `value` in a handler of `effect` installed at trace `ref` if
    it holds a tracer that would outlive its transformation (`EffectLeakError`)."""
    if _trace.foreign_tracers(jax.tree.leaves(value), _context.home_trace(ref)):
        raise EffectLeakError(
            f"Writing a traced value to {effect!r}, whose handler was installed outside "
            f"the JAX transformation that produced it. {WRITE_LEAK_EXPLANATION}"
        )


def _caller_outside_effax() -> str | None:
    """``file:line`` of the innermost frame outside effax (where an effect is
    declared), for messages."""
    frame = sys._getframe(1)
    package = __name__.rsplit(".", 1)[0] + "."
    # (`Ask[float]("t")` is called through typing's generic alias)
    while frame is not None and (
        frame.f_globals.get("__name__", "").startswith(package)
        or frame.f_globals.get("__name__") == "typing"
    ):
        frame = frame.f_back  # type: ignore[assignment]
    return None if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def declared_at(effect: Effect[Any]) -> str:
    """Where `effect` was declared, for messages (``"an unknown place"`` if effax
    did not see it: a subclass that does not call ``Effect.__init__``)."""
    where = getattr(effect, "_effax_where", None)
    return where or "an unknown place"


def _namesakes(effect: Effect[Any]) -> str:
    """For an unhandled `effect`: the handled effects of the same name and kind (two
    declarations of one name are two effects), and where each was declared."""
    same = [
        other
        for other in _context.current_stack()
        if other is not effect and other.name == effect.name and type(other) is type(effect)
    ]
    if not same:
        return ""
    return (
        f" A different effect with the same name is handled here: {same[0]!r}, declared at "
        f"{declared_at(same[0])}; this one was declared at {declared_at(effect)}. Two "
        "declarations of one name are two effects (effects are compared by identity): "
        "declare it once, in one module, and import it where it is performed."
    )


def _module_global(effect: Effect[Any]) -> tuple[str, str] | None:
    """`(module, name)` of a module-level global bound to `effect`, preferring a
    public module (``effax`` over ``effax._random_key``)."""
    found = [
        (module_name, name)
        for module_name, module in list(sys.modules.items())
        for name, value in list(getattr(module, "__dict__", {}).items())
        if value is effect
    ]
    if not found:
        return None
    return min(found, key=lambda m: (any(p.startswith("_") for p in m[0].split(".")), m))


def _load_effect(module: str, name: str) -> Effect[Any]:
    effect = getattr(importlib.import_module(module), name)
    if not isinstance(effect, Effect):
        raise EffectTypeError(f"{module}.{name} is not an effect but a {type(effect).__name__}.")
    return effect


# --- declared effect rows -------------------------------------------------------------
#
# `effax.uses` publishes a function's row as an attribute, which `handle` and the
# wrappers read to plumb only those effects; these two are the only readers and
# writers of that attribute.

_ROW = "__effax_row__"


def declared_row(fn: Any) -> tuple[Effect[Any], ...] | None:
    """The effect row declared for `fn` (by `effax.uses`, or a handled function's
    row minus its own handlers), or None if it has none."""
    return getattr(fn, _ROW, None)


def declare_row(fn: Any, row: tuple[Effect[Any], ...]) -> None:
    """Publish `row` as `fn`'s declared effect row."""
    setattr(fn, _ROW, row)
