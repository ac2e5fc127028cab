"""REINFORCE on a toy multi-armed bandit: keys for the environment and the policy,
rewards emitted, a baseline kept in a State, the arm means provided by the caller."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

import effax as fx
from b8lib.effects import learning_rate, steps

env_keys = fx.RandomKey("env_keys")
policy_keys = fx.RandomKey("policy_keys")
rewards = fx.Emit[jax.Array]("rewards")
discount = fx.Ask[jax.Array]("discount")
arm_means = fx.Ask[jax.Array]("arm_means")
exploration = fx.Ask[float]("exploration", default=0.1)
baseline = fx.State[float]("baseline")

MEANS = jnp.array([0.1, 0.5, 0.9])


@dataclasses.dataclass(frozen=True)
class BanditLayout:
    arms: int
    payouts: list[float]


layout = fx.Ask[BanditLayout]("layout", static=True)


# case: the environment draws reward noise from its own stream
@fx.uses(env_keys, arm_means)
def pull(arm: jax.Array) -> jax.Array:
    mean = arm_means.ask()[arm]
    return mean + 0.1 * jax.random.normal(env_keys.next_key())


with env_keys.seed(0), arm_means.provide(MEANS):
    r0 = pull(jnp.int32(2))
print("one pull:", float(r0))


# case: epsilon-greedy choice; the exploration rate has a default, no handler needed
@fx.uses(policy_keys, exploration)
def choose(logits: jax.Array) -> jax.Array:
    explore = fx.random.bernoulli(exploration.ask(), stream=policy_keys)
    random_arm = fx.random.randint((), 0, logits.shape[0], stream=policy_keys)
    return jnp.where(explore, random_arm, jnp.argmax(logits))


with policy_keys.seed(1):
    arm0 = choose(jnp.zeros(3))


# case: an episode is an effax.scan over a nested step, rewards stacked per step
@fx.uses(policy_keys, exploration, env_keys, arm_means, rewards)
def run_episode(logits: jax.Array, length: int) -> jax.Array:
    def step(total: jax.Array, _: None) -> tuple[jax.Array, None]:
        arm = choose(logits)
        r = pull(arm)
        rewards.emit(r)
        return total + r, None

    total, _ = fx.scan(step, jnp.float32(0), None, length=length)
    return total  # E: no-any-return


with fx.handlers(policy_keys.seed(2), env_keys.seed(3), arm_means.provide(MEANS), rewards.collect()) as hs:
    ret = run_episode(jnp.array([0.0, 0.0, 1.0]), 5)
print("return", float(ret), "rewards per step", hs[rewards][0].shape)


# case: a greedy evaluation that forgets the policy's stream in its row
@fx.uses(env_keys, arm_means)
def greedy_return(logits: jax.Array) -> jax.Array:
    arm = choose(logits)  # E: effax-undeclared
    return pull(arm)


with env_keys.seed(4), arm_means.provide(MEANS), policy_keys.seed(5):
    greedy_return(jnp.array([0.0, 1.0, 0.0]))


# case: a script pulls an arm with only the environment stream seeded
with env_keys.seed(6):
    first_reward = pull(jnp.int32(0))  # E: effax-unhandled


# case: one REINFORCE update, compiled; the learning rate answers its default
@fx.uses(policy_keys, exploration, env_keys, arm_means, learning_rate, steps)
def reinforce_step(logits: jax.Array) -> jax.Array:
    arm = choose(logits)
    reward = pull(arm)
    grad_logp = jax.grad(lambda lg: jax.nn.log_softmax(lg)[arm])(logits)
    steps.modify(lambda n: n + 1)
    return logits + learning_rate.ask() * reward * grad_logp  # E: no-any-return


fast_reinforce = fx.jit(reinforce_step)
with fx.handlers(
    policy_keys.seed(7), env_keys.seed(8), arm_means.provide(MEANS), steps.init(jnp.int32(0))
) as hs:
    logits = jnp.zeros(3)
    for _ in range(20):
        logits = fast_reinforce(logits)
print("learned logits", logits, "updates", int(hs[steps]))


# case: an agent object whose methods declare rows; one method's row is too narrow
class Agent:
    def __init__(self, n_arms: int) -> None:
        self.logits = jnp.zeros(n_arms)

    @fx.uses(policy_keys, exploration)
    def act(self) -> jax.Array:
        return choose(self.logits)

    @fx.uses(env_keys, arm_means)
    def act_and_pull(self) -> jax.Array:
        arm = self.act()  # E: effax-undeclared
        return pull(arm)

    @property
    @fx.uses(arm_means)
    def best_mean(self) -> jax.Array:
        return jnp.max(arm_means.ask())


agent = Agent(3)
with fx.handlers(env_keys.seed(9), arm_means.provide(MEANS), policy_keys.seed(10)):
    agent.act_and_pull()


# case: reading a property whose getter has a row, with nothing provided
print("best", agent.best_mean)  # E: effax-unhandled


# case: the property read under its provider is fine
with arm_means.provide(MEANS):
    best = agent.best_mean


# case: many bandits pulled at once, each element with its own key
@fx.uses(env_keys, arm_means)
def pull_all(arms: jax.Array) -> jax.Array:
    return fx.vmap(pull, keys="split")(arms)


with env_keys.seed(11) as stream, arm_means.provide(MEANS):
    batch = pull_all(jnp.array([0, 1, 2, 2]))
print("batched pulls", batch, "counter", stream.value.counter)


# case: fx.vmap of the pull at module level, the arm means provided but no stream
with arm_means.provide(MEANS):
    batch_r = fx.vmap(pull)(jnp.arange(3))  # E: effax-unhandled


# case: a static layout whose frozen dataclass holds a list
try_layout = BanditLayout(arms=3, payouts=[0.1, 0.5, 0.9])
with layout.provide(try_layout):  # E: effax-handler-type
    print(layout.ask().arms)


# case: evaluation compiles the episode but its row lacks the rewards it emits
@fx.uses(policy_keys, exploration, env_keys, arm_means)
def evaluate(logits: jax.Array) -> jax.Array:
    fast = fx.jit(run_episode, static_argnums=1)
    return fast(logits, 4)  # E: effax-undeclared


with fx.handlers(policy_keys.seed(12), env_keys.seed(13), arm_means.provide(MEANS), rewards.collect()):
    evaluate(jnp.zeros(3))


# case: a discounted return with fori_loop; the discount bound by fx.handle
@fx.uses(discount)
def discounted_sum(rs: jax.Array) -> jax.Array:
    gamma = discount.ask()
    return fx.fori_loop(0, rs.shape[0], lambda i, acc: acc + gamma**i * rs[i], jnp.float32(0))  # E: no-any-return


discounted = fx.handle(discounted_sum, discount.provide(jnp.float32(0.9)))
print("G =", float(discounted(jnp.ones(4))))


# case: fx.handle binds the discount, but the function also emits rewards
@fx.uses(discount, rewards)
def discounted_and_logged(rs: jax.Array) -> jax.Array:
    rewards.emit(rs)
    return discounted_sum(rs)


partly = fx.handle(discounted_and_logged, discount.provide(jnp.float32(0.9)))
g_logged = partly(jnp.ones(4))  # E: effax-unhandled


# case: an optional effect read at module level, guarded by try/except
try:
    gamma_now = discount.ask()
except fx.UnhandledEffectError:
    gamma_now = jnp.float32(1.0)


# case: a default parameter value that asks for the discount when the def runs
def shaped(r: jax.Array, scale: jax.Array = discount.ask()) -> jax.Array:  # E: effax-unhandled
    return r * scale


# case: a lambda kept in a variable and called at module level, nothing provided
peek = lambda: arm_means.ask()[0]  # noqa: E731
first_mean = peek()  # E: effax-unhandled, no-untyped-call


# case: a float baseline started from the int 0 and updated in compiled code
@fx.uses(baseline)
def update_baseline(r: jax.Array) -> None:
    baseline.set(0.9 * baseline.get() + 0.1 * r)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


with baseline.init(0):  # E: effax-handler-type
    fx.jit(update_baseline)(jnp.float32(1.0))


# case: the same baseline started from a float
with baseline.init(0.0) as b_cell:
    fx.jit(update_baseline)(jnp.float32(1.0))
print("baseline", b_cell.value)
