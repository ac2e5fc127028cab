"""`effax.uses`: declared effect rows, checked at run time and used to plumb."""

import inspect

import jax
import jax.numpy as jnp
import pytest
from helpers import assert_bitwise_equal, assert_transparent

import effax as fx

temperature = fx.Ask[jax.Array]("temperature")
other = fx.Ask[jax.Array]("other")
steps = fx.State[jax.Array]("steps")
dropout = fx.RandomKey("dropout")
aux = fx.Emit[jax.Array]("aux")


def model(x):
    """Asks, updates state, draws a key and emits."""
    t = temperature.ask()
    n = steps.modify(lambda n: n + 1)
    y = x * t + jax.random.normal(dropout.next_key(), x.shape) + n
    aux.emit(jnp.sum(y))
    return y


declared = fx.uses(temperature, steps, dropout, aux)(model)


def sneaky(x):
    """Declares less than it performs."""
    return x * temperature.ask() + steps.get()


XS = (jnp.arange(3.0), jnp.ones(3))


def run(fn, xs=XS):
    with fx.handlers(
        temperature.provide(jnp.float32(0.5)),
        other.provide(jnp.zeros(2)),
        steps.init(jnp.int32(0)),
        dropout.seed(0),
        aux.collect(),
    ) as hs:
        outs = [fn(x) for x in xs]
    return outs, hs[steps], hs[aux], hs[dropout]


WRAPS = {
    "eager": lambda f: f,
    "handle": lambda f: fx.handle(f),
    "jit": fx.jit,
    "handle-jit": lambda f: fx.handle(f, transform=jax.jit),
}


# --- the row and the wrapped function -------------------------------------------------


def test_row_is_ordered_and_deduplicated():
    f = fx.uses(steps, temperature, steps, aux)(model)
    assert f.__effax_row__ == (steps, temperature, aux)
    assert fx.uses()(model).__effax_row__ == ()


def test_keeps_the_signature():
    def f(x: jax.Array, *, scale: float = 1.0) -> jax.Array:
        """Doc."""
        return x * scale

    g = fx.uses(temperature)(f)
    assert inspect.signature(g) == inspect.signature(f)
    assert g.__name__ == "f" and g.__doc__ == "Doc." and g.__wrapped__ is f


def test_rejects_what_is_not_an_effect():
    with pytest.raises(TypeError, match=r"takes effects .* but got int: 3\.$"):
        fx.uses(temperature, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Write `@effax.uses\(\)` with parentheses"):
        fx.uses(model)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="decorates functions, but got int"):
        fx.uses(temperature)(3)  # type: ignore[arg-type]


# --- the run-time check -----------------------------------------------------------------


@pytest.mark.parametrize("wrap", WRAPS.values(), ids=WRAPS.keys())
def test_undeclared_effect_raises(wrap):
    f = wrap(fx.uses(temperature)(sneaky))
    with pytest.raises(
        fx.UndeclaredEffectError,
        match=(
            r"^sneaky performed State\('steps'\), which is not in its effect row "
            r"effax\.uses\(Ask\('temperature'\)\)\. Add it to the row "
            r"\(@effax\.uses\(Ask\('temperature'\), State\('steps'\)\)\) so that callers "
            r"handle it, or handle it inside sneaky \(`with steps\.init\(value\): \.\.\.`\)\."
        ),
    ):
        run(f)


def test_error_is_a_lookup_error_named_in_effax():
    assert issubclass(fx.UndeclaredEffectError, LookupError)
    assert fx.UndeclaredEffectError.__module__ == "effax"


def test_pure_entry_point():
    @fx.uses()
    def pure(x):
        return x * temperature.ask()

    with pytest.raises(
        fx.UndeclaredEffectError,
        match=r"pure performed Ask\('temperature'\), which is not in its effect row "
        r"effax\.uses\(\) \(a pure entry point\)",
    ):
        run(pure)


def test_failed_call_leaves_handlers_as_they_were():
    f = fx.jit(fx.uses(temperature, steps)(lambda x: steps.set(x) or aux.emit(x)))
    with fx.handlers(temperature.provide(jnp.float32(1)), steps.init(jnp.float32(7))) as hs:
        with aux.collect() as collected:
            with pytest.raises(fx.UndeclaredEffectError, match=r"Emit\('aux'\)"):
                f(jnp.float32(3))
        assert float(hs[steps]) == 7.0
        assert collected.values == []


def test_unhandled_effect_is_still_unhandled():
    """An effect with no handler at all raises the usual error, row or not."""
    with pytest.raises(fx.UnhandledEffectError, match=r"Ask\('temperature'\)"):
        fx.uses()(sneaky)(jnp.ones(3))


def test_handlers_inside_shadow_the_row():
    @fx.uses(temperature)
    def entry(x):
        with steps.init(jnp.int32(10)) as inner, aux.collect(), dropout.seed(1):
            y = model(x)
        return y, inner.value

    @fx.uses()
    def pure(x, key):
        with fx.handlers(
            temperature.provide(jnp.float32(2)),
            steps.init(jnp.int32(0)),
            dropout.seed(key),
            aux.collect(),
        ) as hs:
            y = model(x)
        return y, hs[steps], hs[aux]

    for wrap in WRAPS.values():
        outs, final_steps, emitted, _ = run(wrap(entry))
        assert [int(n) for _, n in outs] == [11, 11]
        assert int(final_steps) == 0 and emitted == []  # the outer handlers are untouched
        _, n, collected = wrap(pure)(jnp.ones(3), jax.random.key(0))
        assert int(n) == 1 and len(collected) == 1


def test_methods():
    class Layer:
        @fx.uses(temperature)
        def __call__(self, x):
            return x * temperature.ask()

        @fx.uses(temperature)
        def leaky(self, x):
            return self(x) + steps.get()

    outs, *_ = run(Layer())
    assert_bitwise_equal(outs, [jnp.arange(3.0) * 0.5, jnp.ones(3) * 0.5])
    with pytest.raises(
        fx.UndeclaredEffectError, match=r"^test_methods\.<locals>\.Layer\.leaky performed State"
    ):
        run(Layer().leaky)


# --- nested rows --------------------------------------------------------------------


def test_innermost_row_applies():
    @fx.uses(temperature)
    def inner(x):
        return x * temperature.ask() + steps.get()

    @fx.uses(temperature, steps)
    def outer(x):
        return inner(x) + steps.get()

    with pytest.raises(
        fx.UndeclaredEffectError,
        match=r"^test_innermost_row_applies\.<locals>\.inner performed State\('steps'\)",
    ):
        run(outer)

    @fx.uses(temperature, steps)
    def outer_ok(x):
        return x * temperature.ask() + steps.get()

    outs, *_ = run(outer_ok)
    assert_bitwise_equal(outs, [jnp.arange(3.0) * 0.5, jnp.ones(3) * 0.5])


def test_a_callee_cannot_widen_its_callers_row():
    """An effect outside the caller's row stays hidden in a callee that declares it:
    the caller performs it through the callee, so the error names the caller."""

    @fx.uses(temperature, steps)
    def wide(x):
        return x * temperature.ask() + steps.get()

    @fx.uses(temperature)
    def narrow(x):
        return wide(x)

    for wrap in (lambda f: f, fx.handle):
        with pytest.raises(
            fx.UndeclaredEffectError,
            match=r"^test_a_callee_cannot_widen_its_callers_row\.<locals>\.narrow performed "
            r"State\('steps'\)",
        ):
            run(wrap(narrow))


def test_nested_rows_under_jit():
    @fx.uses(temperature, steps, dropout, aux)
    def outer(x):
        return declared(x) * 2

    assert_transparent(run(fx.jit(outer)), run(outer))
    assert_bitwise_equal(run(fx.jit(outer)), run(fx.jit(lambda x: model(x) * 2)))


# --- plumbing only the declared row ---------------------------------------------------


@pytest.mark.parametrize("wrap", WRAPS.values(), ids=WRAPS.keys())
def test_declaring_the_row_changes_no_result(wrap):
    assert_bitwise_equal(run(wrap(declared)), run(wrap(model)))
    assert_transparent(run(wrap(declared)), run(model))


def test_unrelated_handler_is_not_plumbed():
    traces = []

    @fx.uses(temperature)
    def scaled(x):
        traces.append(1)
        return x * temperature.ask()

    fast = fx.jit(scaled)
    with temperature.provide(jnp.float32(2)):
        for shape in [(2,), (3,), (4,)]:
            with other.provide(jnp.zeros(shape)):  # a new shape would retrace if plumbed
                assert_bitwise_equal(fast(jnp.ones(3)), jnp.full(3, 2.0))
    assert len(traces) == 1


def test_row_in_control_flow():
    @fx.uses(steps, aux)
    def step(carry, x):
        steps.set(steps.get() + 1)
        aux.emit(x)
        return carry + x, None

    def run_scan(body):
        with fx.handlers(
            other.provide(jnp.zeros(2)), steps.init(jnp.int32(0)), aux.collect()
        ) as hs:
            total, _ = fx.scan(body, jnp.float32(0), jnp.arange(4.0))
        return total, hs[steps], hs[aux]

    assert_bitwise_equal(run_scan(step), run_scan(step.__wrapped__))
    assert int(run_scan(step)[1]) == 4

    @fx.uses(steps)
    def leaky(carry, x):
        return carry + other.ask(), None

    with pytest.raises(
        fx.UndeclaredEffectError,
        match=r"^test_row_in_control_flow\.<locals>\.leaky performed Ask\('other'\)",
    ):
        run_scan(leaky)


# --- the docs page ----------------------------------------------------------------------


def test_docs_page_runs():
    """docs/typing.md runs: cells tagged raises-exception raise, no other cell does."""
    import pathlib
    import re

    page = (pathlib.Path(__file__).parent.parent / "docs" / "typing.md").read_text()
    cells = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)```", page, flags=re.S)
    assert len(cells) >= 5
    namespace: dict = {}
    raised = []
    for cell in cells:
        expect_raise = ":tags: [raises-exception]" in cell
        code = "\n".join(line for line in cell.splitlines() if not line.startswith(":tags:"))
        try:
            exec(compile(code, "docs/typing.md", "exec"), namespace)
        except fx.UndeclaredEffectError:
            assert expect_raise, code
            raised.append(code)
        else:
            assert not expect_raise, code
    assert len(raised) == 1
    assert len(namespace["traces"]) == 1


def test_jit_inside_a_narrower_row():
    fast = fx.jit(fx.uses(temperature, steps)(sneaky))
    narrow = fx.uses(temperature)(lambda x: fast(x))
    with pytest.raises(fx.UndeclaredEffectError, match=r"<lambda> performed State\('steps'\)"):
        run(narrow)


def test_an_async_function_keeps_its_row_across_awaits():
    import asyncio

    @fx.uses(temperature)
    async def scaled(x):
        await asyncio.sleep(0)  # the body runs when awaited, after other tasks ran
        return x * temperature.ask()

    @fx.uses(temperature)
    async def sneaky(x):
        await asyncio.sleep(0)
        return x * temperature.ask() * other.ask()

    async def main():
        with temperature.provide(jnp.float32(2)), other.provide(jnp.float32(3)):
            both = await asyncio.gather(scaled(jnp.float32(1)), scaled(jnp.float32(2)))
            with pytest.raises(fx.UndeclaredEffectError, match="sneaky"):
                await sneaky(jnp.float32(1))
            # after it, the caller sees every handler again
            return both, other.ask()

    (a, b), seen = asyncio.run(main())
    assert_bitwise_equal((a, b, seen), (jnp.float32(2), jnp.float32(4), jnp.float32(3)))
    assert inspect.iscoroutinefunction(scaled)
    assert fx.uses(temperature)(scaled).__name__ == "scaled"


def test_a_generator_function_cannot_declare_a_row():
    def draws():
        yield temperature.ask()

    with pytest.raises(fx.EffectTypeError, match="generator function"):
        fx.uses(temperature)(draws)
