"""Emitted losses and metrics: collectors held in variables, lists, dicts, comprehensions."""

from __future__ import annotations

import functools
import operator
from typing import Any

import jax
import jax.numpy as jnp

import effax as fx
from b6lib.effects import losses, metrics, running_loss
from b6lib.layers import report
from b6lib.training import track

LOSSES = [jnp.float32(v) for v in (0.9, 0.5, 0.3)]


@fx.uses(losses, metrics)
def log_step(loss: jax.Array, grad_norm: jax.Array) -> jax.Array:
    report(loss)
    metrics.emit({"loss": loss, "grad_norm": grad_norm})
    return loss


@fx.uses(metrics)
def log_metrics(**values: jax.Array) -> None:
    metrics.emit(dict(values))


# case: collectors held in variables, unpacked from a tuple
loss_log, metric_log = losses.collect(), metrics.collect()
with loss_log, metric_log:
    for v in LOSSES:
        log_step(v, 2 * v)
per_key = metric_log.stacked()

# case: the metrics collector rebound to the losses' before the `with`
collector: fx.Handler[Any] = metrics.collect()
collector = losses.collect()
with collector:
    log_step(LOSSES[0], LOSSES[1])  # E: effax-unhandled

# case: a walrus binding the bundle in the `with`, values taken per step
with (hs := fx.handlers(losses.collect(), metrics.collect())):
    for v in LOSSES:
        log_step(v, v)
        taken = hs.handler(losses).take()

# case: comprehensions and generator expressions reporting losses with nothing installed
reported = [report(v) for v in LOSSES]  # E: effax-unhandled
total = sum(report(v) for v in LOSSES)  # E: effax-unhandled, misc
with metrics.collect():
    logged = {i: log_step(v, v) for i, v in enumerate(LOSSES)}  # E: effax-unhandled

# case: the same comprehensions under a collector, and a discarder in evaluation
with losses.collect() as got:
    reported_ok = [report(v) for v in LOSSES]
    total_ok = sum(report(v) for v in LOSSES)
with losses.discard(), metrics.discard():
    logged_ok = {i: log_step(v, v) for i, v in enumerate(LOSSES)}

# case: a row function handed to builtins that call it at once
with losses.collect():
    mapped = list(map(report, LOSSES))
    ordered = sorted(LOSSES, key=report)
    folded = functools.reduce(operator.add, map(report, LOSSES))

# case: the same builtins with nothing installed
mapped_bad = list(map(report, LOSSES))  # E: effax-unhandled
ordered_bad = sorted(LOSSES, key=report)  # E: effax-unhandled
ordered_bad_in_place = list(LOSSES)
ordered_bad_in_place.sort(key=report)  # E: effax-unhandled

# case: handlers in a list typed as handlers, spread into fx.handlers
cells: list[fx.Handler[Any]] = [losses.collect(), metrics.collect()]
with fx.handlers(*cells) as bundle:
    log_step(LOSSES[0], LOSSES[0])
emitted = bundle[metrics]

# case: a list spread that holds only the losses' collector
only_losses: list[fx.Handler[Any]] = [losses.collect()]
with fx.handlers(*only_losses):
    log_step(LOSSES[0], LOSSES[0])  # E: effax-unhandled

# case: a conditional `with` whose branches both collect the losses
keep_values = len(LOSSES) > 5
with losses.collect() if keep_values else losses.discard():
    report(LOSSES[0])

# case: a conditional `with` whose branches handle different effects
with losses.collect() if keep_values else metrics.collect():
    report(LOSSES[1])  # E: effax-unhandled

# case: kwargs metrics emitted from a scan body, stacked per step
with metrics.collect() as scan_metrics:
    fx.scan(lambda c, x: (c + x, log_metrics(x=x, sq=x * x)), jnp.float32(0), jnp.arange(3.0))

# case: the scan with its metrics collector missing
final_sum, _ = fx.scan(lambda c, x: (c + x, log_metrics(x=x)), jnp.float32(0), jnp.arange(3.0))  # E: effax-unhandled


# case: a metrics logger class with a method row, called from a loop of a function with a row
class MetricsLogger:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    @fx.uses(metrics)
    def log(self, name: str, value: jax.Array) -> None:
        metrics.emit({f"{self.prefix}/{name}": value})


@fx.uses(metrics, losses)
def epoch(logger: MetricsLogger) -> None:
    for i, v in enumerate(LOSSES):
        logger.log(f"step{i}", report(v))


with fx.handlers(metrics.collect(), losses.collect()) as epoch_hs:
    epoch(MetricsLogger("train"))


# case: the logger called from a function whose row holds only the losses
@fx.uses(losses)
def epoch_narrow(logger: MetricsLogger) -> None:
    for i, v in enumerate(LOSSES):
        logger.log(f"step{i}", report(v))  # E: effax-undeclared


with fx.handlers(metrics.collect(), losses.collect()):
    epoch_narrow(MetricsLogger("train"))

# case: collectors kept in a dict and spread from its values (a spread the plugin cannot list)
by_name: dict[str, fx.Handler[Any]] = {"losses": losses.collect(), "metrics": metrics.collect()}
with fx.handlers(*by_name.values()):
    log_step(LOSSES[0], LOSSES[2])
only_metrics: dict[str, fx.Handler[Any]] = {"metrics": metrics.collect()}
with fx.handlers(*only_metrics.values()):
    log_step(LOSSES[0], LOSSES[2])  # limit: a spread the plugin cannot list (a dict's values): nothing under it is reported

# case: a collector chosen in a branch and read after it
if len(LOSSES) > 10:
    chosen: fx.Handler[Any] = losses.collect()
else:
    chosen = metrics.collect()
with chosen:
    report(LOSSES[2])  # limit: a handler variable bound in a branch and read after it: nothing under it is reported


# case: a running mean of the losses in a State[float] started from a float, updated in a scan
with running_loss.init(0.0) as ema:
    fx.scan(lambda c, v: (c, track(v)), 0, jnp.stack(LOSSES))

# case: the running mean started from an int, updated in a scan
with running_loss.init(0) as ema_int:  # E: effax-handler-type
    fx.scan(lambda c, v: (c, track(v)), 0, jnp.stack(LOSSES))


# case: a summary function whose row holds the metrics but not the losses it reports
@fx.uses(metrics)
def summarise(values: list[jax.Array]) -> None:
    mean = jnp.mean(jnp.stack(values))
    metrics.emit({"mean": mean})
    report(mean)  # E: effax-undeclared


with metrics.collect(), losses.collect():
    summarise(LOSSES)
