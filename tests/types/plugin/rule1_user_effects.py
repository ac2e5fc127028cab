"""Rule 1 with user-defined effects (docs/howto/custom-effects.md) in this module;
tests/types/plugin/xmod/ has them across modules."""

from typing import Any

from mylib import temperature

import effax as fx


class Visited(fx.Effect["Visits"]):
    def visit(self, name: str) -> None:
        self.handler().names.append(name)

    def visit_all(self, *names: str) -> None:  # an operation through another
        for name in names:
            self.visit(name)

    def label(self) -> str:  # reaches no handler: not an operation
        return f"visited {self.name}"

    def record(self) -> "Visits":
        return Visits(self)

    def record_untyped(self):  # type: ignore[no-untyped-def]
        return Visits(self)


class Visits(fx.Handler[Visited]):
    fields = fx.Fields()

    def __init__(self, effect: Visited) -> None:
        self.effect = effect
        self.names: list[str] = []

    @property
    def value(self) -> Any:
        return self.names

    @classmethod
    def rebuild(cls, effect: Visited, static: Any, const: Any, carry: Any) -> "Visits":
        return cls(effect)


visited = Visited("visited")


# case: a user-defined effect's operation in the row
@fx.uses(visited)
def in_row() -> str:
    visited.visit("encoder")
    visited.visit_all("a", "b")
    return visited.label()


# case: a user-defined effect's operation outside the row
@fx.uses(temperature)
def outside_row() -> None:
    visited.visit("encoder")  # E: effax-undeclared: Effect "visited" is neither in the effect row of "outside_row" (effax.uses(temperature))
    visited.visit_all("a")  # E: effax-undeclared: Effect "visited"


# case: a method that reaches no handler is not an operation
@fx.uses()
def not_an_operation() -> str:
    return visited.label()


# case: handled by the effect's own handler maker
@fx.uses()
def handled() -> list[str]:
    with visited.record() as rec:
        visited.visit("encoder")
        in_row()
    in_row()  # E: effax-undeclared: "in_row" performs effect "visited"
    return list(rec.value)


# case: a handler maker without a return annotation may install anything: silent
@fx.uses()
def untyped_maker() -> None:
    with visited.record_untyped():  # type: ignore[no-untyped-call]
        visited.visit("encoder")


# case: a user-defined effect with effax.handle
@fx.uses()
def through_handle() -> str:
    recorded = fx.handle(in_row, visited.record())
    return recorded() + fx.handle(in_row, temperature.provide(1.0))()  # E: effax-undeclared: performs effect "visited"


# case: a user-defined effect at module level
visited.visit("top")  # E: effax-unhandled: Effect "visited" is performed at module level
with visited.record():
    visited.visit("top")
