"""`effax.JitAwareContextVar`: context-variable semantics and jit awareness.

The jit-awareness matrix reads a value through `scale()`: the same case runs once
with `scale` reading the context variable and once with `scale` returning the
value directly. The direct run proves the case itself is well formed, so a
`LookupError` in the context-variable run can only come from the jit boundary; and
where the read must pass, both runs must give the same numbers.
"""

import asyncio
import contextvars
import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import effax as fx

# the core transparency suite: leak-checked on every JAX line, run on the middle one
pytestmark = pytest.mark.core

try:
    _shard_map = jax.shard_map
except AttributeError:  # older JAX
    from jax.experimental.shard_map import shard_map as _shard_map

# Context variables live at module level (they are never garbage collected).
foo = fx.JitAwareContextVar()
scale_var: fx.JitAwareContextVar[Any] = fx.JitAwareContextVar("scale")
other_var: fx.JitAwareContextVar[Any] = fx.JitAwareContextVar("other")

NO_VALUE = "No value found for"
BOUNDARY = "assigned behind a jit-transform boundary"

S = 3.0
X = jnp.float32(0.7)
XS = jnp.linspace(0.1, 1.0, 4, dtype=jnp.float32)

Scale = Callable[[], Any]


def _assert_tree_close(actual: Any, expected: Any) -> None:
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-5, atol=1e-6)


def _direct() -> float:
    return S


# --- context-variable semantics (no JAX transform involved) -------------------------


def test_get_without_a_value_raises():
    with pytest.raises(LookupError, match=NO_VALUE):
        foo.get()


def test_missing_value_message_names_the_variable():
    with pytest.raises(LookupError, match=re.escape(repr(scale_var))):
        scale_var.get()


def test_set_on_enter_installs_the_value_and_removes_it_on_exit():
    with foo.set_on_enter(1):
        assert foo.get() == 1
    with pytest.raises(LookupError, match=NO_VALUE):
        foo.get()


def test_get_returns_the_object_itself():
    value = object()
    with foo.set_on_enter(value):
        assert foo.get() is value


def test_nesting_restores_the_previous_value():
    with foo.set_on_enter(1):
        assert foo.get() == 1
        with foo.set_on_enter(2):
            assert foo.get() == 2
            with foo.set_on_enter(3):
                assert foo.get() == 3
            assert foo.get() == 2
        assert foo.get() == 1
    with pytest.raises(LookupError, match=NO_VALUE):
        foo.get()


def test_exit_restores_the_same_object_not_a_copy():
    outer = [1]
    with foo.set_on_enter(outer):
        with foo.set_on_enter([9]):
            pass
        assert foo.get() is outer


def test_restores_on_exception():
    outer = {"a": 1}
    with foo.set_on_enter(outer):
        with pytest.raises(RuntimeError, match="boom"), foo.set_on_enter("inner"):
            raise RuntimeError("boom")
        assert foo.get() is outer
    with pytest.raises(LookupError, match=NO_VALUE):
        foo.get()


def test_mutations_are_visible_and_outer_value_comes_back():
    with foo.set_on_enter([1]):
        foo.get().append(2)
        assert foo.get() == [1, 2]
        with foo.set_on_enter({"a": 1}):
            foo.get()["b"] = 2
            assert foo.get() == {"a": 1, "b": 2}
        assert foo.get() == [1, 2]
        foo.get().append(3)
        assert foo.get() == [1, 2, 3]


def test_re_setting_the_same_object_keeps_inner_mutations():
    with foo.set_on_enter([1]):
        foo.get().append(2)
        with foo.set_on_enter(foo.get()):
            foo.get().append(3)
            assert foo.get() == [1, 2, 3]
        # The previous value is the very list mutated inside: it does not revert.
        assert foo.get() == [1, 2, 3]
        foo.get().append(4)
        assert foo.get() == [1, 2, 3, 4]


def test_variables_are_independent():
    with foo.set_on_enter("foo"), other_var.set_on_enter("other"):
        assert foo.get() == "foo"
        assert other_var.get() == "other"
    with foo.set_on_enter("foo"), pytest.raises(LookupError, match=NO_VALUE):
        other_var.get()


def test_value_may_depend_on_the_previous_value():
    with foo.set_on_enter(1), foo.set_on_enter(foo.get() + 10):
        assert foo.get() == 11


# --- threads and asyncio ------------------------------------------------------------


def test_threads_each_see_their_own_value():
    n = 4
    barrier = threading.Barrier(n, timeout=30)

    def worker(i: int) -> list[int]:
        seen = []
        with foo.set_on_enter(i):
            barrier.wait()  # every thread has set its value before any reads
            seen.append(foo.get())
            barrier.wait()
            seen.append(foo.get())
        return seen

    with foo.set_on_enter("main"), ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(worker, range(n)))
        assert foo.get() == "main"
    assert results == [[i, i] for i in range(n)]


def test_thread_run_in_a_copied_context_sees_the_value_but_cannot_change_it():
    seen = []

    def worker() -> None:
        seen.append(foo.get())
        with foo.set_on_enter("thread"):
            seen.append(foo.get())
        seen.append(foo.get())

    with foo.set_on_enter("main"):
        thread = threading.Thread(target=contextvars.copy_context().run, args=(worker,))
        thread.start()
        thread.join()
        assert foo.get() == "main"
    assert seen == ["main", "thread", "main"]


def test_jit_awareness_in_a_thread():
    def worker() -> tuple[float, str]:
        with scale_var.set_on_enter(jnp.float32(S)):
            grad = float(jax.grad(lambda x: scale_var.get() * x)(1.0))
            try:
                jax.jit(lambda x: scale_var.get() * x)(1.0)
            except LookupError as error:
                return grad, str(error)
        return grad, ""

    with ThreadPoolExecutor(max_workers=1) as pool:
        grad, message = pool.submit(worker).result()
    assert grad == S
    assert BOUNDARY in message


def test_asyncio_tasks_each_see_their_own_value():
    async def task(i: int) -> list[int]:
        seen = []
        with foo.set_on_enter(i):
            for _ in range(3):
                await asyncio.sleep(0)  # let the other tasks run in between
                seen.append(foo.get())
        return seen

    async def main() -> list[list[int]]:
        return await asyncio.gather(*(task(i) for i in range(4)))

    assert asyncio.run(main()) == [[i] * 3 for i in range(4)]


def test_asyncio_task_inherits_value_and_its_changes_stay_inside():
    async def child() -> list[Any]:
        seen = [foo.get()]
        with foo.set_on_enter("child"):
            await asyncio.sleep(0)
            seen.append(foo.get())
        return seen

    async def main() -> tuple[list[Any], Any]:
        with foo.set_on_enter("parent"):
            task = asyncio.create_task(child())
            await asyncio.sleep(0)
            mid = foo.get()
            return await task, mid

    seen, mid = asyncio.run(main())
    assert seen == ["parent", "child"]
    assert mid == "parent"


def test_asyncio_to_thread_sees_the_value():
    async def main() -> Any:
        with scale_var.set_on_enter(S):
            return await asyncio.to_thread(lambda: scale_var.get() * 2)

    assert asyncio.run(main()) == 2 * S


# --- jit awareness: value set at top level, read under a transform ------------------


def _body(scale: Scale) -> Callable[[Any], Any]:
    return lambda x: scale() * jnp.sin(x) * x


def _custom_jvp_fn(scale: Scale) -> Callable[[Any], Any]:
    @jax.custom_jvp
    def f(x):
        return scale() * jnp.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        # Not the true derivative, so that the result shows the rule ran.
        return f(x), 10.0 * scale() * jnp.cos(x) * t

    return f


def _custom_vjp_fn(scale: Scale) -> Callable[[Any], Any]:
    @jax.custom_vjp
    def f(x):
        return scale() * jnp.sin(x)

    def f_fwd(x):
        return f(x), jnp.cos(x)

    def f_bwd(residual, g):
        return (10.0 * scale() * residual * g,)

    f.defvjp(f_fwd, f_bwd)
    return f


def _mesh() -> Any:
    return jax.make_mesh((1,), ("i",))


STAGED: dict[str, Callable[[Scale], Any]] = {
    "jit": lambda s: jax.jit(_body(s))(X),
    "nested_jit": lambda s: jax.jit(lambda x: jax.jit(_body(s))(x) + 1.0)(X),
    "vmap_of_jit": lambda s: jax.vmap(jax.jit(_body(s)))(XS),
    "jit_of_vmap": lambda s: jax.jit(jax.vmap(_body(s)))(XS),
    "grad_of_jit": lambda s: jax.grad(jax.jit(_body(s)))(X),
    "pmap": lambda s: jax.pmap(_body(s))(XS[:1]),
    "shard_map": lambda s: _shard_map(_body(s), mesh=_mesh(), in_specs=P(), out_specs=P())(X),
    "jit_of_shard_map": lambda s: jax.jit(
        _shard_map(_body(s), mesh=_mesh(), in_specs=P(), out_specs=P())
    )(X),
    "scan": lambda s: lax.scan(lambda c, x: (c + _body(s)(x), None), 0.0, XS)[0],
    "cond": lambda s: lax.cond(X > 0, _body(s), jnp.cos, X),
    "cond_other_branch": lambda s: lax.cond(X > 0, jnp.cos, _body(s), X),
    "switch": lambda s: lax.switch(1, [jnp.cos, _body(s)], X),
    "while_loop": lambda s: lax.while_loop(lambda c: c < 5.0, lambda c: c + _body(s)(X), 0.0),
    "while_loop_cond": lambda s: lax.while_loop(lambda c: c < s(), lambda c: c + 1.0, 0.0),
    "fori_loop": lambda s: lax.fori_loop(0, 3, lambda i, c: c + _body(s)(X), 0.0),
    "map": lambda s: lax.map(_body(s), XS),
    "checkpoint": lambda s: jax.checkpoint(_body(s))(X),
    "grad_of_checkpoint": lambda s: jax.grad(jax.checkpoint(_body(s)))(X),
    "eval_shape": lambda s: jax.eval_shape(_body(s), X),
    "make_jaxpr": lambda s: jax.make_jaxpr(_body(s))(X),
    "custom_jvp_primal_under_jit": lambda s: jax.jit(_custom_jvp_fn(s))(X),
    "custom_vjp_primal_under_jit": lambda s: jax.jit(_custom_vjp_fn(s))(X),
    "custom_jvp_rule_under_jit_of_grad": lambda s: jax.jit(jax.grad(_custom_jvp_fn(s)))(X),
    "custom_vjp_rule_under_jit_of_grad": lambda s: jax.jit(jax.grad(_custom_vjp_fn(s)))(X),
}


def _jvp(s: Scale) -> Any:
    return jax.jvp(_body(s), (X,), (jnp.float32(1.0),))


def _vjp(s: Scale) -> Any:
    out, pullback = jax.vjp(_body(s), X)
    return out, pullback(jnp.float32(1.0))


def _linearize(s: Scale) -> Any:
    out, f_jvp = jax.linearize(_body(s), X)
    return out, f_jvp(jnp.float32(1.0))


PASSING: dict[str, Callable[[Scale], Any]] = {
    "eager": lambda s: _body(s)(X),
    "grad": lambda s: jax.grad(_body(s))(X),
    "value_and_grad": lambda s: jax.value_and_grad(_body(s))(X),
    "grad_of_grad": lambda s: jax.grad(jax.grad(_body(s)))(X),
    "vjp": _vjp,
    "jvp": _jvp,
    "linearize": _linearize,
    "jacfwd": lambda s: jax.jacfwd(lambda x: _body(s)(x) * x)(XS),
    "jacrev": lambda s: jax.jacrev(lambda x: _body(s)(x) * x)(XS),
    "hessian": lambda s: jax.hessian(lambda x: jnp.sum(_body(s)(x)))(XS),
    "vmap": lambda s: jax.vmap(_body(s))(XS),
    "vmap_of_vmap": lambda s: jax.vmap(jax.vmap(_body(s)))(jnp.stack([XS, 2 * XS])),
    "vmap_of_grad": lambda s: jax.vmap(jax.grad(_body(s)))(XS),
    "grad_of_vmap": lambda s: jax.grad(lambda x: jnp.sum(jax.vmap(_body(s))(x)))(XS),
    "custom_jvp_primal": lambda s: _custom_jvp_fn(s)(X),
    "custom_vjp_primal": lambda s: _custom_vjp_fn(s)(X),
    "custom_jvp_rule_under_grad": lambda s: jax.grad(_custom_jvp_fn(s))(X),
    "custom_vjp_rules_under_grad": lambda s: jax.grad(_custom_vjp_fn(s))(X),
    "custom_jvp_rule_under_jvp": lambda s: jax.jvp(_custom_jvp_fn(s), (X,), (1.0,)),
    "custom_vjp_rules_under_vjp": lambda s: jax.vjp(_custom_vjp_fn(s), X)[1](1.0),
    "custom_jvp_rule_under_vmap_of_grad": lambda s: jax.vmap(jax.grad(_custom_jvp_fn(s)))(XS),
    "custom_vjp_rules_under_vmap_of_grad": lambda s: jax.vmap(jax.grad(_custom_vjp_fn(s)))(XS),
}


@pytest.mark.parametrize("case", STAGED.values(), ids=STAGED.keys())
def test_read_across_a_staging_trace_raises(case):
    jax.block_until_ready(case(_direct))  # the case itself is fine
    with scale_var.set_on_enter(jnp.float32(S)), pytest.raises(LookupError, match=BOUNDARY):
        case(scale_var.get)


@pytest.mark.parametrize("case", PASSING.values(), ids=PASSING.keys())
def test_read_through_a_non_staging_transform_passes(case):
    expected = case(_direct)
    with scale_var.set_on_enter(jnp.float32(S)):
        actual = case(scale_var.get)
    _assert_tree_close(actual, expected)


def test_custom_rules_really_run():
    # Guards the custom_* cases above: the rules give 10x the true derivative.
    true = S * jnp.cos(X)
    np.testing.assert_allclose(jax.grad(_custom_jvp_fn(_direct))(X), 10 * true, rtol=1e-5)
    np.testing.assert_allclose(jax.grad(_custom_vjp_fn(_direct))(X), 10 * true, rtol=1e-5)


def test_staged_read_without_a_value_says_no_value():
    with pytest.raises(LookupError, match=NO_VALUE):
        jax.jit(_body(scale_var.get))(X)


def test_value_is_readable_again_after_a_refused_read():
    with scale_var.set_on_enter(jnp.float32(S)):
        with pytest.raises(LookupError, match=BOUNDARY):
            jax.jit(_body(scale_var.get))(X)
        assert scale_var.get() == S
        np.testing.assert_allclose(jax.grad(_body(scale_var.get))(X), jax.grad(_body(_direct))(X))


def test_disable_jit_makes_jit_transparent():
    with scale_var.set_on_enter(jnp.float32(S)), jax.disable_jit():
        actual = jax.jit(_body(scale_var.get))(X)
    np.testing.assert_allclose(actual, _body(_direct)(X), rtol=1e-6)


# --- jit awareness: value set inside a transform, read in a nested one --------------

OUTER: dict[str, Callable[[Callable[[Any], Any]], Any]] = {
    "eager": lambda h: h(X),
    "jit": lambda h: jax.jit(h)(X),
    "vmap": lambda h: jax.vmap(h)(XS),
    "grad": lambda h: jax.grad(h)(X),
    "scan": lambda h: lax.scan(lambda c, x: (c + h(x), None), 0.0, XS)[0],
    "checkpoint": lambda h: jax.checkpoint(h)(X),
}

# name -> (inner transform applied to a body, is it staging?)
INNER: dict[str, tuple[Callable[[Callable[[Any], Any], Any], Any], bool]] = {
    "direct": (lambda f, x: f(x), False),
    "vmap": (lambda f, x: jax.vmap(f)(jnp.stack([x, 2 * x])), False),
    "grad": (lambda f, x: jax.grad(f)(x), False),
    "jvp": (lambda f, x: jax.jvp(f, (x,), (jnp.ones_like(x),))[1], False),
    "jit": (lambda f, x: jax.jit(f)(x), True),
    "scan": (lambda f, x: lax.scan(lambda c, _: (c + f(x), None), 0.0, None, length=2)[0], True),
    "cond": (lambda f, x: lax.cond(x > 0, f, jnp.cos, x), True),
    "checkpoint": (lambda f, x: jax.checkpoint(f)(x), True),
}


@pytest.mark.parametrize("inner_name", INNER.keys())
@pytest.mark.parametrize("outer_name", OUTER.keys())
def test_value_set_inside_a_transform(outer_name, inner_name):
    outer = OUTER[outer_name]
    inner, staging = INNER[inner_name]

    def reference(x):
        return jnp.sum(inner(_body(_direct), x))

    def with_var(x):
        with scale_var.set_on_enter(S):
            return jnp.sum(inner(_body(scale_var.get), x))

    expected = outer(reference)
    if staging:
        with pytest.raises(LookupError, match=BOUNDARY):
            outer(with_var)
    else:
        _assert_tree_close(outer(with_var), expected)


def test_value_set_inside_jit_is_a_traced_input():
    traces = []

    @jax.jit
    def pure(x, s):
        traces.append(None)
        with scale_var.set_on_enter(s):
            return _body(scale_var.get)(x)

    for s in (1.0, 2.0, 5.0):
        np.testing.assert_allclose(pure(X, s), s * jnp.sin(X) * X, rtol=1e-6)
    assert len(traces) == 1


@pytest.mark.leaks_on_purpose
def test_value_set_inside_a_finished_trace_cannot_be_read_outside():
    leaked: list[contextvars.Context] = []

    @jax.jit
    def f(x):
        with scale_var.set_on_enter(x):
            leaked.append(contextvars.copy_context())
        return x

    f(X)
    with pytest.raises(LookupError, match=BOUNDARY):
        leaked[0].run(scale_var.get)
