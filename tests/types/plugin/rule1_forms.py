"""Rule 1 (issue 28): handler forms that silenced their whole block (a conditional
handler, a walrus, a tuple of handlers spread into `effax.handle` / `handlers`),
property setters with a row, an effect's operation written as a property, and the
optional-effect pattern (`try: ... except effax.UnhandledEffectError:`)."""

from __future__ import annotations

import attrs

import effax as fx

scale = fx.Ask[float]("scale")
calls = fx.State[int]("calls")
optional = fx.Ask[float]("optional")
flag = bool(len(__name__))


# case: a conditional handler handles what both branches handle
with scale.provide(1.0) if flag else scale.provide(2.0):
    scale.ask()
    calls.get()  # E: effax-unhandled: Effect "calls" is performed at module level
with scale.provide(1.0) if flag else calls.init(0):
    scale.ask()  # E: effax-unhandled: Effect "scale"


# case: a walrus in a with statement
with (h := scale.provide(1.0)):
    scale.ask()
    calls.get()  # E: effax-unhandled: Effect "calls"


# case: a tuple of handlers spread into effax.handle and effax.handlers
cells = (scale.provide(1.0),)
both = (scale.provide(1.0), calls.init(0))
fx.handle(lambda: calls.get() + scale.ask(), *cells)()  # E: effax-unhandled: "effax.handle(...)" performs effect "calls"
fx.handle(lambda: calls.get() + scale.ask(), *both)()
with fx.handlers(*cells):
    scale.ask()
    calls.get()  # E: effax-unhandled: Effect "calls"
with fx.handlers(*both):
    calls.get()


# case: a property setter with a row
class Counter:
    def __init__(self) -> None:
        self._n = 0

    @property
    def n(self) -> int:
        return self._n

    @n.setter
    @fx.uses(calls)
    def n(self, v: int) -> None:
        calls.set(v)


counter = Counter()
print(counter.n)
counter.n = 3  # E: effax-unhandled: "n" performs effect "calls" at module level
with calls.init(0):
    counter.n = 4


@fx.uses()
def assign(c: Counter) -> None:
    c.n = 5  # E: effax-undeclared: "n" performs effect "calls"
    c.n += 1  # E: effax-undeclared
    print(c.n)


@fx.uses(calls)
def assign_in_row(c: Counter) -> None:
    c.n, c._n = 5, 6


# case: an effect's operation written as a property
class Budget(fx.Effect["Purse"]):
    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def left(self) -> int:
        return self.handler().left

    def purse(self, n: int) -> Purse:
        return Purse(self, n)


@attrs.define(eq=False)
class Purse(fx.Handler[Budget]):
    effect: Budget
    left: int
    fields = fx.Fields(carry="left")

    @property
    def value(self) -> int:
        return self.left

    @classmethod
    def rebuild(cls, effect: Budget, static: object, const: object, carry: int) -> Purse:
        return cls(effect, carry)


budget = Budget("budget")
print(budget.left)  # E: effax-unhandled: Effect "budget" is performed at module level
with budget.purse(3):
    print(budget.left)


@fx.uses()
def peek() -> int:
    return budget.left  # E: effax-undeclared: Effect "budget" is neither in the effect row


@fx.uses(budget)
def peek_in_row() -> int:
    return budget.left


# case: an optional effect in try/except at module level
try:
    optional.ask()
except fx.UnhandledEffectError:
    pass
try:
    optional.ask()
except (KeyError, LookupError):
    pass
try:
    optional.ask()  # E: effax-unhandled: Effect "optional"
except KeyError:
    pass


# case: in a row, the optional pattern catches UndeclaredEffectError
@fx.uses()
def maybe() -> float:
    try:
        return optional.ask()  # E: effax-undeclared: Effect "optional"
    except fx.UnhandledEffectError:
        return 0.0


@fx.uses()
def maybe_declared() -> float:
    try:
        return optional.ask()
    except (fx.UnhandledEffectError, fx.UndeclaredEffectError):
        return 0.0
