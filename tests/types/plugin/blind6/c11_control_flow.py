"""Control flow wrappers, closures, partials, conditional callees and optional effects."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp

import effax as fx
from b6lib.effects import dropout, label, losses, steps, tag, temperature
from b6lib.layers import drop, report, softmax_t

X = jnp.linspace(-1.0, 1.0, 4)
limit = fx.Ask[jax.Array]("limit")


@fx.uses(steps)
def tick() -> jax.Array:
    return steps.modify(lambda n: n + 1)


@fx.uses(steps, temperature)
def body(i: int, x: jax.Array) -> jax.Array:
    tick()
    return x / temperature.ask()


# case: a fori loop and a checkpointed body inside a function whose row covers them
@fx.uses(steps, temperature)
def iterate(x: jax.Array, n: int) -> jax.Array:
    y = fx.fori_loop(0, n, body, x)
    return fx.checkpoint(lambda v: body(0, v))(y)


with steps.init(jnp.int32(0)), temperature.provide(jnp.float32(2.0)):
    iterated = fx.jit(iterate, static_argnums=1)(X, 3)


# case: a cond branch that asks for the temperature the row does not name
@fx.uses(steps)
def clipped(x: jax.Array) -> jax.Array:
    tick()
    return fx.cond(x.sum() > 0, lambda: x * temperature.ask(), lambda: x)  # E: effax-undeclared


with steps.init(jnp.int32(0)), temperature.provide(jnp.float32(2.0)):
    clipped_out = clipped(jnp.ones(2))


# case: switch over row functions, all in the caller's row
@fx.uses(temperature, dropout)
def pick(i: jax.Array, x: jax.Array) -> jax.Array:
    return fx.switch(i, [softmax_t, lambda v: drop(v, 0.5)], x)


with temperature.provide(jnp.float32(1.0)), dropout.seed(0):
    picked = [pick(jnp.int32(k), X) for k in (0, 1)]


# case: the switch in a row without the dropout stream, taking the dropout branch
@fx.uses(temperature)
def pick_narrow(i: jax.Array, x: jax.Array) -> jax.Array:
    return fx.switch(i, [softmax_t, lambda v: drop(v, 0.5)], x)  # E: effax-undeclared


with temperature.provide(jnp.float32(1.0)), dropout.seed(0):
    picked_narrow = pick_narrow(jnp.int32(1), X)


# case: a while loop whose condition reads a limit outside the row
@fx.uses(steps)
def count_to_limit() -> jax.Array:
    return fx.while_loop(lambda n: n < limit.ask(), lambda n: n + tick() * 0 + 1, jnp.asarray(0.0))  # E: effax-undeclared


with steps.init(jnp.int32(0)), limit.provide(jnp.float32(3.0)):
    counted_to = count_to_limit()


# case: a checkpointed function and a partial of a row function, in a narrower row
@fx.uses(steps)
def remat_in_narrow(x: jax.Array) -> jax.Array:
    cheap = fx.checkpoint(functools.partial(body, 0))
    return cheap(x)  # E: effax-undeclared


with steps.init(jnp.int32(0)), temperature.provide(jnp.float32(1.0)):
    remat_out = remat_in_narrow(X)


# case: a conditional callee inside a function with a row: what either performs
@fx.uses(temperature, dropout)
def either(x: jax.Array, sharp: bool) -> jax.Array:
    return (softmax_t if sharp else drop)(x)


@fx.uses(temperature)
def either_narrow(x: jax.Array, sharp: bool) -> jax.Array:
    return (softmax_t if sharp else drop)(x)  # E: effax-undeclared


with temperature.provide(jnp.float32(1.0)), dropout.seed(1):
    either_ok = either(X, False)
    either_bad = either_narrow(X, False)


# case: nested defs and lambdas held in variables, called inside a row that covers them
@fx.uses(steps, temperature)
def nested_ok(x: jax.Array) -> jax.Array:
    def scale(v: jax.Array) -> jax.Array:
        return v / temperature.ask()

    bump = lambda: tick()  # noqa: E731
    bump()  # E: no-untyped-call
    return scale(x)


with steps.init(jnp.int32(0)), temperature.provide(jnp.float32(4.0)):
    nested = nested_ok(X)


# case: a nested def asking the temperature, called in a row that only counts steps
@fx.uses(steps)
def nested_narrow(x: jax.Array) -> jax.Array:
    def scale(v: jax.Array) -> jax.Array:
        return v / temperature.ask()

    tick()
    return scale(x)  # E: effax-undeclared


@fx.uses(steps)
def lambda_narrow(x: jax.Array) -> jax.Array:
    warm = lambda v: v * temperature.ask()  # noqa: E731
    tick()
    return warm(x)  # E: effax-undeclared, no-any-return, no-untyped-call


with steps.init(jnp.int32(0)), temperature.provide(jnp.float32(4.0)):
    nested_bad = nested_narrow(X)
with steps.init(jnp.int32(0)), temperature.provide(jnp.float32(4.0)):
    lambda_bad = lambda_narrow(X)

# case: optional effects: the except clause catches what performing them unhandled raises
try:
    t0 = temperature.ask()
except fx.UnhandledEffectError:
    t0 = jnp.float32(1.0)
with contextlib.suppress(LookupError):
    report(jnp.float32(1.0))


@fx.uses(steps)
def optional_temperature(x: jax.Array) -> jax.Array:
    tick()
    try:
        return x / temperature.ask()
    except fx.UndeclaredEffectError:
        return x


with steps.init(jnp.int32(0)), temperature.provide(jnp.float32(2.0)):
    optional = optional_temperature(X)

# case: optional effects caught with the wrong error class
try:
    t1 = temperature.ask()  # E: effax-unhandled
except fx.UndeclaredEffectError:
    t1 = jnp.float32(1.0)


@fx.uses(steps)
def optional_wrong(x: jax.Array) -> jax.Array:
    tick()
    try:
        return x / temperature.ask()  # E: effax-undeclared
    except fx.UnhandledEffectError:
        return x


with steps.init(jnp.int32(0)), temperature.provide(jnp.float32(2.0)):
    optional_bad = optional_wrong(X)

# case: a list of row functions written in place and read with a number
with temperature.provide(jnp.float32(1.0)):
    first = [softmax_t, report][0](X)

# case: the in-place list read with a number, nothing installed
first_bad = [softmax_t, report][0](X)  # E: effax-unhandled

# case: a conditional callee at module level inside an unrelated `with`
with losses.collect():
    chosen_bad = (softmax_t if X.sum() > 10 else drop)(X)  # E: effax-unhandled


# case: a State[str] and a traced Ask[str] read eagerly: legal
@fx.uses(tag, label)
def describe_run() -> str:
    return f"{tag.get()}:{label.ask()}"


with tag.init("run-1"), label.provide("baseline"):
    described = describe_run()

# case: the same strings read in compiled code
with tag.init("run-1"):
    tag_jit = fx.jit(lambda: tag.get())()  # E: effax-handler-type
with tag.init("run-1"), label.provide("baseline"):
    described_jit = fx.jit(describe_run)()  # E: effax-handler-type, effax-handler-type

# case: handlers entered by hand on an ExitStack (the rest of the block is not checked)
with contextlib.ExitStack() as stack:
    stack.enter_context(temperature.provide(jnp.float32(1.0)))
    stack.enter_context(losses.collect())
    report(jnp.sum(softmax_t(X)))
with contextlib.ExitStack() as stack:
    stack.enter_context(temperature.provide(jnp.float32(1.0)))
    report(jnp.sum(softmax_t(X)))  # limit: handlers entered by hand on an ExitStack: the rest of the block is not reported


# case: a context manager of one's own installing handlers
@contextlib.contextmanager
def evaluation() -> Iterator[None]:
    with fx.handlers(temperature.provide(jnp.float32(1.0)), losses.discard()):
        yield


with evaluation():
    report(jnp.sum(softmax_t(X)))
with evaluation():
    dropped = drop(X)  # limit: a context manager of one's own may install handlers: nothing under it is reported


# case: effax's own functions and row functions held in variables and containers
wrap = fx.handle
ops: dict[str, Callable[[jax.Array], jax.Array]] = {"soft": softmax_t, "drop": drop}
with temperature.provide(jnp.float32(1.0)):
    via_variable = wrap(softmax_t, losses.collect())(X)
    via_dict = ops["soft"](X)
via_dict_bad = ops["drop"](X)  # limit: functions held in containers are not followed
via_variable_bad = wrap(softmax_t, losses.collect())(X)  # limit: effax's own functions held in variables are not followed


def apply(f: Callable[[], jax.Array]) -> jax.Array:
    return f()


with dropout.seed(0):
    applied = apply(lambda: drop(X))
applied_bad = apply(lambda: drop(X))  # limit: a lambda handed to a function of one's own counts where that function calls it


# case: a traced Ask[str] read in a scan body (an eager scan compiles its body)
with label.provide("baseline"):
    lengths, _ = fx.scan(lambda c, x: (c + len(label.ask()), None), 0, None, length=2)  # E: effax-handler-type
