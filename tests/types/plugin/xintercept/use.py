"""Cross-module cases: interceptors defined in `xintercept.lib`, installed here."""

import effax as fx
from xintercept.lib import (
    CountingLoss,
    LouderLoss,
    ScaledLoss,
    Silenced,
    counting_rate,
    draws,
    losses,
    rate,
    report,
)

# case: a forwarding subclass from another module handles nothing alone
with ScaledLoss(losses, 0.5):
    report(1.0)  # E: effax-unhandled: "report" performs effect "losses"
with LouderLoss(losses, 2.0):
    losses.emit(1.0)  # E: effax-unhandled
with losses.collect(), ScaledLoss(losses, 0.5):
    report(1.0)


# case: a subclass from another module that answers alone handles its effect
with Silenced(losses, ()):
    report(1.0)


# case: a forwarding subclass from another module inside a pure entry point
@fx.uses()
def entry() -> float:
    with ScaledLoss(losses, 0.5):
        return report(1.0)  # E: effax-undeclared


# case: kept with effax.handle in a variable, or spread from a tuple
scaled_only = fx.handle(report, ScaledLoss(losses, 3.0))
scaled_only(1.0)  # E: effax-unhandled
only = (ScaledLoss(losses, 2.0), fx.intercept(losses, emit=lambda o, v: o.emit(v)))
with fx.handlers(*only):
    report(1.0)  # E: effax-unhandled


# case: a function of another module as an interceptor's function: it forwards, and performs what its body does (read from its source: mypy freed the body)
with fx.intercept(rate, ask=counting_rate):
    rate.ask()  # E: effax-unhandled, effax-unhandled
with draws.init(0), fx.intercept(rate, ask=counting_rate):
    rate.ask()  # E: effax-unhandled: Effect "rate"
with draws.init(0), rate.provide(1.0), fx.intercept(rate, ask=counting_rate):
    rate.ask()
with rate.provide(1.0), fx.intercept(rate, ask=counting_rate):
    rate.ask()  # E: effax-unhandled: "effax.intercept(...)" performs effect "draws"


# case: an Interceptor subclass of another module: its method's body read from its source
with draws.init(0), losses.collect(), CountingLoss(losses, ()):
    report(1.0)
with losses.collect(), CountingLoss(losses, ()):
    report(1.0)  # E: effax-unhandled: "CountingLoss(...)" performs effect "draws"


# case: interceptors held in another module's variables (their module's tree is freed): their types say what they do
from xintercept.lib import COUNTING_RATE, PINNED_RATE  # noqa: E402

with COUNTING_RATE:
    rate.ask()  # E: effax-unhandled, effax-unhandled
with draws.init(0), rate.provide(1.0), COUNTING_RATE:
    rate.ask()
with PINNED_RATE:
    rate.ask()
