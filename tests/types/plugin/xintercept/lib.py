"""A library module of the `xintercept` package: no cases, mypy must report nothing here."""

import effax as fx

losses = fx.Emit[float]("losses")
rate = fx.Ask[float]("rate", default=0.1)
draws = fx.State[int]("draws")


class ScaledLoss(fx.Interceptor[fx.Emit[float]]):
    """Forwards every loss, scaled, to the collector outside."""

    def __init__(self, effect: fx.Emit[float], factor: float) -> None:
        super().__init__(effect, ())
        self.factor = factor

    def emit(self, value: float) -> None:
        outer = self.outer()
        assert isinstance(outer, fx.Collector)
        outer.emit(self.factor * value)


class Silenced(fx.Interceptor[fx.Emit[float]]):
    """Drops every loss: it answers alone."""

    def emit(self, value: float) -> None:
        del value


class LouderLoss(ScaledLoss):
    """Inherits its forwarding emit."""


class CountingLoss(fx.Interceptor[fx.Emit[float]]):
    """Counts every loss in the draws State outside it, then forwards it."""

    def emit(self, value: float) -> None:
        draws.modify(lambda n: n + 1)
        outer = self.outer()
        assert isinstance(outer, fx.Collector)
        outer.emit(value)


def counting_rate(outer: fx.Provider[float]) -> float:
    draws.modify(lambda n: n + 1)
    return outer.ask()


@fx.uses(losses)
def report(x: float) -> float:
    losses.emit(x)
    return x


COUNTING_RATE = fx.intercept(rate, ask=counting_rate)  # its type carries what it does
PINNED_RATE = fx.intercept(rate, ask=lambda outer: 0.5)
