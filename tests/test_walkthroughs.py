"""Every example of the two seed walkthroughs, as tests of effax's primitives.

- `jit-aware-context-variables.md`: the context-variable primer, `square_of_f`, the
  jitted `impure_f` error, the double wrapper and `plumb_and_transform`, the
  key-stream recipe and the stateful-nodes recipe.
- `jax-stateful-computations.md`: the counter that returns 1 forever under jit (and
  its fix), threading state through a training loop, and refs.
"""

import functools as ft
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import effax as fx

NO_VALUE = "No value found for"
BOUNDARY = "assigned behind a jit-transform boundary"

# Module-level context variables, as the walkthrough recommends.
foo: fx.JitAwareContextVar[Any] = fx.JitAwareContextVar("foo")
x_var: fx.JitAwareContextVar[Any] = fx.JitAwareContextVar("x")
_ref_var: fx.JitAwareContextVar[Any] = fx.JitAwareContextVar("ref")

X_VALUES = jnp.arange(1.0, 11.0)


# === jit-aware context variables: the primer =========================================


def test_primer_get_before_set_raises():
    with pytest.raises(LookupError, match=NO_VALUE):
        foo.get()


def test_primer_set_then_reset():
    with foo.set_on_enter(1):
        assert foo.get() == 1
    with pytest.raises(LookupError, match=NO_VALUE):
        foo.get()


def test_primer_nesting():
    with foo.set_on_enter(1):
        assert foo.get() == 1
        with foo.set_on_enter(2):
            assert foo.get() == 2
        assert foo.get() == 1


# The primer's mutable-value examples: tests/test_context_var.py
# (test_mutations_are_visible_and_outer_value_comes_back and
# test_re_setting_the_same_object_keeps_inner_mutations).


# === why context variables: square and square_of_f ===================================


def square(value_for_x):
    with x_var.set_on_enter(value_for_x):
        return x_var.get() ** 2


def impure_log():
    """Reads `x` from the context: impure on its own."""
    return jnp.log(x_var.get())


def square_of_log(value_for_x):
    """Pure: the context it reads from is set from its argument."""
    with x_var.set_on_enter(value_for_x):
        return impure_log() ** 2


def test_square():
    assert square(5) == 25
    assert square(-3.0) == 9.0


def test_square_of_f_is_pure():
    np.testing.assert_allclose(square_of_log(5.0), np.log(5.0) ** 2, rtol=1e-6)
    # the context does not leak out of the call
    with pytest.raises(LookupError, match=NO_VALUE):
        x_var.get()


def test_jitted_square_of_f_traces_once_over_ten_inputs():
    traces = []

    @jax.jit
    def jitted(value_for_x):
        traces.append(None)
        return square_of_log(value_for_x)

    for x in X_VALUES:
        np.testing.assert_allclose(jitted(x), jnp.log(x) ** 2, rtol=1e-6)
    assert len(traces) == 1


def test_jitting_the_impure_function_raises():
    jitted_impure_log = jax.jit(impure_log)

    def square_of_jitted_log(value_for_x):
        with x_var.set_on_enter(value_for_x):
            return jitted_impure_log() ** 2

    with pytest.raises(LookupError, match=BOUNDARY):
        square_of_jitted_log(5.0)


# === the double wrapper and plumb_and_transform ======================================


def test_double_wrapper_by_hand():
    traces = []

    @jax.jit
    def jitted_pure_log(x):
        traces.append(None)
        with x_var.set_on_enter(x):
            return impure_log()

    def log_via_jit():  # impure again, for the rest of the code base
        return jitted_pure_log(x_var.get())

    def square_of_log_via_jit(value_for_x):
        with x_var.set_on_enter(value_for_x):
            return log_via_jit() ** 2

    for x in X_VALUES:
        np.testing.assert_allclose(square_of_log_via_jit(x), jnp.log(x) ** 2, rtol=1e-6)
    assert len(traces) == 1


def test_double_wrapper_with_plumb_and_transform():
    traces = []

    @fx.plumb_and_transform(
        transform_to_apply=jax.jit,
        compute_extra_input_before=lambda: x_var.get(),
        create_context_managers_after=lambda x: [x_var.set_on_enter(x)],
    )
    def log_via_jit():
        traces.append(None)
        return jnp.log(x_var.get())

    def square_of_log_via_jit(value_for_x):
        with x_var.set_on_enter(value_for_x):
            return log_via_jit() ** 2

    for x in X_VALUES:
        np.testing.assert_allclose(square_of_log_via_jit(x), jnp.log(x) ** 2, rtol=1e-6)
    assert len(traces) == 1


# === recipe: auto-plumbing random keys ===============================================


class KeyStream:
    """A base key and a counter: draw `i` is `fold_in(base_key, offset + i)`."""

    __slots__ = ("_base_key", "_lock", "_offset", "counter")

    def __init__(self, base_key: jax.Array, offset: Any = 0) -> None:
        self._base_key = base_key
        self._offset = offset
        self._lock = threading.Lock()
        self.counter = 0

    def next_key(self) -> jax.Array:
        with self._lock:
            data = self._offset + self.counter
            self.counter += 1
            return jax.random.fold_in(self._base_key, data)

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = None  # type: ignore[assignment]


_keystream_var: fx.JitAwareContextVar[KeyStream] = fx.JitAwareContextVar("keystream")


def set_keystream_on_enter(keystream: KeyStream) -> Any:
    assert isinstance(keystream, KeyStream)
    return _keystream_var.set_on_enter(keystream)


def get_next_key() -> jax.Array:
    return _keystream_var.get().next_key()


def func_1() -> jax.Array:
    return jax.random.normal(get_next_key())


def func_2(x: jax.Array) -> jax.Array:
    return x + jax.random.normal(get_next_key()) + func_1()


def func_main(x: jax.Array) -> jax.Array:
    return x * func_2(x) * func_1()


def pure_func_main(x: jax.Array, base_key: jax.Array) -> jax.Array:
    with set_keystream_on_enter(KeyStream(base_key)):
        return func_main(x)


# Copied verbatim from the tutorial (shared/seeds/jit-aware-context-variables.md),
# with `plumb_and_transform` taken from effax: `jax.jit(**jit_kwargs)` is JAX's
# decorator factory, whose options effax reads and maps onto `func`.
plumb_and_transform = fx.plumb_and_transform

# fmt: off
_MISSING = object()

# The depth of the key tree increases by 1 when entering a
# function decorated with `plumb_rng_key_and_jit`


def plumb_rng_key_and_jit(func=_MISSING, **jit_kwargs):
    if func is _MISSING:
        return lambda func: plumb_rng_key_and_jit(func, **jit_kwargs)

    return plumb_and_transform(
        callable_to_transform=func,
        transform_to_apply=jax.jit(**jit_kwargs),
        compute_extra_input_before=get_next_key,
        create_context_managers_after=lambda key: [
            set_keystream_on_enter(KeyStream(key))
        ],
    )
# fmt: on


BASE_KEYS = jax.random.split(jax.random.key(42), 4)
KEY_X_VALUES = jnp.arange(1.0, 5.0)


def _eager_results() -> list[jax.Array]:
    return [pure_func_main(x, k) for x, k in zip(KEY_X_VALUES, BASE_KEYS, strict=True)]


def test_key_stream_draws_fold_in_the_counter():
    base = jax.random.key(0)
    stream = KeyStream(base, offset=5)
    drawn = [stream.next_key() for _ in range(3)]
    assert stream.counter == 3
    for i, key in enumerate(drawn):
        expected = jax.random.fold_in(base, 5 + i)
        np.testing.assert_array_equal(jax.random.key_data(key), jax.random.key_data(expected))


def test_func_main_draws_three_keys():
    stream = KeyStream(jax.random.key(0))
    with set_keystream_on_enter(stream):
        func_main(jnp.float32(1.0))
    assert stream.counter == 3


def test_eager_results_depend_on_the_key_and_are_reproducible():
    first, again = _eager_results(), _eager_results()
    np.testing.assert_array_equal(first, again)
    assert len({float(r) for r in first}) == len(first)
    other = pure_func_main(KEY_X_VALUES[0], jax.random.key(7))
    assert float(other) != float(first[0])


def test_jitted_key_stream_matches_eager_and_traces_once():
    traces = []

    @jax.jit
    def jitted(x, base_key):
        traces.append(None)
        return pure_func_main(x, base_key)

    eager = _eager_results()
    jitted_results = [jitted(x, k) for x, k in zip(KEY_X_VALUES, BASE_KEYS, strict=True)]
    np.testing.assert_allclose(jitted_results, eager, rtol=1e-5)
    assert len(traces) == 1


def test_jitted_keys_are_bit_identical_to_eager_keys():
    def keys(base_key):
        with set_keystream_on_enter(KeyStream(base_key)):
            return jax.random.key_data(jnp.stack([get_next_key() for _ in range(4)]))

    base = jax.random.key(3)
    np.testing.assert_array_equal(jax.jit(keys)(base), keys(base))


@pytest.mark.reuses_keys_on_purpose
def test_vmapped_key_stream_matches_eager_and_traces_once_per_shape():
    traces = []

    @jax.jit
    @jax.vmap
    def jitted_vmapped(x, base_key):
        traces.append(None)
        return pure_func_main(x, base_key)

    eager = _eager_results()
    np.testing.assert_allclose(
        jitted_vmapped(KEY_X_VALUES[:2], BASE_KEYS[:2]), eager[:2], rtol=1e-5
    )
    np.testing.assert_allclose(
        jitted_vmapped(KEY_X_VALUES[2:], BASE_KEYS[2:]), eager[2:], rtol=1e-5
    )
    assert len(traces) == 1
    np.testing.assert_allclose(
        jitted_vmapped(KEY_X_VALUES[1:], BASE_KEYS[1:]), eager[1:], rtol=1e-5
    )
    assert len(traces) == 2


def test_bad_main_without_a_key_stream():
    bad_main = jax.jit(func_main)
    with pytest.raises(LookupError, match=NO_VALUE):
        bad_main(jnp.float32(1.0))


def test_bad_main_with_a_key_stream_outside_the_jit():
    bad_main = jax.jit(func_main)
    stream = KeyStream(jax.random.key(42))
    with set_keystream_on_enter(stream), pytest.raises(LookupError, match=BOUNDARY):
        bad_main(jnp.float32(1.0))


def test_plumb_rng_key_and_jit_verbatim_example():
    # the tutorial's own example: the jitted main draws one key from the stream
    bad_main = plumb_rng_key_and_jit(func_main)

    with set_keystream_on_enter(KeyStream(jax.random.key(42))):
        out = bad_main(jnp.array(1.0))
    expected = pure_func_main(jnp.array(1.0), jax.random.fold_in(jax.random.key(42), 0))
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    np.testing.assert_allclose(out, -0.12656265, rtol=1e-6)  # the tutorial's printout


def test_plumb_rng_key_and_jit():
    traces = []

    @plumb_rng_key_and_jit
    def main(x):
        traces.append(None)
        return func_main(x)

    base = jax.random.key(42)
    stream = KeyStream(base)
    with set_keystream_on_enter(stream):
        first = main(jnp.float32(1.0))
        second = main(jnp.float32(1.0))
    # each call draws one key from the caller's stream and seeds a stream with it
    assert stream.counter == 2
    expected_first = pure_func_main(jnp.float32(1.0), jax.random.fold_in(base, 0))
    expected_second = pure_func_main(jnp.float32(1.0), jax.random.fold_in(base, 1))
    np.testing.assert_allclose(first, expected_first, rtol=1e-5)
    np.testing.assert_allclose(second, expected_second, rtol=1e-5)
    assert float(first) != float(second)
    assert len(traces) == 1


def test_plumb_rng_key_and_jit_with_jit_options():
    traces = []

    @plumb_rng_key_and_jit(static_argnums=1)
    def noisy_power(x, n):
        traces.append(n)
        return x**n + jax.random.normal(get_next_key())

    base = jax.random.key(1)
    with set_keystream_on_enter(KeyStream(base)):
        out = [noisy_power(jnp.float32(2.0), 3) for _ in range(2)]
    for i, got in enumerate(out):
        inner = jax.random.fold_in(jax.random.fold_in(base, i), 0)
        np.testing.assert_allclose(got, 8.0 + jax.random.normal(inner), rtol=1e-6)
    assert traces == [3]


def test_plumb_rng_key_and_jit_without_a_stream():
    main = plumb_rng_key_and_jit(func_main)
    with pytest.raises(LookupError, match=NO_VALUE):
        main(jnp.float32(1.0))


# === recipe: stateful nodes in pytrees ===============================================

_state_dict_var: fx.JitAwareContextVar[dict[str, Any]] = fx.JitAwareContextVar("state_dict")


class StatefulNodeBase:
    """A node whose state lives in the dict held by `_state_dict_var`, under its id."""

    unique_id: str

    def get_cur_state(self) -> Any:
        return _state_dict_var.get()[self.unique_id]

    def update_state(self, new_state: Any) -> None:
        _state_dict_var.get()[self.unique_id] = new_state


@jax.tree_util.register_pytree_node_class
class ScaleAndTrack(StatefulNodeBase):
    """Multiplies by a weight and tracks how often it ran and the mean of its outputs."""

    def __init__(self, unique_id: str, weight: Any) -> None:
        self.unique_id = unique_id
        self.weight = weight

    def tree_flatten(self) -> tuple[tuple[Any], str]:
        return (self.weight,), self.unique_id

    @classmethod
    def tree_unflatten(cls, unique_id: str, children: Any) -> "ScaleAndTrack":
        return cls(unique_id, *children)

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.weight * x
        state = self.get_cur_state()
        count = state["count"] + 1
        mean = state["mean"] + (jnp.mean(y) - state["mean"]) / count
        self.update_state({"count": count, "mean": mean})
        return y


def model(tree: dict[str, ScaleAndTrack], x: jax.Array) -> jax.Array:
    return tree["second"](tree["first"](x) + 1.0)


TREE = {
    "first": ScaleAndTrack("first", jnp.float32(2.0)),
    "second": ScaleAndTrack("second", jnp.float32(-0.5)),
}
INPUTS = [jnp.arange(3.0) + i for i in range(3)]


def _initial_state() -> dict[str, Any]:
    node_state = {"count": jnp.int32(0), "mean": jnp.float32(0.0)}
    return {"first": dict(node_state), "second": dict(node_state)}


def _eager_model_run() -> tuple[list[jax.Array], dict[str, Any]]:
    state = _initial_state()
    with _state_dict_var.set_on_enter(state):
        outs = [model(TREE, x) for x in INPUTS]
    return outs, state


def _assert_states_close(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert jax.tree.structure(actual) == jax.tree.structure(expected)
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-6)


def test_node_ids_survive_tree_operations():
    mapped = jax.tree.map(lambda w: w * 2, TREE)
    assert {k: v.unique_id for k, v in mapped.items()} == {"first": "first", "second": "second"}


def test_stateful_nodes_eager():
    outs, state = _eager_model_run()
    np.testing.assert_allclose(outs[0], -0.5 * (2.0 * jnp.arange(3.0) + 1.0))
    assert int(state["first"]["count"]) == int(state["second"]["count"]) == 3
    all_first = jnp.stack([2.0 * x for x in INPUTS])
    np.testing.assert_allclose(state["first"]["mean"], jnp.mean(all_first), rtol=1e-6)


def test_stateful_nodes_jitted_by_hand():
    traces = []

    @jax.jit
    def main_func(tree, state_dict, x):
        traces.append(None)
        with _state_dict_var.set_on_enter(state_dict):
            result = model(tree, x)
            return result, _state_dict_var.get()  # the state leaves as a traced output

    expected_outs, expected_state = _eager_model_run()
    state = _initial_state()
    for x, expected in zip(INPUTS, expected_outs, strict=True):
        out, state = main_func(TREE, state, x)
        np.testing.assert_allclose(out, expected, rtol=1e-6)
    _assert_states_close(state, expected_state)
    assert len(traces) == 1


def test_stateful_nodes_plumbed_in_and_out():
    traces = []

    def counted_model(tree, x):
        traces.append(None)
        return model(tree, x)

    jitted_model = fx.plumb_and_transform(
        counted_model,
        transform_to_apply=jax.jit,
        compute_extra_input_before=lambda: dict(_state_dict_var.get()),
        create_context_managers_after=lambda state: [_state_dict_var.set_on_enter(state)],
        compute_extra_output_inside=lambda: _state_dict_var.get(),
        receive_extra_output_after=lambda new_state: _state_dict_var.get().update(new_state),
    )
    expected_outs, expected_state = _eager_model_run()
    state = _initial_state()
    with _state_dict_var.set_on_enter(state):
        for x, expected in zip(INPUTS, expected_outs, strict=True):
            np.testing.assert_allclose(jitted_model(TREE, x), expected, rtol=1e-6)
    _assert_states_close(state, expected_state)
    assert len(traces) == 1


def test_stateful_nodes_cannot_be_jitted_without_plumbing():
    with _state_dict_var.set_on_enter(_initial_state()), pytest.raises(LookupError, match=BOUNDARY):
        jax.jit(model)(TREE, INPUTS[0])


# === stateful computations: the counter ==============================================


class Counter:
    """A counter that mutates itself: fine in Python, wrong under jit."""

    def __init__(self) -> None:
        self.n = 0

    def count(self) -> int:
        self.n += 1
        return self.n


def test_plain_counter_counts_eagerly():
    counter = Counter()
    assert [counter.count() for _ in range(3)] == [1, 2, 3]


def test_jitted_plain_counter_returns_one_forever():
    counter = Counter()
    jitted = jax.jit(counter.count)
    assert [int(jitted()) for _ in range(3)] == [1, 1, 1]
    assert counter.n == 1  # the increment ran once, at trace time


def test_jitted_plain_counter_jaxpr_has_no_inputs_and_no_operations():
    counter = Counter()
    closed = jax.jit(counter.count).trace().jaxpr
    assert closed.jaxpr.invars == []
    assert closed.jaxpr.eqns == []
    assert counter.n == 1


class CounterV2:
    """The counter with its state threaded through: in as an argument, out as a result."""

    def count(self, n: Any) -> tuple[Any, Any]:
        return n + 1, n + 1

    def reset(self) -> int:
        return 0


def test_threaded_counter_eager_and_jitted():
    counter = CounterV2()
    state = counter.reset()
    eager = []
    for _ in range(3):
        value, state = counter.count(state)
        eager.append(value)
    assert eager == [1, 2, 3]

    traces = []

    @jax.jit
    def count(n):
        traces.append(None)
        return counter.count(n)

    state = jnp.int32(counter.reset())
    jitted = []
    for _ in range(3):
        value, state = count(state)
        jitted.append(int(value))
    assert jitted == [1, 2, 3]
    assert len(traces) == 1


def test_threaded_counter_jaxpr_shows_the_state():
    closed = jax.jit(CounterV2().count).trace(0).jaxpr
    assert len(closed.jaxpr.invars) == 1
    assert len(closed.jaxpr.outvars) == 2
    # the increment is in the program now, not baked in as a constant
    names = [eqn.primitive.name for eqn in closed.jaxpr.eqns]
    assert names
    assert set(names) == {"add"}


_count_var: fx.JitAwareContextVar[dict[str, Any]] = fx.JitAwareContextVar("count")


class ContextCounter:
    """The original counter's interface, with its state in a context variable."""

    def count(self) -> Any:
        cell = _count_var.get()
        cell["n"] = cell["n"] + 1
        return cell["n"]


def _compiled_count(counter: ContextCounter, traces: list[None]) -> Any:
    def count():
        traces.append(None)
        return counter.count()

    return fx.plumb_and_transform(
        count,
        transform_to_apply=jax.jit,
        compute_extra_input_before=lambda: _count_var.get()["n"],
        create_context_managers_after=lambda n: [_count_var.set_on_enter({"n": n})],
        compute_extra_output_inside=lambda: _count_var.get()["n"],
        receive_extra_output_after=lambda n: _count_var.get().update(n=n),
    )


def test_counter_with_effax_primitives_counts_while_compiled_once():
    counter = ContextCounter()
    traces: list[None] = []
    fast_count = _compiled_count(counter, traces)
    cell = {"n": jnp.int32(0)}
    with _count_var.set_on_enter(cell):
        assert [int(counter.count()) for _ in range(2)] == [1, 2]  # eager
        assert [int(fast_count()) for _ in range(3)] == [3, 4, 5]  # compiled
        assert int(counter.count()) == 6  # eager again, same cell
    assert int(cell["n"]) == 6
    assert len(traces) == 1


def test_separate_cells_count_separately():
    counter = ContextCounter()
    fast_count = _compiled_count(counter, [])
    a, b = {"n": jnp.int32(0)}, {"n": jnp.int32(100)}
    with _count_var.set_on_enter(a):
        fast_count()
        with _count_var.set_on_enter(b):
            assert int(fast_count()) == 101
        assert int(fast_count()) == 2
    assert (int(a["n"]), int(b["n"])) == (2, 101)


def test_context_counter_refuses_a_plain_jit():
    # Where the plain counter silently returned 1 forever, this one raises.
    with _count_var.set_on_enter({"n": jnp.int32(0)}), pytest.raises(LookupError, match=BOUNDARY):
        jax.jit(ContextCounter().count)()


# === stateful computations: threading state through a training loop ==================


def loss_fn(params, batch):
    x, y = batch
    return jnp.mean((params["w"] * x + params["b"] - y) ** 2)


def optimizer_step(params, grads, opt_state, lr=0.1, decay=0.9):
    # gradient descent with momentum; the momentum is the optimizer state
    new_opt_state = jax.tree.map(lambda m, g: decay * m + g, opt_state, grads)
    new_params = jax.tree.map(lambda p, m: p - lr * m, params, new_opt_state)
    return new_params, new_opt_state


def update(params, opt_state, batch):
    grads = jax.grad(loss_fn)(params, batch)
    return optimizer_step(params, grads, opt_state)


BATCH = (jnp.array([1.0, 2.0, 3.0]), jnp.array([3.0, 5.0, 7.0]))  # y = 2x + 1
STEPS = 100


def _initial_params() -> tuple[dict[str, Any], dict[str, Any]]:
    params = {"w": jnp.float32(1.0), "b": jnp.float32(0.0)}
    return params, jax.tree.map(jnp.zeros_like, params)


def _train(step_fn: Any) -> dict[str, Any]:
    params, opt_state = _initial_params()
    for _ in range(STEPS):
        params, opt_state = step_fn(params, opt_state, BATCH)
    return params


@ft.cache
def _trained_eagerly() -> dict[str, Any]:
    """`_train(update)`, once per process: 100 eager steps of `jax.grad`, op by op,
    take most of a minute under `jax.checking_leaks` (no compile cache on jax 0.10)."""
    return _train(update)


def test_training_loop_fits_the_line():
    params = _trained_eagerly()
    np.testing.assert_allclose(params["w"], 2.0, atol=1e-2)
    np.testing.assert_allclose(params["b"], 1.0, atol=1e-2)
    assert float(loss_fn(params, BATCH)) < float(loss_fn(_initial_params()[0], BATCH)) / 1000


def test_jitted_training_loop_matches_and_traces_once():
    traces = []

    @jax.jit
    def jitted_update(params, opt_state, batch):
        traces.append(None)
        return update(params, opt_state, batch)

    expected = _trained_eagerly()
    actual = _train(jitted_update)
    for name in ("w", "b"):
        np.testing.assert_allclose(actual[name], expected[name], rtol=1e-5)
    assert len(traces) == 1


_train_state_var: fx.JitAwareContextVar[dict[str, Any]] = fx.JitAwareContextVar("train_state")


def train_step(batch):
    """The training step with its state in a context variable instead of its signature."""
    state = _train_state_var.get()
    state["params"], state["opt_state"] = update(state["params"], state["opt_state"], batch)


def test_training_loop_with_state_in_context_matches_threading():
    traces = []

    def counted_step(batch):
        traces.append(None)
        train_step(batch)

    fast_step = fx.plumb_and_transform(
        counted_step,
        transform_to_apply=jax.jit,
        compute_extra_input_before=lambda: dict(_train_state_var.get()),
        create_context_managers_after=lambda state: [_train_state_var.set_on_enter(state)],
        compute_extra_output_inside=lambda: _train_state_var.get(),
        receive_extra_output_after=lambda state: _train_state_var.get().update(state),
    )
    params, opt_state = _initial_params()
    state = {"params": params, "opt_state": opt_state}
    with _train_state_var.set_on_enter(state):
        for _ in range(STEPS):
            fast_step(BATCH)
    expected = _trained_eagerly()
    for name in ("w", "b"):
        np.testing.assert_allclose(state["params"][name], expected[name], rtol=1e-5)
    assert len(traces) == 1


# === stateful computations: refs =====================================================
#
# The guide's ref examples test JAX itself; what effax adds is that a ref is a valid
# plumbed value.


def test_ref_plumbed_through_plumb_and_transform():
    # A ref is a valid jit argument: plumbing it in is enough, writes land in place.
    traces = []

    def bump(x):
        traces.append(None)
        _ref_var.get()[...] += x
        return _ref_var.get()[...] * 2

    fast_bump = fx.plumb_and_transform(
        bump,
        transform_to_apply=jax.jit,
        compute_extra_input_before=_ref_var.get,
        create_context_managers_after=lambda r: [_ref_var.set_on_enter(r)],
    )
    r = jax.new_ref(jnp.float32(0.0))
    with _ref_var.set_on_enter(r):
        assert [float(fast_bump(1.0)) for _ in range(3)] == [2.0, 4.0, 6.0]
        assert len(traces) == 1
        with pytest.raises(LookupError, match=BOUNDARY):
            jax.jit(bump)(1.0)
    assert float(r[...]) == 3.0
