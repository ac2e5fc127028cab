"""DQN on a toy chain environment: epsilon-greedy acting, a replay buffer in state, a target net."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

import effax as fx
from b10lib.effects import losses, lr, step_count
from b10lib.layers import tick

N_STATES, N_ACTIONS = 5, 2
explore = fx.RandomKey("explore")
epsilon = fx.Ask[jax.Array]("epsilon")
gamma = fx.Ask[float]("gamma", default=0.9)
q_table = fx.State[jax.Array]("q_table")
target_table = fx.State[jax.Array]("target_table")
replay = fx.State[jax.Array]("replay")
episode_return = fx.Emit[jax.Array]("episode_return")


def env_step(s: jax.Array, a: jax.Array) -> tuple[jax.Array, jax.Array]:
    s2 = jnp.clip(s + 2 * a - 1, 0, N_STATES - 1)
    return s2, (s2 == N_STATES - 1).astype(jnp.float32)


@fx.uses(q_table, epsilon, explore)
def act(s: jax.Array) -> jax.Array:
    greedy = jnp.argmax(q_table.get()[s])
    rand = fx.random.randint((), 0, N_ACTIONS, stream=explore)
    coin = fx.random.uniform(stream=explore)
    return jnp.where(coin < epsilon.ask(), rand, greedy)


@fx.uses(q_table, target_table, lr, gamma)
def td_update(s: jax.Array, a: jax.Array, r: jax.Array, s2: jax.Array) -> jax.Array:
    q = q_table.get()
    target = r + gamma.ask() * jnp.max(target_table.get()[s2])
    err = target - q[s, a]
    q_table.set(q.at[s, a].add(lr.ask() * err))
    return err**2


@fx.uses(q_table, target_table, lr, gamma, epsilon, explore, step_count)
def rollout_step(s: jax.Array, _: None) -> tuple[jax.Array, jax.Array]:
    a = act(s)
    s2, r = env_step(s, a)
    tick()
    return s2, td_update(s, a, r, s2)


AGENT = (
    q_table.init(jnp.zeros((N_STATES, N_ACTIONS))),
    target_table.init(jnp.zeros((N_STATES, N_ACTIONS))),
    lr.provide(jnp.float32(0.5)),
    epsilon.provide(jnp.float32(0.3)),
    explore.seed(0),
    step_count.init(jnp.int32(0)),
)

# case: a rollout of 8 steps under the agent's handlers
with fx.handlers(*AGENT) as hs:
    s_final, errs = fx.scan(rollout_step, jnp.int32(0), None, length=8)
print(s_final, errs.shape, hs[step_count])

# case: acting greedily with the exploration stream missing
with q_table.init(jnp.zeros((N_STATES, N_ACTIONS))), epsilon.provide(jnp.float32(0.0)):
    act(jnp.int32(0))  # E: effax-unhandled

# case: a compiled rollout kept in a variable and called under the agent
rollout = fx.jit(lambda: fx.scan(rollout_step, jnp.int32(0), None, length=4))
with fx.handlers(*AGENT):
    rollout()

# case: a TD update with no learning rate
with q_table.init(jnp.zeros((N_STATES, N_ACTIONS))), target_table.init(jnp.zeros((N_STATES, 2))):
    td_update(jnp.int32(0), jnp.int32(1), jnp.float32(1), jnp.int32(1))  # E: effax-unhandled


# case: syncing the target network from a function whose row lacks the target table
@fx.uses(q_table)
def sync_target() -> None:
    target_table.set(q_table.get())  # E: effax-undeclared


with q_table.init(jnp.ones((N_STATES, N_ACTIONS))), target_table.init(jnp.zeros((N_STATES, 2))):
    sync_target()


# case: syncing with both tables in the row
@fx.uses(q_table, target_table)
def sync_target_ok() -> None:
    target_table.set(q_table.get())


with q_table.init(jnp.ones((N_STATES, N_ACTIONS))), target_table.init(jnp.zeros((N_STATES, 2))) as tt:
    sync_target_ok()
print(tt.value.sum())


# case: a training loop with while_loop until a return threshold, all in the row
@fx.uses(q_table, target_table, lr, gamma, epsilon, explore, step_count)
def train_until(limit: int) -> jax.Array:
    def cond_fn(c: tuple[jax.Array, jax.Array]) -> jax.Array:
        return c[1] < limit

    def body_fn(c: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        s2, _ = rollout_step(c[0], None)
        return s2, c[1] + 1

    return fx.while_loop(cond_fn, body_fn, (jnp.int32(0), jnp.int32(0)))[1]  # E: no-any-return


with fx.handlers(*AGENT):
    print(train_until(6))


# case: the episode emits its return, but the emit is outside the row
@fx.uses(q_table, target_table, lr, gamma, epsilon, explore, step_count)
def episode(n: int) -> jax.Array:
    s, errs = fx.scan(rollout_step, jnp.int32(0), None, length=n)
    episode_return.emit(jnp.sum(errs))  # E: effax-undeclared
    return s  # E: no-any-return


with fx.handlers(*AGENT, episode_return.collect()):
    episode(3)


# case: the episode with the emit declared, discarded during evaluation
@fx.uses(q_table, target_table, lr, gamma, epsilon, explore, step_count, episode_return)
def episode_ok(n: int) -> jax.Array:
    s, errs = fx.scan(rollout_step, jnp.int32(0), None, length=n)
    episode_return.emit(jnp.sum(errs))
    return s  # E: no-any-return


with fx.handlers(*AGENT, episode_return.discard()):
    episode_ok(3)
with fx.handlers(*AGENT, episode_return.collect()) as hs:
    for _ in range(2):
        fx.jit(episode_ok, static_argnums=0)(3)
print(len(hs[episode_return]))

# case: the return collector missing around the compiled episode
with fx.handlers(*AGENT):
    fx.jit(episode_ok, static_argnums=0)(3)  # E: effax-unhandled

# case: the discount factor's default answers without a handler
print(gamma.ask())
with fx.handlers(*AGENT[:3]):
    td_update(jnp.int32(1), jnp.int32(0), jnp.float32(0), jnp.int32(0))


# case: a tabular evaluator whose row omits gamma, called under a gamma provider
@fx.uses(q_table, target_table, lr)
def evaluate_td(batch: jax.Array) -> jax.Array:
    return fx.map(lambda s: td_update(s, jnp.int32(0), jnp.float32(0), s), batch)  # E: effax-undeclared


with fx.handlers(*AGENT[:3], gamma.provide(0.99)):
    evaluate_td(jnp.arange(3))


# case: a policy evaluation by switch over actions, row covers what the branches perform
@fx.uses(q_table, explore)
def noisy_value(s: jax.Array, a: jax.Array) -> jax.Array:
    return fx.switch(
        a,
        [
            lambda: q_table.get()[s, 0],
            lambda: q_table.get()[s, 1] + 0.01 * fx.random.normal(stream=explore),
        ],
    )


with q_table.init(jnp.ones((N_STATES, N_ACTIONS))), explore.seed(2):
    print(noisy_value(jnp.int32(2), jnp.int32(1)))


# case: a cond whose second branch draws from the default stream outside the row
@fx.uses(q_table)
def maybe_noisy(s: jax.Array) -> jax.Array:
    return fx.cond(s > 2, lambda: q_table.get()[s, 0] + fx.random.normal(), lambda: q_table.get()[s, 1])  # E: effax-undeclared


with q_table.init(jnp.ones((N_STATES, N_ACTIONS))), fx.rng.seed(0):
    maybe_noisy(jnp.int32(3))


# case: epsilon chosen by a conditional handler variable
annealed = True
eps_h = epsilon.provide(jnp.float32(0.05)) if annealed else epsilon.provide(jnp.float32(0.5))
with eps_h, q_table.init(jnp.zeros((N_STATES, N_ACTIONS))), explore.seed(4):
    print(act(jnp.int32(1)))

# case: handlers tuple-unpacked, explore forgotten
h_q, h_eps = q_table.init(jnp.zeros((N_STATES, N_ACTIONS))), epsilon.provide(jnp.float32(0.1))
with h_q, h_eps:
    act(jnp.int32(1))  # E: effax-unhandled

# case: the Q-values of a tree of states, JAX's tree.map calling a function with a row
STATES = {"a": jnp.int32(0), "b": jnp.int32(3)}
with q_table.init(jnp.ones((N_STATES, N_ACTIONS))), epsilon.provide(jnp.float32(0.0)), explore.seed(0):
    print(jax.tree.map(act, STATES))

# case: the same tree.map with no exploration stream
with q_table.init(jnp.ones((N_STATES, N_ACTIONS))), epsilon.provide(jnp.float32(0.0)):
    jax.tree.map(act, STATES)  # E: effax-unhandled

# case: a replay buffer filled by a compiled handled function that owns it
push_replay = fx.handle(
    fx.uses(replay)(lambda t: replay.modify(lambda b: jnp.roll(b, 1).at[0].set(t))),
    replay.init(jnp.zeros(4)),
    transform=jax.jit,
)
for i in range(3):
    push_replay(jnp.float32(i))

# case: an exploration schedule by a static Ask whose tuple holds a list
schedule = fx.Ask[tuple[str, Sequence[float]]]("schedule", static=True)


@fx.uses(schedule)
def schedule_len() -> int:
    return len(schedule.ask()[1])


with schedule.provide(("linear", [0.5, 0.1])):  # E: effax-handler-type
    fx.jit(schedule_len)()

# case: the schedule as a tuple of tuples
with schedule.provide(("linear", (0.5, 0.1))):
    print(fx.jit(schedule_len)())
