"""Recorded taps in conds and vmaps nested in each other (issue 39, item 4): a
cond whose branches record different things, one of them in an `effax.vmap` (its
masks carry the batch), records what the Python program records: `if` for cond,
a Python loop over the batch for vmap, a Python loop for scan. Where the docs make
it a named error (a branch taken by some elements of a batch and not by others),
reading the recording raises it.

Each program is written once against `ops` and run twice: by `EFFAX` (effax's
wrappers under `acts.record()`, eagerly and under `effax.jit`) and by `Python`
(which logs each tap itself)."""

import jax
import jax.numpy as jnp
import pytest
from helpers import assert_bitwise_equal

import effax as fx

F32 = jnp.float32
acts = fx.Tap[jax.Array]("acts")
YS = jnp.array([1.0, 2.0, 3.0], F32)
MIXED = r"'a'.*some elements of an effax.vmap batch"


class Effax:
    tap = staticmethod(acts.tap)
    cond = staticmethod(fx.cond)
    switch = staticmethod(fx.switch)
    scan = staticmethod(fx.scan)

    @staticmethod
    def vmap(f, xs):
        return fx.vmap(f)(xs)


class Python:
    """The reference: Python `if`s and loops; a batch is a loop over its elements,
    whose taps of a site are stacked per tap along the batch axis."""

    def __init__(self):
        self.log = {}  # site -> its taps' values, in order
        self.mixed = set()  # sites some elements of a batch tapped and others did not

    def tap(self, site, value):
        self.log.setdefault(site, []).append(jnp.asarray(value))
        return value

    def cond(self, pred, true_fun, false_fun, *operands):
        return true_fun(*operands) if bool(pred) else false_fun(*operands)

    def switch(self, index, branches, *operands):
        return branches[int(index)](*operands)

    def scan(self, f, carry, xs):
        ys = []
        for i in range(len(jax.tree.leaves(xs)[0])):
            carry, y = f(carry, jax.tree.map(lambda x, i=i: x[i], xs))
            ys.append(y)
        return carry, jax.tree.map(lambda *y: jnp.stack(y), *ys)

    def vmap(self, f, xs):
        outer, per, outs = self.log, [], []
        for i in range(len(jax.tree.leaves(xs)[0])):
            self.log = {}
            outs.append(f(jax.tree.map(lambda x, i=i: x[i], xs)))
            per.append(self.log)
        self.log = outer
        for site in dict.fromkeys(s for p in per for s in p):
            counts = {len(p.get(site, [])) for p in per}
            if len(counts) > 1:
                self.mixed.add(site)
                continue
            for j in range(counts.pop()):
                outer.setdefault(site, []).append(jnp.stack([p[site][j] for p in per]))
        return jax.tree.map(lambda *y: jnp.stack(y), *outs)

    def recorded(self):
        return {s: v[0] if len(v) == 1 else jnp.stack(v) for s, v in self.log.items()}


EFFAX = Effax()
WRAPS = {"eager": lambda f: f, "jit": fx.jit}


def check(program, *args):
    """`program` records, eagerly and under effax.jit, what the Python program
    does, or raises the named error where the Python program's batch was mixed."""
    reference = Python()
    want_out = program(reference, *args)
    for name, wrap in WRAPS.items():
        with acts.record() as r:
            out = wrap(lambda *a: program(EFFAX, *a))(*args)
        assert_bitwise_equal(out, want_out)
        if reference.mixed:
            with pytest.raises(fx.EffectUsageError, match=MIXED):
                _ = r.value
            continue
        got = r.value
        assert list(got) == sorted(got)  # (sites come out by name)
        assert sorted(got) == sorted(reference.log), name
        assert_bitwise_equal(got, {s: reference.recorded()[s] for s in got})
    return reference


# The inner cond, run per element of a batch: its predicate unbatched (q, from
# outside the vmap) or batched (each element's own y).
def inner_unbatched(ops, q, y):
    return ops.cond(q > 0, lambda: ops.tap("a", y * 2 + q), lambda: y - q)


def inner_batched(ops, q, y):
    return ops.cond(y > q, lambda: ops.tap("a", y * 2 + q), lambda: y - q)


def batch_branch(ops, inner, q):
    return lambda: jnp.sum(ops.vmap(lambda y: inner(ops, q, y), YS))


def taps_nothing_first(inner):
    def program(ops, p, q):
        return ops.cond(p > 0, lambda: p * 3, batch_branch(ops, inner, q))

    return program


def taps_nothing_second(inner):
    def program(ops, p, q):
        return ops.cond(p > 0, batch_branch(ops, inner, q), lambda: p * 3)

    return program


PS = [F32(1.0), F32(-1.0)]
INNER = {
    # q: every element takes the inner tapping branch / none does / some do
    "unbatched": (inner_unbatched, [F32(1.0), F32(-1.0)], []),
    "batched": (inner_batched, [F32(0.0), F32(10.0)], [F32(1.5)]),
}
ORDERS = {"nothing first": taps_nothing_first, "nothing second": taps_nothing_second}


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("inner", list(INNER))
def test_a_cond_with_a_branch_that_taps_nothing_and_one_that_vmaps_an_inner_cond(order, inner):
    fn, alike, mixed = INNER[inner]
    program = ORDERS[order](fn)
    outcomes = set()
    for p in PS:
        for q in alike + mixed:
            reference = check(program, p, q)
            outcomes.add((bool(reference.log), bool(reference.mixed)))
    # (the cases cover recorded, not recorded, and, batched, a mixed batch)
    assert outcomes == ({(True, False), (False, False)} | ({(False, True)} if mixed else set()))


@pytest.mark.parametrize("inner", list(INNER))
def test_switch_of_three_branches_one_tapping_nothing_one_batched_one_unbatched(inner):
    fn, alike, mixed = INNER[inner]

    def program(ops, i, q):
        return ops.switch(
            i,
            [
                lambda: q * 3,
                batch_branch(ops, fn, q),
                lambda: jnp.sum(ops.tap("a", YS * 5)) + ops.tap("b", q),
            ],
        )

    for i in range(3):
        for q in alike + mixed:
            check(program, jnp.int32(i), q)


@pytest.mark.parametrize("order", list(ORDERS))
@pytest.mark.parametrize("inner", list(INNER))
def test_in_a_scan_each_step_records_its_branch(order, inner):
    fn, alike, mixed = INNER[inner]
    program = ORDERS[order](fn)
    # steps 0 and 2 run the batch branch, step 1 the other; a mixed batch in a
    # step whose branch did not run records nothing
    sign = 1.0 if order == "nothing second" else -1.0
    ps = sign * jnp.array([1.0, -1.0, 2.0], F32)
    qs = [alike[0], (mixed or alike)[-1], alike[0]]

    def looped(ops, ps, qs):
        return ops.scan(lambda c, pq: (c + program(ops, *pq), c), F32(0.0), (ps, qs))

    reference = check(looped, ps, jnp.stack(qs))
    assert reference.log and not reference.mixed
    if mixed:  # a mixed batch in a step whose branch ran: the named error
        check(looped, ps, jnp.stack([alike[0], alike[0], mixed[0]]))


@pytest.mark.parametrize("inner", list(INNER))
def test_under_an_outer_vmap_of_the_outer_cond(inner):
    fn, alike, _ = INNER[inner]

    def program(ops, ps, q):
        return ops.vmap(lambda p: taps_nothing_first(fn)(ops, p, q), ps)

    for ps in ([F32(-1.0), F32(-2.0)], [F32(1.0), F32(2.0)], [F32(1.0), F32(-2.0)]):
        for q in alike:
            check(program, jnp.stack(ps), q)


def test_branches_batched_over_batches_of_other_sizes_record_one_site():
    """A site of shape (2, 3) tapped in a vmap of 2 x 3 elements in one branch and
    in a vmap of 2 in another: their masks have widths 6 and 2."""

    def by_element(ops, q, y):
        return ops.cond(jnp.all(y > q), lambda: ops.tap("a", y * 2), lambda: y)

    def program(ops, i, q):
        grid = jnp.arange(6.0, dtype=F32).reshape(2, 3)
        return ops.switch(
            i,
            [
                lambda: q,
                lambda: jnp.sum(
                    ops.vmap(lambda r: ops.vmap(lambda y: by_element(ops, q, y), r), grid)
                ),
                lambda: jnp.sum(ops.vmap(lambda r: by_element(ops, q, r), grid + 1)),
            ],
        )

    for i in range(3):
        for q in (F32(-1.0), F32(10.0), F32(2.5)):
            check(program, jnp.int32(i), q)
