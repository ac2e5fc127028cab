"""effax.grad / value_and_grad / vmap / checkpoint against eager Python."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bitwise_equal, assert_transparent, counting_compiles

import effax as fx

# the core transparency suite: leak-checked on every JAX line, run on the middle one
pytestmark = pytest.mark.core

scale = fx.Ask[jax.Array]("scale")
calls = fx.State[jax.Array]("calls")
stream = fx.RandomKey("stream")
log = fx.Emit[jax.Array]("log")


def handlers(counter=None):
    return fx.handlers(
        scale.provide(jnp.float32(3)),
        calls.init(jnp.int32(0) if counter is None else counter),
        stream.seed(jax.random.key(5)),
        log.collect(),
    )


def loss(w, x):
    calls.set(calls.get() + 1)
    noise = jax.random.normal(stream.next_key(), x.shape)
    log.emit(jnp.sum(x))
    return jnp.sum((w * x + noise) ** 2) * scale.ask()


def after(hs):
    return hs[calls], hs[stream].counter, stream.next_key(), hs[log]


W, X = jnp.float32(0.5), jnp.arange(3.0)


def hand_plumbed_loss(w, x, key, counter, s):
    noise = jax.random.normal(jax.random.fold_in(key, counter), x.shape)
    return jnp.sum((w * x + noise) ** 2) * s


@pytest.mark.parametrize("wrap", [lambda f: f, fx.jit], ids=["eager", "in-jit"])
def test_grad_matches_hand_plumbed_and_updates_handlers(wrap):
    with handlers() as hs:
        g = wrap(lambda w, x: fx.grad(loss)(w, x))(W, X)
        ours = after(hs)
    with handlers() as hs:
        loss(W, X)  # the eager call: same handler updates
        theirs = after(hs)
    expected = jax.grad(hand_plumbed_loss)(W, X, jax.random.key(5), 0, jnp.float32(3))
    assert_transparent(g, expected)
    assert_transparent(ours, theirs)


def test_value_and_grad_argnums_and_aux():
    def f(w, x):
        return loss(w, x), {"calls": calls.get()}

    with handlers() as hs:
        (value, aux), grads = fx.value_and_grad(f, argnums=(0, 1), has_aux=True)(W, X)
        grads_only, aux2 = fx.grad(f, argnums=1, has_aux=True)(W, X)
    key = jax.random.key(5)
    ref_value, ref_grads = jax.value_and_grad(hand_plumbed_loss, argnums=(0, 1))(
        W, X, key, 0, jnp.float32(3)
    )
    assert_transparent((value, grads), (ref_value, ref_grads))
    assert int(aux["calls"]) == 1 and int(aux2["calls"]) == 2
    assert int(hs[calls]) == 2
    np.testing.assert_allclose(
        grads_only,
        jax.grad(hand_plumbed_loss, argnums=1)(W, X, key, 1, jnp.float32(3)),
        rtol=1e-6,
    )


def test_grad_of_scan_with_state_and_keys_under_handle_jit():
    """Acceptance: effax.grad of an effax.scan, compiled, equals jax.grad of hand plumbing."""

    def model(w):
        def body(c, x):
            calls.set(calls.get() + 1)
            noise = jax.random.normal(stream.next_key())
            return c + (w * x + noise) ** 2, None

        total, _ = fx.scan(body, jnp.float32(0), X)
        return total * scale.ask()

    def hand(w, key, counter, s):
        def body(carry, x):
            c, n = carry
            noise = jax.random.normal(jax.random.fold_in(key, n))
            return (c + (w * x + noise) ** 2, n + 1), None

        (total, _), _ = jax.lax.scan(body, (jnp.float32(0), counter), X)
        return total * s

    step = fx.handle(lambda w: fx.value_and_grad(model)(w), transform=jax.jit)
    with handlers() as hs:
        ours = [step(W) for _ in range(2)]
        ours_after = after(hs)
    key = jax.random.key(5)
    theirs = [jax.jit(jax.value_and_grad(hand))(W, key, c, jnp.float32(3)) for c in (0, 3)]
    assert_transparent(ours, theirs)
    assert int(ours_after[0]) == 6 and ours_after[1] == 6


def test_grad_rejects_nothing_it_should_not():
    # reads and writes through effax.grad are legal, unlike raw jax.grad writes
    with calls.init(jnp.float32(0)):
        with pytest.raises(fx.EffectLeakError):
            jax.grad(lambda w: (calls.set(w), w)[1])(1.0)
        fx.grad(lambda w: (calls.set(jax.lax.stop_gradient(w) * 0 + 2.0), w * 1.0)[1])(1.0)


# --- vmap -------------------------------------------------------------------------


def per_example(x):
    noise = jax.random.normal(stream.next_key())
    log.emit(x * 2)
    return x * scale.ask() + noise + jax.random.uniform(stream.next_key())


XS = jnp.arange(4.0)


@pytest.mark.parametrize("wrap", [lambda f: f, fx.jit], ids=["eager", "in-jit"])
def test_vmap_split_keys_matches_python_loop(wrap):
    with handlers() as hs:
        ours = wrap(lambda xs: fx.vmap(per_example)(xs))(XS), after(hs)
    with handlers() as hs:
        base = jax.random.fold_in(jax.random.key(5), 0)  # the one key the stream draws
        ys = []
        for b, x in enumerate(XS):
            with stream.seed(jax.random.fold_in(base, b)):
                ys.append(per_example(x))
        stream.next_key()  # the stream advanced by one
        theirs = jnp.stack(ys), after(hs)
    assert_transparent(ours[0], theirs[0])
    assert_bitwise_equal(ours[1][2], theirs[1][2])
    assert ours[1][1] == theirs[1][1] == 1
    np.testing.assert_array_equal(ours[1][3][0], jnp.stack(theirs[1][3]))


def test_vmap_shared_keys_matches_python_loop():
    with handlers() as hs:
        ours = fx.vmap(per_example, keys="shared")(XS), after(hs)
    with handlers() as hs:
        ys = []
        for x in XS:
            hs.handler(stream).offset = 0  # every element draws the unbatched keys
            ys.append(per_example(x))
        theirs = jnp.stack(ys), after(hs)
    assert_transparent(ours[0], theirs[0])
    assert_bitwise_equal(ours[1][2], theirs[1][2])
    assert ours[1][1] == 2


def test_vmap_shared_state_write_of_batched_value_raises():
    def f(x):
        calls.set(calls.get() + x.astype(jnp.int32))
        return x

    with handlers() as hs:
        with pytest.raises(fx.EffectLeakError, match=r"State\('calls'\).*state='batched'"):
            fx.vmap(f)(XS)
        assert int(hs[calls]) == 0
        # a batch-independent update is fine under the shared policy
        fx.vmap(lambda x: (calls.set(calls.get() + 1), x)[1])(XS)
        assert int(hs[calls]) == 1


def test_vmap_batched_state_matches_python_loop():
    def f(x):
        calls.set(calls.get() + x.astype(jnp.int32))
        return x * 2

    with handlers(counter=jnp.zeros(4, jnp.int32)) as hs:
        ys = fx.vmap(f, state="batched")(XS)
        np.testing.assert_array_equal(hs[calls], [0, 1, 2, 3])
    np.testing.assert_array_equal(ys, XS * 2)


def test_vmap_in_axes_and_axis_name():
    def f(x, y):
        return jax.lax.psum(x, "b") * y + jax.random.normal(stream.next_key())

    with handlers():
        out = fx.vmap(f, in_axes=(0, None), axis_name="b")(XS, 2.0)
    assert out.shape == (4,)
    assert len(set(np.asarray(out - 12.0).tolist())) == 4  # distinct keys per element


def test_scan_inside_vmap_inside_jit_matches_python():
    def inner(x):
        def body(c, _):
            return c + jax.random.normal(stream.next_key()), None

        return fx.scan(body, x, None, length=3)[0]

    with handlers() as hs:
        ours = fx.jit(lambda xs: fx.vmap(inner)(xs))(XS), after(hs)
    with handlers() as hs:
        base = jax.random.fold_in(jax.random.key(5), 0)
        ys = []
        for b, x in enumerate(XS):
            with stream.seed(jax.random.fold_in(base, b)):
                c = x
                for _ in range(3):
                    c = c + jax.random.normal(stream.next_key())
                ys.append(c)
        stream.next_key()
        theirs = jnp.stack(ys), after(hs)
    assert_transparent(ours[0], theirs[0])
    assert_bitwise_equal(ours[1][2], theirs[1][2])


# --- checkpoint -------------------------------------------------------------------


def test_checkpoint_matches_eager_and_differentiates():
    f = fx.checkpoint(loss)
    with handlers() as hs:
        value = f(W, X)
        ours = value, after(hs)
    with handlers() as hs:
        theirs = loss(W, X), after(hs)
    assert_transparent(ours, theirs)
    with handlers():
        g = fx.grad(f)(W, X)
    assert_transparent(g, jax.grad(hand_plumbed_loss)(W, X, jax.random.key(5), 0, 3.0))


def test_checkpoint_static_argnums_refer_to_fn():
    traces = []

    def f(x, n):
        traces.append(n)
        return x**n * scale.ask()

    g = fx.checkpoint(f, static_argnums=(1,))
    with handlers():
        assert float(g(2.0, 3)) == 24.0
        assert float(fx.grad(g)(2.0, 2)) == 12.0


@pytest.mark.uses_jit_cache
def test_an_unnamed_vmap_called_again_eagerly_reuses_jaxs_compiled_programs():
    # JAX caches batched programs by axis name: effax names an unnamed axis by its
    # nesting depth, so a second call (a fresh wrapper, as inline code makes) hits
    # the cache, while nested vmaps still get distinct names.
    inner = jax.jit(lambda x: jnp.sin(x) * 2.0)
    xs = jnp.arange(3.0)
    with counting_compiles() as compiles, fx.rng.seed(0):
        counts = []
        for _ in range(3):
            fx.vmap(lambda x: inner(x) + fx.random.normal())(xs)
            counts.append(len(compiles))
    assert counts[0] > 0 and counts[2] == counts[1] == counts[0]  # nothing compiled again

    def innermost(x):
        return x + jax.lax.axis_index("effax_vmap_0") * 10 + jax.lax.axis_index("effax_vmap_1")

    out = fx.vmap(fx.vmap(innermost))(jnp.zeros((2, 3)))
    np.testing.assert_array_equal(out, [[0, 1, 2], [10, 11, 12]])


@pytest.mark.reuses_keys_on_purpose
def test_a_checkpoint_first_traced_inside_jit_keeps_its_writes():
    """A fresh effax.checkpoint first called inside an effax.jit trace: its state
    writes, emits and key draws reach the handlers, as eagerly (found by
    tests/test_compositions.py; they were dropped: the enclosing trace did not
    learn that the checkpointed call used its handlers)."""
    s = fx.State[jax.Array]("s")
    e = fx.Emit[jax.Array]("e")
    k = fx.RandomKey("k")

    def writes(x):
        s.set(x * 0.5)
        e.emit(x)
        jax.random.key_data(k.next_key())  # drawn, not used
        return x

    def run(f):
        with s.init(jnp.float32(1.0)), e.collect() as emitted, k.seed(0) as stream:
            out = f(jnp.float32(3.0))
            return out, s.get(), emitted.value, stream.counter

    compiled = run(fx.jit(fx.checkpoint(writes)))
    eager = run(fx.checkpoint(writes))
    assert float(eager[1]) == 1.5 and len(eager[2]) == 1 and eager[3] == 1
    assert_bitwise_equal(compiled[:3], eager[:3])
    assert int(compiled[3]) == eager[3]


def test_a_handler_the_inner_call_does_not_use_leaks_no_tracer_into_its_cached_trace():
    """effax.checkpoint (whose trace JAX caches) of a traced-bound fori_loop, inside
    effax.jit, under a State the function never uses, retraced for a new static
    value: the unused handler is seen inside as a stand-in, which must close over
    none of the outer trace's tracers (found by tests/test_compositions.py: the
    second trace reused the cached one and hit UnexpectedTracerError)."""
    mode = fx.Ask[int]("mode", static=True)
    unused = fx.State[jax.Array]("unused")
    k = fx.RandomKey("k")

    def f(x):
        x = x + mode.ask()
        upper = jnp.where(x > 2, 2, 3)
        return fx.fori_loop(0, upper, lambda i, c: c + fx.random.uniform(stream=k), x)

    checkpointed = fx.checkpoint(f)

    def run(fn, m):
        with mode.provide(m), unused.init(jnp.float32(0.0)), k.seed(m) as stream:
            return fn(jnp.float32(0.5)), stream.counter

    eager = [run(checkpointed, m) for m in (1, 2)]
    compiled = fx.jit(checkpointed)
    for m, (out, counter) in zip((1, 2), eager, strict=True):
        got, got_counter = run(compiled, m)
        assert_bitwise_equal(got, out)
        assert int(got_counter) == counter


_READ_ONLY_INNER = {
    "jit": lambda s: fx.jit(lambda x: x + s.get()),
    "checkpoint": lambda s: fx.checkpoint(lambda x: x + s.get()),
    "jit of scan": lambda s: fx.jit(
        lambda x: fx.scan(lambda c, _: (c + s.get(), None), x, None, length=2)[0]
    ),
    "while_loop": lambda s: (
        lambda x: fx.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, c[1] + s.get()), (0, x))[1]
    ),
}


@pytest.mark.parametrize("inner", list(_READ_ONLY_INNER))
@pytest.mark.parametrize("outer", ["eager", "jit"])
def test_a_state_only_read_in_one_branch_of_a_batched_cond_stays_shared(inner, outer):
    """vmap(state='shared') of a cond with a batched predicate, one branch reading
    a State through a compiled call or a loop: the state was only read, so it is
    still the one shared value (found by tests/test_compositions.py: the compiled
    call sent the state out as a fresh output, the cond selected it per element,
    and the vmap raised a false EffectLeakError)."""
    s = fx.State[jax.Array]("s")
    read = _READ_ONLY_INNER[inner](s)
    body = lambda x: fx.cond(x > 0, read, lambda x: x * 2.0, x)
    fn = fx.vmap(body) if outer == "eager" else fx.jit(fx.vmap(body))
    xs = jnp.array([1.0, -1.0, 2.0])
    with s.init(jnp.float32(1.0)) as state:
        out = fn(xs)
    steps = 2 if "scan" in inner or "while" in inner else 1
    np.testing.assert_array_equal(out, jnp.where(xs > 0, xs + steps, xs * 2.0))
    assert state.value is not None and float(state.value) == 1.0


def test_a_shared_state_written_unbatched_under_vmap_of_grad_of_checkpoint_of_scan():
    """Found by the composition fuzzer (vmap[grad[checkpoint[scan[modify]]]]): JAX
    hands back the state as a tracer of the vmap that does not map it, which is
    one value for the whole batch, not a batched write (was EffectLeakError)."""
    total = fx.State[jax.Array]("total")

    def body(acc, bump):
        def step(c, _):
            total.modify(lambda s: 0.5 * s + bump(c))
            return c, None

        f = fx.checkpoint(lambda a: fx.scan(step, a, None, length=1)[0])
        return acc + fx.grad(f)(acc)

    with total.init(jnp.float32(1.0)) as cell:
        out = fx.vmap(lambda a: body(a, lambda c: 1.0))(jnp.arange(2.0))
    np.testing.assert_array_equal(out, [1.0, 2.0])
    assert float(cell.value) == 1.5
    with total.init(jnp.float32(1.0)) as cell, pytest.raises(fx.EffectLeakError, match="differs"):
        fx.vmap(lambda a: body(a, lambda c: jax.lax.stop_gradient(c)))(jnp.arange(2.0))
    assert float(cell.value) == 1.0
