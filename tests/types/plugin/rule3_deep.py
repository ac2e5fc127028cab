"""Rule 3 (issue 28): a static Ask's value is hashed with everything it holds (a
list inside a tuple or a frozen dataclass makes it unhashable); a traced `Ask[str]`
given a str is reported only where a compiled call under it performs it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax

import effax as fx

cfg = fx.Ask[object]("cfg", static=True)
mode = fx.Ask[str]("mode")


@dataclass(frozen=True)
class Conf:
    xs: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Good:
    xs: tuple[int, ...] = ()
    inner: tuple[str, float] = ("a", 1.0)


class Pair(NamedTuple):
    a: int
    b: list[int]


# case: unhashable deep inside a static Ask's value
cfg.provide(Conf())  # E: effax-handler-type: Ask "cfg" is static, so its value is hashed into the jit cache key, but "provide" is given an unhashable "Conf"
cfg.provide(([1], [2]))  # E: effax-handler-type: unhashable "tuple[list, list]"
cfg.provide(Pair(1, [2]))  # E: effax-handler-type


# case: a field typed Any given a list where the value is built (found by blind10):
# the inferred types of what it is built from
@dataclass(frozen=True)
class Loose:
    widths: Any
    lr: float = 1e-2


cfg.provide(Loose([8, 8]))  # E: effax-handler-type: unhashable "Loose"
cfg.provide(Loose(widths=(1, [2])))  # E: effax-handler-type
cfg.provide((1, Loose({"a": 1})))  # E: effax-handler-type
cfg.provide(Loose((8, 8)))
cfg.provide(Loose(widths=(1, (2,)), lr=0.5))
loose = Loose([8])
cfg.provide(loose)  # (built elsewhere: its type says nothing more)


# case: hashable all the way down
cfg.provide(Good())
cfg.provide(((1, 2), ("a", 3.0)))
cfg.provide(frozenset({1, 2}))


@fx.uses(mode)
def show() -> None:
    print(mode.ask())


# case: a str for a traced Ask[str] used eagerly only
with mode.provide("train"):
    show()
fx.handle(show, mode.provide("eval"))()


# case: a str for a traced Ask[str] that a compiled call performs
with mode.provide("train"):
    fx.jit(show)()  # E: effax-handler-type: Ask "mode" is traced
fx.handle(show, mode.provide("eval"), transform=jax.jit)()  # E: effax-handler-type
