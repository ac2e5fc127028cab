"""An actor-critic agent on a toy chain environment: scan, cond, switch, emits."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

import effax as fx
from b9lib.effects import losses, metrics, steps
from b9lib.layers import count

policy_key = fx.RandomKey("policy")
discount = fx.Ask[jax.Array]("discount")
rewards = fx.Emit[jax.Array]("rewards")
episode_return = fx.State[jax.Array]("episode_return")
explore = fx.Ask[bool]("explore", static=True, default=True)

n_states, n_actions = 4, 2
actor_w = jnp.zeros((n_states, n_actions))
critic_w = jnp.zeros(n_states)

# case: environment step and policy sampling


@fx.uses()
def env_step(state: jax.Array, action: jax.Array) -> tuple[jax.Array, jax.Array]:
    nxt = jnp.clip(state + 2 * action - 1, 0, n_states - 1)
    return nxt, jnp.where(nxt == n_states - 1, 1.0, 0.0)


@fx.uses(policy_key, explore)
def act(logits: jax.Array) -> jax.Array:
    if explore.ask():
        return jax.random.categorical(policy_key.next_key(), logits)
    return jnp.argmax(logits)


@fx.uses(policy_key, explore, rewards, episode_return, steps)
def rollout_step(state: jax.Array, _: None) -> tuple[jax.Array, jax.Array]:
    action = act(actor_w[state])
    nxt, r = env_step(state, action)
    rewards.emit(r)
    episode_return.modify(lambda g: g + r)
    count()
    return nxt, action


with fx.handlers(policy_key.seed(0), rewards.collect(), episode_return.init(jnp.float32(0)), steps.init(jnp.int32(0))) as rl:
    last, actions = fx.scan(rollout_step, jnp.int32(0), None, length=6)

# case: rollout without the return state

with fx.handlers(policy_key.seed(0), rewards.collect(), steps.init(jnp.int32(0))):
    fx.scan(rollout_step, jnp.int32(0), None, length=6)  # E: effax-unhandled

# case: greedy rollout still needs the policy stream

with fx.handlers(explore.provide(False), rewards.collect(), episode_return.init(jnp.float32(0)), steps.init(jnp.int32(0))):
    fx.scan(rollout_step, jnp.int32(0), None, length=3)  # E: effax-unhandled

# case: compiled rollout, explore off, with every handler

rollout = fx.jit(lambda s0: fx.scan(rollout_step, s0, None, length=4))
with fx.handlers(
    explore.provide(False), policy_key.seed(1), rewards.collect(), episode_return.init(jnp.float32(0)), steps.init(jnp.int32(0))
):
    rollout(jnp.int32(1))

# case: discounted returns with fori_loop


@fx.uses(discount)
def discounted(rs: jax.Array) -> jax.Array:
    def body(i: jax.Array, g: jax.Array) -> jax.Array:
        return rs[rs.shape[0] - 1 - i] + discount.ask() * g

    return fx.fori_loop(0, rs.shape[0], body, jnp.float32(0))  # E: no-any-return


with discount.provide(jnp.float32(0.9)):
    g0 = discounted(jnp.array([0.0, 0.0, 1.0]))

# case: discounted returns without the discount

discounted(jnp.array([0.0, 1.0]))  # E: effax-unhandled

# case: advantage with cond on the sign


@fx.uses(metrics)
def advantage(v: jax.Array, target: jax.Array) -> jax.Array:
    adv = target - v
    return fx.cond(adv > 0, lambda: (metrics.emit(adv), adv)[1], lambda: (metrics.emit(-adv), adv * 0.5)[1])


with metrics.collect() as adv_metrics:
    advantage(jnp.float32(0.2), jnp.float32(1.0))
    fx.jit(advantage)(jnp.float32(1.0), jnp.float32(0.2))

# case: a cond branch emitting to an undeclared collector


@fx.uses(metrics)
def clipped_advantage(v: jax.Array, target: jax.Array) -> jax.Array:
    adv = target - v
    return fx.cond(adv > 1, lambda: (losses.emit(adv), jnp.float32(1))[1], lambda: (losses.emit(adv), adv)[1])  # E: effax-undeclared, no-any-return


with metrics.collect(), losses.collect():
    clipped_advantage(jnp.float32(0.0), jnp.float32(2.0))

# case: switch over actions, one branch counting


@fx.uses(steps)
def action_cost(a: jax.Array) -> jax.Array:
    return fx.switch(  # E: no-any-return
        a,
        [
            lambda: jnp.float32(0),
            lambda: (steps.modify(lambda n: n + 1), jnp.float32(1))[1],
        ],
    )


with steps.init(jnp.int32(0)) as sw:
    costs = [fx.jit(action_cost)(jnp.int32(i)) for i in range(2)]

# case: switch at module level with a counting branch and no counter

fx.switch(jnp.int32(1), [lambda: jnp.float32(0), lambda: (count(), jnp.float32(1))[1]])  # E: effax-unhandled

# case: critic update with value_and_grad and a loss emit

critic_lr = fx.Ask[jax.Array]("critic_lr")
critic = fx.State[jax.Array]("critic")


@fx.uses(critic, critic_lr, losses)
def critic_update(s: jax.Array, target: jax.Array) -> jax.Array:
    def td_loss(w: jax.Array) -> jax.Array:
        return (w[s] - target) ** 2

    loss, g = jax.value_and_grad(td_loss)(critic.get())
    critic.set(critic.get() - critic_lr.ask() * g)
    losses.emit(loss)
    return loss  # E: no-any-return


with fx.handlers(critic.init(critic_w), critic_lr.provide(jnp.float32(0.1)), losses.collect()) as ch:
    for s in range(3):
        critic_update(jnp.int32(s), jnp.float32(1.0))

# case: critic update with the collector discarded

with fx.handlers(critic.init(critic_w), critic_lr.provide(jnp.float32(0.1)), losses.discard()):
    critic_update(jnp.int32(0), jnp.float32(1.0))

# case: critic update with handlers spread from a list

critic_cells: list[fx.Handler[Any]] = [critic.init(critic_w), critic_lr.provide(jnp.float32(0.1))]
with fx.handlers(*critic_cells):
    critic_update(jnp.int32(0), jnp.float32(1.0))  # E: effax-unhandled

# case: actor-critic episode loop with an empty row


@fx.uses()
def train_episodes(n: int) -> jax.Array:
    with fx.handlers(
        policy_key.seed(0), rewards.collect(), episode_return.init(jnp.float32(0)), steps.init(jnp.int32(0))
    ) as eh:
        for _ in range(n):
            fx.scan(rollout_step, jnp.int32(0), None, length=3)  # E: effax-undeclared
    return eh[episode_return]


ret = train_episodes(2)

# case: episode loop forgetting a handler inside


@fx.uses()
def train_episodes_broken(n: int) -> None:
    with fx.handlers(policy_key.seed(0), rewards.collect(), steps.init(jnp.int32(0))):
        for _ in range(n):
            fx.scan(rollout_step, jnp.int32(0), None, length=3)  # E: effax-undeclared


with episode_return.init(jnp.float32(0)):
    train_episodes_broken(1)

# case: while loop until the goal, reducing into state

goal_steps = fx.State[jax.Array]("goal_steps")


@fx.uses(policy_key, explore, goal_steps)
def until_goal(s0: jax.Array) -> jax.Array:
    def body(s: jax.Array) -> jax.Array:
        goal_steps.modify(lambda n: n + 1)
        return env_step(s, act(actor_w[s]))[0]

    return fx.while_loop(lambda s: (s < n_states - 1) & (goal_steps.get() < 20), body, s0)


with policy_key.seed(3), goal_steps.init(jnp.int32(0)) as gs:
    until_goal(jnp.int32(0))

# case: while loop body lambda drawing keys at module level

fx.while_loop(lambda s: s < 2, lambda s: s + jax.random.bernoulli(policy_key.next_key()).astype(jnp.int32), jnp.int32(0))  # E: effax-unhandled

# case: map over start states with a collector

with fx.handlers(policy_key.seed(4), rewards.collect(), episode_return.init(jnp.float32(0)), steps.init(jnp.int32(0))):
    first_moves = fx.map(lambda s: rollout_step(s, None)[1], jnp.arange(3))

# case: entropy bonus emitted per step via a nested def


@fx.uses(metrics)
def entropy_bonus(lg: jax.Array) -> jax.Array:
    def entropy(p: jax.Array) -> jax.Array:
        e = -jnp.sum(p * jnp.log(p + 1e-8))
        metrics.emit(e)
        return e

    return entropy(jax.nn.softmax(lg))


with metrics.collect() as ent:
    entropy_bonus(actor_w[0])
    fx.vmap(entropy_bonus)(actor_w)

# case: entropy of a batch inside a row without the collector


@fx.uses(discount)
def weighted_entropy(lgs: jax.Array) -> jax.Array:
    return discount.ask() * jnp.sum(fx.vmap(entropy_bonus)(lgs))  # E: effax-undeclared


with metrics.collect(), discount.provide(jnp.float32(0.9)):
    weighted_entropy(actor_w)

# case: a nested def kept in a variable and called at module level without a collector


def make_logger():  # type: ignore[no-untyped-def]
    def log_reward(r: jax.Array) -> None:
        rewards.emit(r)

    return log_reward


reward_logger = make_logger()  # E: no-untyped-call
with rewards.collect():
    reward_logger(jnp.float32(1.0))
reward_logger(jnp.float32(0.0))  # limit: a function returned by a function carries no row

# case: eval policy with explore off and the policy stream

with explore.provide(False), policy_key.seed(9):
    greedy = act(actor_w[1])
