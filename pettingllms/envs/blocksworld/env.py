"""Blocksworld environment: restack lettered blocks from a start into a goal configuration."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import ClassVar

from pettingllms.envs.blocksworld import parsers, prompts, rewards
from pettingllms.envs.blocksworld.generator import generate_problem
from pettingllms.envs.blocksworld.solver import plan
from pettingllms.envs.blocksworld.state import (
    TABLE,
    BlocksState,
    Move,
    apply_moves,
    block_names,
    format_stacks,
    is_solved,
    misplaced,
)
from pettingllms.envs.game import GameConfig, GameEnv, GameSpec, Outcome

SPEC = GameSpec(
    env_name="blocksworld",
    env_tool="simulate",
    prompts=prompts.PROMPTS,
    parse_answer=parsers.parse_answer,
    format_answer=parsers.format_answer,
)


@dataclass(frozen=True)
class BlocksworldConfig(GameConfig):
    """Blocksworld settings (see :class:`~pettingllms.envs.game.GameConfig` for the shared ones).

    > Instances

    - ``num_blocks``: blocks ``A``, ``B``, ... (2 to 26; the A* planner measures every instance: about
      1 ms each at 4 blocks, 30 ms at 12, 0.2 s at 20, seconds at 26).
    - ``min_plan_length`` / ``max_plan_length``: range of the optimal plan length an instance must have
      (``max_plan_length`` None: no upper bound).

    > Answers and the oracle

    - ``max_answer_moves``: longest plan an answer may hold (longer is a parse error).
    - ``random_max_moves``: longest plan the random scripted policy draws.
    - ``solver_max_states``: search limit of the A* planner (past it the oracle plays a simple valid plan
      and the generator draws again).
    """

    num_blocks: int = 4
    min_plan_length: int = 2
    max_plan_length: int | None = None
    max_answer_moves: int = 32
    random_max_moves: int = 4
    solver_max_states: int = 200_000

    def __post_init__(self) -> None:
        super().__post_init__()
        block_names(self.num_blocks)
        for name in ("min_plan_length", "max_answer_moves", "random_max_moves", "solver_max_states"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")
        limit = self.max_plan_length
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < self.min_plan_length):
            raise ValueError(
                f"`max_plan_length` must be None or an integer >= `min_plan_length` ({self.min_plan_length}), got {limit!r}"
            )


class BlocksworldEnv(GameEnv[BlocksState]):
    """Blocksworld. Success: the stacks equal the goal's. Never unwinnable (every move can be undone)."""

    name: ClassVar[str] = "blocksworld"
    config_class: ClassVar[type[GameConfig]] = BlocksworldConfig
    spec: ClassVar[GameSpec] = SPEC
    config: BlocksworldConfig

    def initial_state(self, seed: int) -> BlocksState:
        cfg = self.config
        problem = generate_problem(
            seed, cfg.num_blocks, cfg.min_plan_length, cfg.max_plan_length, max_states=cfg.solver_max_states
        )
        return BlocksState(seed=seed, problem=problem, stacks=problem.start)

    def task_reward_of(self, state: BlocksState) -> float:
        return rewards.task_reward(state)

    def is_success(self, state: BlocksState) -> bool:
        return is_solved(state.stacks, state.problem.goal)

    def answer_spec(self) -> parsers.PlanSpec:
        return parsers.PlanSpec(block_names(self.config.num_blocks), self.config.max_answer_moves)

    def apply_answer(self, state: BlocksState, answer: tuple[Move, ...]) -> tuple[BlocksState, Outcome]:
        goal = state.problem.goal
        result = apply_moves(state.stacks, goal, answer)
        new_state = dataclasses.replace(
            state,
            stacks=result.stacks,
            moves_made=state.moves_made + result.applied,
            invalid_moves=state.invalid_moves + result.invalid,
        )
        report = (
            f"{result.applied - result.invalid} move(s) played, {result.invalid} rejected; now "
            f"{format_stacks(result.stacks)}; "
        )
        if result.solved:
            report += "goal reached"
        else:
            report += f"{misplaced(result.stacks, goal)} block(s) out of place"
        return new_state, Outcome(invalid=result.invalid, report=report)

    def render(self, state: BlocksState) -> str:
        return prompts.render(state)

    def oracle_answer(self, state: BlocksState) -> tuple[Move, ...]:
        """A shortest plan from the current stacks (A*; a simple valid plan past the search limit)."""
        moves = plan(state.stacks, state.problem.goal, self.config.solver_max_states)
        if not moves:
            raise ValueError(f"blocksworld seed {state.seed}: the stacks already are the goal")
        return moves

    def random_answer(self, state: BlocksState, rng: random.Random) -> tuple[Move, ...]:
        blocks = state.problem.blocks
        moves = []
        for _ in range(rng.randint(1, self.config.random_max_moves)):
            block = rng.choice(blocks)
            moves.append((block, rng.choice([TABLE, *(b for b in blocks if b != block)])))
        return tuple(moves)
