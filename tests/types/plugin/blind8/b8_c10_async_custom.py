"""A crawler-style program: custom effects (a trace-time visit log with a static
outcome, a spending quota), async functions with rows, worker threads with their
own cells, and a JitAwareContextVar for a request id."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import attrs
import jax
import jax.numpy as jnp

import effax as fx


class Visited(fx.Effect["Visits"]):
    """Names of the stages a program ran, known at trace time."""

    def __init__(self, name: str) -> None:
        super().__init__(name)

    def visit(self, stage: str) -> None:
        self.handler().names.append(stage)

    def record(self) -> Visits:
        return Visits(self)


@attrs.define(eq=False)
class Visits(fx.Handler[Visited]):
    effect: Visited
    names: list[str] = attrs.field(factory=list)

    @property
    def value(self) -> list[str]:
        return self.names

    def export(self) -> fx.Export:
        return fx.Export()

    @classmethod
    def rebuild(cls, effect: Visited, static: Any, const: Any, carry: Any) -> Visits:
        return cls(effect)

    def outcome(self, *, carry_required: bool) -> fx.Outcome:
        return fx.Outcome(static=tuple(self.names))

    def absorb(self, outcome: fx.Outcome, *, steps: int | None) -> None:
        if steps is None:
            raise ValueError("Visited cannot be recorded in a loop of unknown length")
        self.names.extend(list(outcome.static) * steps)


class Quota(fx.Effect["QuotaCell"]):
    """A spending budget carried as an int32 array."""

    operations = ("spend",)

    def __init__(self, name: str) -> None:
        super().__init__(name)

    def spend(self, n: int = 1) -> None:
        self.handler().spend(n)

    def unlimited(self) -> QuotaCell:
        return QuotaCell(self, jnp.int32(2**30))

    def budget(self, n):  # type: ignore[no-untyped-def]
        return QuotaCell(self, jnp.int32(n))


@attrs.define(eq=False)
class QuotaCell(fx.Handler[Quota]):
    effect: Quota
    left: jax.Array
    fields = fx.Fields(carry="left")

    def spend(self, n: int) -> None:
        self.left = self.left - n

    @property
    def value(self) -> jax.Array:
        return self.left

    @classmethod
    def rebuild(cls, effect: Quota, static: Any, const: Any, carry: Any) -> QuotaCell:
        return cls(effect, carry)


visited = Visited("visited")
quota = Quota("quota")
pages = fx.State[jax.Array]("pages")
user_agent = fx.Ask[str]("user_agent")
routes = fx.Ask[tuple[str, list[str]]]("routes", static=True)
request_id = fx.JitAwareContextVar[int]("request_id")


# case: a compiled page scorer logs its stages at trace time; the names come back on every call
@fx.uses(visited, quota)
def score_page(x: jax.Array) -> jax.Array:
    visited.visit("parse")
    quota.spend()
    visited.visit("score")
    return jnp.tanh(x).sum()


fast_score = fx.jit(score_page)
with visited.record() as log, quota.unlimited() as q:
    fast_score(jnp.ones(3))
    fast_score(jnp.ones(3))
print("stages", log.value, "quota left", int(q.value))


# case: a helper visits a stage its row does not name
@fx.uses(quota)
def fetch(x: jax.Array) -> jax.Array:
    quota.spend()
    visited.visit("fetch")  # E: effax-undeclared
    return x


with quota.unlimited(), visited.record():
    fetch(jnp.ones(2))


# case: a stage visited at module level with no recorder
visited.visit("startup")  # E: effax-unhandled


# case: spending from a quota under a scan, with the budget as a carry
with quota.unlimited() as q, visited.record() as log:
    fx.scan(lambda c, x: (c, score_page(x)), None, jnp.ones((4, 3)))
print("after scan", int(q.value), len(log.value))


# case: an async crawl whose row holds while it is awaited
@fx.uses(visited, quota, pages)
async def crawl(urls: list[str]) -> int:
    for url in urls:
        await asyncio.sleep(0)
        visited.visit(url)
        quota.spend()
        pages.modify(lambda n: n + 1)
    return len(urls)


async def main() -> int:
    with fx.handlers(visited.record(), quota.unlimited(), pages.init(jnp.int32(0))) as hs:
        n = await crawl(["a", "b", "c"])
    return n + int(hs[pages])


print("crawled", asyncio.run(main()))


# case: an async helper whose row lacks the page counter
@fx.uses(visited)
async def visit_and_count(url: str) -> None:
    visited.visit(url)
    pages.modify(lambda n: n + 1)  # E: effax-undeclared


async def run_counter() -> None:
    with visited.record(), pages.init(jnp.int32(0)):
        await visit_and_count("x")


asyncio.run(run_counter())


# case: the crawl awaited by asyncio.run at module level, nothing installed
crawled = asyncio.run(crawl(["a"]))  # E: effax-unhandled


# case: fx.handle of a coroutine function installs the handlers while it runs
handled_crawl = fx.handle(crawl, visited.record(), quota.unlimited(), pages.init(jnp.int32(0)))
print("handled crawl", asyncio.run(handled_crawl(["p", "q"])))


# case: fx.handle of the coroutine given only the recorder
crawled_partly = asyncio.run(fx.handle(crawl, visited.record())(["p"]))  # E: effax-unhandled


# case: worker threads, each with its own cells, results combined under a lock
results: list[int] = []
lock = threading.Lock()


def worker(k: int) -> None:
    with fx.handlers(visited.record(), quota.unlimited(), pages.init(jnp.int32(0))) as hs:
        asyncio.run(crawl([f"w{k}-{i}" for i in range(k)]))
    with lock:
        results.append(int(hs[pages]))


threads = [threading.Thread(target=worker, args=(k,)) for k in (1, 2, 3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("pages per worker", sorted(results))


# case: a request id in a JitAwareContextVar, read eagerly
with request_id.set_on_enter(7):
    rid = request_id.get()


# case: spending outside the row of a function that only scores
@fx.uses(visited)
def cheap_score(x: jax.Array) -> jax.Array:
    visited.visit("cheap")
    quota.spend(2)  # E: effax-undeclared
    return x.sum()


with visited.record(), quota.unlimited():
    cheap_score(jnp.ones(2))


# case: an annotated quota maker handles the quota but not the visit log
with quota.unlimited():
    score_page(jnp.ones(3))  # E: effax-unhandled


# case: the quota maker without a return annotation: nothing under it is reported
with quota.budget(5):  # E: no-untyped-call
    score_page(jnp.ones(3))  # limit: a handler maker without a return annotation


# case: a static route table holding a list
with routes.provide(("home", ["a", "b"])):  # E: effax-handler-type
    print(routes.ask())


# case: a traced user-agent string, fine eagerly, refused by the compiled call
@fx.uses(user_agent)
def header_length() -> int:
    return len(user_agent.ask())


with user_agent.provide("effax-crawler/0.3"):
    print("eager header", header_length())
    fx.jit(header_length)()  # E: effax-handler-type


# case: stages of both branches of a cond are traced, one branch's quota spent
@fx.uses(visited, quota)
def route(x: jax.Array) -> jax.Array:
    return fx.cond(x.sum() > 0, lambda: (quota.spend(), x * 2)[1], lambda: (quota.spend(), -x)[1])  # E: func-returns-value


with visited.record(), quota.unlimited() as q:
    fx.jit(route)(jnp.ones(2))
print("quota after route", int(q.value))


# case: a route called with the quota but where the cond's branches spend it outside the row
@fx.uses(visited)
def route_unbudgeted(x: jax.Array) -> jax.Array:
    return fx.cond(x.sum() > 0, lambda: (quota.spend(), x)[1], lambda: x)  # E: effax-undeclared, func-returns-value


with visited.record(), quota.unlimited():
    route_unbudgeted(jnp.ones(2))


# case: the page counter read at module level through a lambda kept in a variable
count_now = lambda: pages.get()  # noqa: E731
pages_seen = count_now()  # E: effax-unhandled, no-untyped-call


# case: an interceptor doubling every spend, installed with no quota outside it
double_spend = fx.intercept(quota, spend=lambda outer, n: outer.spend(2 * n))
with visited.record(), double_spend:
    score_page(jnp.ones(3))  # E: effax-unhandled


# case: the doubling interceptor inside an unlimited quota
with quota.unlimited() as q, visited.record(), double_spend:
    fx.jit(score_page)(jnp.ones(3))
print("doubled spend left", int(q.value))


# case: fx.uses applied to a lambda that logs a stage, called at module level
mark_done = fx.uses(visited)(lambda: visited.visit("done"))
mark_done()  # E: effax-unhandled
