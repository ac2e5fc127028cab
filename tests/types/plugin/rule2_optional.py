"""Rule 2 (round 4): `contextlib.suppress` of what performing an effect unhandled
raises is the optional-effect idiom, as `try`/`except` is; a callback stored for
later is performed where it is called, not where it is stored."""

import contextlib
from collections.abc import Callable

import effax as fx
from mylib import scaled, steps, temperature

callbacks: list[Callable[[], float]] = []
named: dict[str, Callable[[], float]] = {}


# case: suppress of UnhandledEffectError at module level
with contextlib.suppress(fx.UnhandledEffectError):
    scaled(1.0)
with contextlib.suppress(fx.EffectError):
    steps.get()
with contextlib.suppress(LookupError, ValueError):
    temperature.ask()


# case: suppress of an unrelated exception does not catch it
with contextlib.suppress(ValueError):
    scaled(1.0)  # E: effax-unhandled


# case: suppress of UndeclaredEffectError in a function with a row
@fx.uses()
def optional_inside() -> float:
    with contextlib.suppress(fx.UndeclaredEffectError):
        return scaled(1.0)
    return 0.0


# case: at module level, suppress of UndeclaredEffectError does not catch an unhandled one
with contextlib.suppress(fx.UndeclaredEffectError):
    scaled(1.0)  # E: effax-unhandled


# case: suppress imported by name, and alongside a handler
from contextlib import suppress  # noqa: E402

with suppress(fx.UnhandledEffectError), steps.init(0):
    steps.get()
    scaled(1.0)


# case: a callback appended to a list is performed where it is called
@fx.uses()
def register() -> None:
    callbacks.append(lambda: temperature.ask())
    callbacks.insert(0, lambda: scaled(1.0))
    named["t"] = lambda: temperature.ask()
    named.setdefault("u", lambda: temperature.ask())


# case: a callback appended at module level, called later under its handler
callbacks.append(lambda: scaled(2.0))
with temperature.provide(1.0):
    for callback in callbacks:
        callback()


# case: a lambda handed to a builtin that calls it at once still counts there
@fx.uses()
def sorts(xs: list[float]) -> list[float]:
    return sorted(xs, key=lambda x: x * temperature.ask())  # E: effax-undeclared


# case: callbacks kept in an attribute, a dataclass field's factory, a defaultdict
import dataclasses  # noqa: E402
from collections import defaultdict  # noqa: E402


class Registry:
    def __init__(self) -> None:
        self.hooks: list[Callable[[], float]] = []

    @fx.uses()
    def add(self) -> None:
        self.hooks.append(lambda: scaled(1.0))


@dataclasses.dataclass
class Settings:
    scale: float = dataclasses.field(default_factory=lambda: temperature.ask())


lookup: defaultdict[str, float] = defaultdict(lambda: temperature.ask())
with temperature.provide(1.0):
    Settings()
    lookup["x"]


# case: a list sorted with a key performs it at once
@fx.uses()
def sorts_in_place(xs: list[float]) -> None:
    xs.sort(key=lambda x: x * temperature.ask())  # E: effax-undeclared


# case: a list sorted in place at module level calls its key there (blind6; the list's
# type is not inferred yet where the module's walk reads it: checked at its hook)
ordered = [3.0, 1.0]
ordered.sort(key=scaled)  # E: effax-unhandled
with temperature.provide(2.0):
    ordered.sort(key=scaled)
copied = list(ordered)
copied.sort(reverse=True, key=scaled)  # E: effax-unhandled
