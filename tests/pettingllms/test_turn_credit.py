"""Credit across turns for tree sampling (``credit_depth`` / ``credit_discount``,
:mod:`pettingllms.execution.continuation`): the return formula, the engine's continuations on a relay game
whose later success is computed by hand, the continuation-completion count, config errors and seeds.

The relay game: a *scout* posts a note (a digit), a *guesser* guesses the secret (``problem_id % 10``);
the task (global) reward is 1 once the guess is the secret, ``note_reward`` while only the note is right,
else 0; local rewards are 0. The scripted backend: at turn 0 the scout's candidate ``j`` of a request posts
note ``j`` (a continuation request has ``n = 1``: note 0), at later turns the scout posts the secret; the
guesser copies the note. So at turn 0 the scout's candidates all earn ``r_0 = 0`` (no guess yet): the value
of the right note shows only in the guesser's later step, which only credit across turns sees.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import pytest

from comlrl.rollout.types import Completion
from comlrl.seeding import derive_seed
from pettingllms.agents import Agent, ParseError
from pettingllms.agents.failures import StepTimeoutError
from pettingllms.config.errors import ConfigError
from pettingllms.config.rollout_section import RolloutConfig
from pettingllms.envs.base import BaseEnv, EnvConfig, EnvState
from pettingllms.execution import (
    EngineConfig,
    RolloutBatch,
    RolloutEngine,
    Router,
    credit_return,
    global_increments,
)
from pettingllms.execution.continuation import continuation_seed
from pettingllms.stages.at_grpo import CompletionCounter, TrainingLimits, step_completions
from pettingllms.trainer.grouping import sample_advantages
from pettingllms.trainer.metrics import credit_metrics
from pettingllms.trainer.step_view import StepView
from pettingllms.workers.engine import merge_worker_batches

ORDER = ("scout", "guesser")


# ---- the relay game ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RelayConfig(EnvConfig):
    note_reward: float = 0.0


@dataclass(kw_only=True)
class RelayState(EnvState):
    secret: int
    note: int | None = None
    guess: int | None = None


class RelayEnv(BaseEnv[RelayState]):
    name = "credit_relay"
    config_class = RelayConfig
    roles = ORDER

    def initial_state(self, seed):
        return RelayState(seed=seed, secret=seed % 10)

    def task_reward_of(self, state):
        if state.guess == state.secret:
            return 1.0
        return self.config.note_reward if state.note == state.secret else 0.0

    def is_success(self, state):
        return state.guess == state.secret


class DigitAgent(Agent):
    fail_on: int | None = None  # an infrastructure failure when stepping this digit (the failure test)

    def update_from_env(self, turn_idx, env):
        self.prompt = f"{self.role} turn {turn_idx} note {env.state.note}"
        return self.prompt

    def parse(self, response):
        if len(response) != 1 or not response.isdigit():
            raise ParseError(f"expected a digit, got {response!r}")
        return int(response)

    async def step(self, env, env_worker=None):
        if self.action is not None and self.action == self.fail_on:
            raise StepTimeoutError(f"{self.role} step on digit {self.action} timed out")
        setattr(env.state, "note" if self.role == "scout" else "guess", self.action)
        self.local_reward = 0.0


class ScriptBackend:
    """The scripted team of the module docstring; ``random_guess`` makes the guesser guess from the request's
    seed instead (the seed tests). Records ``(role, turn, n, seed)`` of every request of every call."""

    wants_env_context = True

    def __init__(self, random_guess: bool = False) -> None:
        self.random_guess = random_guess
        self.calls: list[list[tuple[str, int, int, int]]] = []

    def respond(self, role, state, turn, j, seed):
        if role == "scout":
            return str(j) if turn == 0 else str(state.secret)
        if self.random_guess:
            return str(random.Random(seed).randrange(10))
        return str(state.note)

    def generate(self, requests, params=None):
        self.calls.append([(r.metadata["role"], r.metadata["turn"], r.params.n, r.seed) for r in requests])
        out = []
        for r in requests:
            state = r.metadata["env_context"].env.state
            seeds = [derive_seed(r.seed, j) for j in range(r.params.n)]
            texts = [self.respond(r.metadata["role"], state, r.metadata["turn"], j, s) for j, s in enumerate(seeds)]
            out.append([Completion([], [], [], t, "stop", r.policy, 0, s) for t, s in zip(texts, seeds)])
        return out


def relay_engine(depth=0, discount=1.0, k=4, note_reward=0.0, alpha=1.0, seed=0, backend=None, fail_on=None):
    backend = backend or ScriptBackend()
    agents = [DigitAgent(role=role) for role in ORDER]
    agents[1].fail_on = fail_on
    env_config = {"turn_order": list(ORDER), "max_turns": 2, "note_reward": note_reward, "alpha": alpha}
    config = EngineConfig(num_generations=k, seed=seed, credit_depth=depth, credit_discount=discount)
    router = Router({role: role for role in ORDER}, backend)
    return RolloutEngine(lambda: RelayEnv(env_config), agents, router, config), backend


def group_returns(batch, problem, turn, agent):
    return [s.group_reward for s in batch.groups()[(problem, turn, agent)]]


def selected_note(batch, problem):
    (chosen,) = [s for s in batch.groups()[(problem, 0, 0)] if s.selected]
    return chosen.action


# ---- (1) the return formula ----------------------------------------------------------------------
def test_global_increments_are_weighted_changes_of_the_global_reward():
    # G_0 = 0.5, G_1..3 = 0.5, 1.0, 1.0 -> (0.5-0.5, 1.0-0.5, 1.0-1.0) = (0, 0.5, 0), times alpha = 2: (0, 1, 0)
    assert global_increments(0.5, [0.5, 1.0, 1.0], alpha=2.0) == [0.0, 1.0, 0.0]
    # a level held at 0.5 for three steps pays nothing again: increments 0.5-0 = 0.5, then 0, 0
    assert global_increments(0.0, [0.5, 0.5, 0.5], alpha=1.0) == [0.5, 0.0, 0.0]
    assert global_increments(0.3, [], alpha=1.0) == []


def test_credit_return_against_hand_computed_numbers():
    # R = 0.25 + 0.5 * 0.5 + 0.5**2 * 1.0 + 0.5**3 * (-0.5) = 0.25 + 0.25 + 0.25 - 0.0625 = 0.6875
    assert credit_return(0.25, [0.5, 1.0, -0.5], discount=0.5, depth=3) == 0.6875
    # gamma = 1: the increments telescope; r_0 = 0.25 plus all of them: 0.25 + 0.5 + 1.0 - 0.5 = 1.25
    assert credit_return(0.25, [0.5, 1.0, -0.5], discount=1.0, depth=3) == 1.25
    # gamma = 0: the candidate's own reward exactly (0**j = 0 for j >= 1)
    assert credit_return(0.25, [0.5, 1.0, -0.5], discount=0.0, depth=3) == 0.25
    # depth cut-offs: depth 1 keeps 0.5 * 0.5 -> 0.5; depth 2 adds 0.25 * 1.0 -> 0.75; depth 0: r_0
    assert credit_return(0.25, [0.5, 1.0, -0.5], discount=0.5, depth=1) == 0.5
    assert credit_return(0.25, [0.5, 1.0, -0.5], discount=0.5, depth=2) == 0.75
    assert credit_return(0.25, [0.5, 1.0, -0.5], discount=0.5, depth=0) == 0.25
    # an episode that ended after m = 1 < depth = 4 steps: 0.25 + 0.5 * 1.0 = 0.75
    assert credit_return(0.25, [1.0], discount=0.5, depth=4) == 0.75
    # ended with the candidate's own step (m = 0): r_0 itself
    assert credit_return(-0.5, [], discount=0.9, depth=4) == -0.5


@pytest.mark.parametrize(("depth", "discount", "message"), [
    (-1, 0.5, "`depth` must be an integer >= 0, got -1"),
    (True, 0.5, "`depth` must be an integer >= 0, got True"),
    (2, 1.5, "`discount` must be in [0, 1], got 1.5"),
])
def test_credit_return_rejects_a_bad_depth_or_discount(depth, discount, message):
    with pytest.raises(ValueError) as error:
        credit_return(0.0, [1.0], discount, depth)
    assert str(error.value) == message


# ---- (2) the engine: a branch that later succeeds ---------------------------------------------------
@pytest.mark.parametrize(("depth", "wrong_note_return"), [(1, 0.0), (2, 0.0), (3, 0.125)])
def test_the_right_note_earns_what_its_branch_later_scores(depth, wrong_note_return):
    engine, _ = relay_engine(depth=depth, discount=0.5)
    batch = engine.rollout([2, 7], step=0)
    # Problem 2 (secret 2), scout at turn 0, notes 0..3, r_0 = 0 for all (no guess yet, note_reward 0).
    # Note 2: continuation 1 is the guesser copying it: G 0 -> 1, g_1 = 1, done: R = 0 + 0.5 * 1 = 0.5.
    # Notes 0, 1, 3: the guess is wrong (g_1 = 0); turn 1: the scout posts 2 (g_2 = 0), the guesser guesses
    # 2 (G 0 -> 1, g_3 = 1): R = 0.5**3 * 1 = 0.125 with depth 3, 0 when cut off at depth 1 or 2.
    w = wrong_note_return
    assert group_returns(batch, 2, 0, 0) == [w, w, 0.5, w]
    assert group_returns(batch, 7, 0, 0) == [w, w, w, w]  # secret 7: no note of 0..3 is right
    assert all(s.reward == 0.0 for s in batch.groups()[(2, 0, 0)])  # the immediate reward is kept
    for problem in (2, 7):
        # The guesser's group at turn 0 follows the selected note s (selection by the immediate reward:
        # a seeded tie-break among the four). s right: the guess wins now, r_0 = 1, done, R = 1. s wrong:
        # r_0 = 0, then the scout posts the secret (g_1 = 0) and the guesser wins (g_2 = 1): R = 0.25 with
        # depth >= 2, 0 with depth 1.
        right = selected_note(batch, problem) == problem % 10
        expected = 1.0 if right else (0.25 if depth >= 2 else 0.0)
        assert group_returns(batch, problem, 0, 1) == [expected] * 4
        if not right:
            # Turn 1: the scout posts the secret (r_0 = 0), the guesser then wins: R = 0.5 * 1 = 0.5; the
            # guesser's own winning step ends the episode: R = r_0 = 1.
            assert group_returns(batch, problem, 1, 0) == [0.5] * 4
            assert group_returns(batch, problem, 1, 1) == [1.0] * 4


def test_advantages_use_the_return_and_depth_zero_gives_none():
    plain, _ = relay_engine(depth=0)
    credit, _ = relay_engine(depth=3, discount=0.5)
    off, on = plain.rollout([2, 7], step=0), credit.rollout([2, 7], step=0)
    off_adv = dict(zip(map(id, off.samples), sample_advantages(off.samples, "none").tolist()))
    on_adv = dict(zip(map(id, on.samples), sample_advantages(on.samples, "none").tolist()))
    # Without credit every scout candidate at turn 0 ties at 0: no advantage, nothing learned.
    assert [off_adv[id(s)] for s in off.groups()[(2, 0, 0)]] == [0.0] * 4
    # With it: R = [0.125, 0.125, 0.5, 0.125], mean 0.875 / 4 = 0.21875, so R - mean =
    # [-0.09375, -0.09375, 0.28125, -0.09375]: the right note is pushed up, the others down.
    assert [on_adv[id(s)] for s in on.groups()[(2, 0, 0)]] == [-0.09375, -0.09375, 0.28125, -0.09375]
    # Problem 7's four notes are all wrong and tie at 0.125: advantage 0 either way.
    assert [on_adv[id(s)] for s in on.groups()[(7, 0, 0)]] == [0.0] * 4
    # The group statistics scale only the spread: the right note stays the one pushed up.
    scaled = dict(zip(map(id, on.samples), sample_advantages(on.samples, "group").tolist()))
    signs = [scaled[id(s)] > 0 for s in on.groups()[(2, 0, 0)]]
    assert signs == [False, False, True, False]


def test_increments_do_not_pay_a_level_twice():
    # note_reward 0.5 (a level), gamma 0.5, depth 3, problem 2. Note 2: G_0 = 0.5, r_0 = 0.5; the guesser
    # wins: G_1 = 1, g_1 = 0.5: R = 0.5 + 0.5 * 0.5 = 0.75 (summing levels would give 0.5 + 0.5 * 1 = 1.0).
    # Note 0: r_0 = 0; wrong guess g_1 = 0; the scout posts 2: G_2 = 0.5, g_2 = 0.5; the guesser wins:
    # g_3 = 0.5: R = 0.25 * 0.5 + 0.125 * 0.5 = 0.1875.
    engine, _ = relay_engine(depth=3, discount=0.5, note_reward=0.5)
    batch = engine.rollout([2], step=0)
    assert group_returns(batch, 2, 0, 0) == [0.1875, 0.1875, 0.75, 0.1875]
    # alpha = 2 weighs r_0 and the increments alike: note 2: r_0 = 2 * 0.5 = 1, g_1 = 2 * 0.5 = 1:
    # R = 1 + 0.5 * 1 = 1.5; note 0: 0.25 * 1 + 0.125 * 1 = 0.375.
    engine, _ = relay_engine(depth=3, discount=0.5, note_reward=0.5, alpha=2.0)
    assert group_returns(engine.rollout([2], step=0), 2, 0, 0) == [0.375, 0.375, 1.5, 0.375]


def test_depth_zero_is_plain_tree_sampling_exactly():
    default, default_backend = relay_engine(backend=ScriptBackend(random_guess=True), seed=3)
    explicit, explicit_backend = relay_engine(depth=0, discount=0.25, backend=ScriptBackend(random_guess=True), seed=3)
    a, b = default.rollout([2, 7, 4], step=5), explicit.rollout([2, 7, 4], step=5)
    assert a.samples == b.samples
    assert all(s.group_reward == s.reward for s in b.samples)
    assert sample_advantages(a.samples).tolist() == sample_advantages(b.samples).tolist()
    assert b.continuation_completions == 0 and "continuation_completions" not in b.stats()
    assert b.calls_per_decision_point == a.calls_per_decision_point
    assert all("continuation" not in point for point in b.calls_per_decision_point)
    assert explicit_backend.calls == default_backend.calls


def test_credit_changes_the_group_rewards_and_nothing_else():
    off, _ = relay_engine(backend=ScriptBackend(random_guess=True), seed=3)
    on, _ = relay_engine(depth=2, discount=0.9, backend=ScriptBackend(random_guess=True), seed=3)
    a, b = off.rollout([2, 7, 4], step=5), on.rollout([2, 7, 4], step=5)
    # Same selections, actions, immediate rewards and outcomes: continuations run on copies of copies.
    assert [dataclasses.replace(s, group_reward=0.0) for s in a.samples] == [
        dataclasses.replace(s, group_reward=0.0) for s in b.samples
    ]
    assert a.outcomes == b.outcomes
    assert any(s.group_reward != s.reward for s in b.samples)


def test_a_continuation_that_fails_for_infrastructure_drops_its_candidate():
    # note_reward 0.5: the scout's note 2 is selected (the unique best r_0), so the guesser only ever
    # steps on note 1 in candidate 1's continuation, where it times out.
    engine, _ = relay_engine(depth=2, discount=0.5, note_reward=0.5, fail_on=1)
    batch = engine.rollout([2], step=0)
    assert [s.candidate for s in batch.groups()[(2, 0, 0)]] == [0, 2, 3]
    assert batch.dropped_samples == 1 and batch.failures == {"infrastructure": 1}
    assert engine.budget.infra_failed == 1
    # Notes 0 and 3: g_1 = 0, scout posts 2: g_2 = 0.5 -> R = 0.25 * 0.5 = 0.125; note 2: 0.5 + 0.5 * 0.5.
    assert group_returns(batch, 2, 0, 0) == [0.125, 0.75, 0.125]


# ---- (3) batching and the completion count ----------------------------------------------------------
def test_continuations_go_out_batched_and_are_counted():
    engine, backend = relay_engine(depth=3, discount=0.5)
    batch = engine.rollout([2, 7], step=0)
    points = batch.calls_per_decision_point
    # Decision (turn 0, scout), then its continuations: depth 1, 8 guessers (2 problems x K = 4); problem
    # 2's note 2 wins there, so depth 2 has 7 scouts (turn 1) and depth 3 7 guessers. One call each, n = 1.
    assert [p.get("continuation") for p in points[:4]] == [None, 1, 2, 3]
    assert [p["requests"] for p in points[:4]] == [2, 8, 7, 7]
    assert [[n for _, _, n, _ in call] for call in backend.calls[1:4]] == [[1] * 8, [1] * 7, [1] * 7]
    assert [{(role, turn) for role, turn, _, _ in call} for call in backend.calls[1:4]] == [
        {("guesser", 0)}, {("scout", 1)}, {("guesser", 1)}
    ]
    assert all(sum(p["calls"].values()) == 1 for p in points)  # one call per policy per round
    continuation_requests = sum(p["requests"] for p in points if "continuation" in p)
    assert batch.continuation_completions == continuation_requests
    stats = batch.stats()
    assert stats["continuation_completions"] == continuation_requests
    assert stats["decision_points"] == sum("continuation" not in p for p in points)
    assert stats["generate_calls"] == len(points) == len(backend.calls)
    # Not training samples: the samples are the K = 4 candidates of each decision point's requests only.
    assert len(batch.samples) == 4 * sum(p["requests"] for p in points if "continuation" not in p)


def test_the_completion_budget_counts_continuations():
    samples = relay_engine(depth=3, discount=0.5)[0].rollout([2, 7], step=0).samples
    metrics = credit_metrics(samples, 22)
    assert metrics["rollout/continuation_completions"] == 22.0
    assert metrics["reward_immediate"] == sum(s.reward for s in samples) / len(samples)
    assert 0.0 <= metrics["frac_reward_zero_std_immediate"] <= 1.0
    record = {"num_samples": 40.0, "dropped_samples": 2.0, **metrics}
    assert step_completions(record) == 64
    assert step_completions({"num_samples": 40.0, "dropped_samples": 2.0}) == 42  # without credit
    counter = CompletionCounter(TrainingLimits(max_completions=100), [record])
    assert counter.completions == 64 and not counter.budget_spent
    counter.count(record)
    assert counter.budget_spent


def test_workers_and_ranks_sum_the_continuation_count():
    parts = []
    for offset, ids in ((0, [2]), (1, [7])):
        batch = relay_engine(depth=3, discount=0.5)[0].rollout(ids, step=0)
        parts.append((offset, batch))
    merged = merge_worker_batches(parts, step=0, mode="tree", trajectories_per_problem=4)
    assert merged.continuation_completions == sum(b.continuation_completions for _, b in parts) > 0
    view = StepView.local(merged, merged.samples, {}, 0, "")
    assert view.continuation_completions == merged.continuation_completions
    assert RolloutBatch(step=0, mode="tree", samples=[], outcomes=[]).continuation_completions == 0


# ---- (4) config errors -------------------------------------------------------------------------------
@pytest.mark.parametrize(("settings", "message"), [
    ({"credit_depth": -1}, "`credit_depth` must be an integer >= 0, got -1"),
    ({"credit_depth": 1.5}, "`credit_depth` must be an integer >= 0, got 1.5"),
    ({"credit_discount": 1.5}, "`credit_discount` must be a finite number in [0.0, 1.0], got 1.5"),
    ({"credit_discount": -0.1}, "`credit_discount` must be a finite number in [0.0, 1.0], got -0.1"),
    ({"credit_depth": 2, "sampling_mode": "independent"},
     "`credit_depth` is 2, but `sampling_mode` is 'independent': credit across turns continues tree candidates "
     "and needs tree sampling; set `credit_depth` 0"),
])
def test_engine_config_errors_name_the_field(settings, message):
    with pytest.raises(ValueError) as error:
        EngineConfig(**settings)
    assert str(error.value) == message


def test_rollout_section_checks_its_credit_keys():
    assert (RolloutConfig().credit_depth, RolloutConfig().credit_discount) == (0, 1.0)
    with pytest.raises(ValueError, match=r"^`credit_depth` must be an integer >= 0, got True$"):
        RolloutConfig(credit_depth=True)
    with pytest.raises(ValueError, match=r"^`credit_discount` must be a finite number in \[0.0, 1.0\], got 2$"):
        RolloutConfig(credit_discount=2)
    EngineConfig(sampling_mode="independent", credit_depth=0)  # off: fine with any sampling


@pytest.mark.parametrize(("name", "overrides", "where"), [
    ("plan_path/L1", ["pipeline=[at_grpo]", "at_grpo.sampling_mode=independent"],
     "`at_grpo.sampling_mode` is 'independent'"),
    ("plan_path/L0", ["pipeline=[grpo]"], "stage `grpo` samples independently"),
])
def test_a_pipeline_with_independent_sampling_refuses_credit(name, overrides, where):
    from pettingllms.config import load_config, validate_config

    validate_config(load_config(name, overrides))  # the same pipeline without credit is valid
    config = load_config(name, [*overrides, "rollout.credit_depth=2"])
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    assert str(error.value) == (
        f"`rollout.credit_depth` is 2, but {where}: credit across turns continues tree candidates and needs "
        "tree sampling (`at_grpo.sampling_mode` tree); set `rollout.credit_depth` 0"
    )


# ---- (5) reproducibility --------------------------------------------------------------------------
def test_continuations_are_seeded_per_candidate_and_reproducible():
    def run(seed):
        engine, backend = relay_engine(depth=3, discount=0.5, seed=seed, backend=ScriptBackend(random_guess=True))
        batch = engine.rollout([2, 7, 4], step=6)
        return [s.group_reward for s in batch.samples], backend.calls

    returns, calls = run(11)
    assert run(11) == (returns, calls)
    # Depth 1 of the first decision point (turn 0, scout): one request per (problem, candidate), seeded
    # derive_seed(run seed, "credit", step, problem, turn, agent, candidate, depth).
    want = [continuation_seed(11, 6, p, 0, 0, c, 1) for p in (2, 7, 4) for c in range(4)]
    assert [seed for _, _, _, seed in calls[1]] == want
    assert want[0] == derive_seed(11, "credit", 6, 2, 0, 0, 0, 1)
    assert run(12)[0] != returns  # the random guesses, hence the returns, follow the seed


# ---- the trainer ----------------------------------------------------------------------------------
def test_the_trainer_logs_the_immediate_reward_and_the_continuation_count(tmp_path, tiny_model_path):
    import json

    from pettingllms.trainer.at_grpo import ATGRPOTrainer

    settings = dict(
        policy_level="L1", max_turns=2, problems_per_step=1, num_generations=2, max_completion_length=4,
        max_steps=1, per_device_train_batch_size=4, output_dir=str(tmp_path / "run"), disable_tqdm=True, seed=1,
        credit_depth=2, credit_discount=0.5,
    )
    trainer = ATGRPOTrainer.from_flat(settings, model=tiny_model_path, env_config={"rows": 4, "cols": 4})
    assert (trainer.engine.config.credit_depth, trainer.engine.config.credit_discount) == (2, 0.5)
    batches = []
    rollout = trainer.engine.rollout
    trainer.engine.rollout = lambda ids, step: batches.append(rollout(ids, step)) or batches[-1]
    (metrics,) = trainer.train()
    (batch,) = batches
    # 1 problem, K = 2, turn order (tool, plan), 2 turns = 4 decision points; the untrained model never
    # parses, so only the turn budget ends an episode: the candidates at (turn 0, tool) and (turn 0, plan)
    # continue 2 steps, those at (turn 1, tool) 1 step, those at (turn 1, plan) none: 2 * (2 + 2 + 1) = 10.
    assert metrics["rollout/continuation_completions"] == batch.continuation_completions == 10
    assert metrics["num_samples"] == len(batch.samples) == 2 * 4
    assert metrics["reward_immediate"] == pytest.approx(sum(s.reward for s in batch.samples) / 8)
    assert metrics["reward"] == pytest.approx(sum(s.group_reward for s in batch.samples) / 8)
    (record,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert record["rollout/continuation_completions"] == batch.continuation_completions
    assert step_completions(record) == 8 + batch.continuation_completions
