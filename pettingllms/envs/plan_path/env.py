"""Plan-Path environment: reach the goal on a grid with walls."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import ClassVar

from pettingllms.envs.game import GameConfig, GameEnv, GameSpec, Outcome
from pettingllms.envs.game_parsers import MOVES
from pettingllms.envs.plan_path import parsers, prompts, rewards
from pettingllms.envs.plan_path.generator import generate_level
from pettingllms.envs.plan_path.solver import shortest_path
from pettingllms.envs.plan_path.state import MoveResult, PlanPathState, apply_moves

SPEC = GameSpec(
    env_name="plan_path",
    env_tool="simulate",
    prompts=prompts.PROMPTS,
    parse_answer=parsers.parse_answer,
    format_answer=parsers.format_answer,
)


@dataclass(frozen=True)
class PlanPathConfig(GameConfig):
    """Plan-Path settings (see :class:`~pettingllms.envs.game.GameConfig` for the shared ones).

    > Instances

    - ``rows`` / ``cols``: grid size.
    - ``wall_density``: fraction of cells that are walls (exact count, rounded).

    > Answers

    - ``max_answer_moves``: longest move list an answer may hold (longer is a parse error).
    - ``random_max_moves``: longest move list the random scripted policy draws.
    """

    rows: int = 10
    cols: int = 10
    wall_density: float = 0.22
    max_answer_moves: int = 64
    random_max_moves: int = 6

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("rows", "cols", "max_answer_moves", "random_max_moves"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")
        if self.rows * self.cols < 2:
            raise ValueError(f"`rows` x `cols` must hold at least 2 cells, got {self.rows} x {self.cols}")
        if not 0.0 <= self.wall_density < 1.0:
            raise ValueError(f"`wall_density` must be in [0, 1), got {self.wall_density}")


class PlanPathEnv(GameEnv[PlanPathState]):
    """Grid path finding. Success: the player stands on the goal. Never unwinnable (moves are undoable)."""

    name: ClassVar[str] = "plan_path"
    config_class: ClassVar[type[GameConfig]] = PlanPathConfig
    spec: ClassVar[GameSpec] = SPEC
    config: PlanPathConfig

    def initial_state(self, seed: int) -> PlanPathState:
        cfg = self.config
        level = generate_level(seed, cfg.rows, cfg.cols, cfg.wall_density)
        return PlanPathState(seed=seed, level=level, pos=level.start)

    def task_reward_of(self, state: PlanPathState) -> float:
        return rewards.task_reward(state)

    def is_success(self, state: PlanPathState) -> bool:
        return state.pos == state.level.goal

    def answer_spec(self) -> parsers.MoveSpec:
        return parsers.MoveSpec(self.config.max_answer_moves)

    def apply_answer(self, state: PlanPathState, answer: tuple[str, ...]) -> tuple[PlanPathState, Outcome]:
        result: MoveResult = apply_moves(state.level, state.pos, answer)
        new_state = dataclasses.replace(
            state,
            pos=result.pos,
            moves_made=state.moves_made + result.applied,
            invalid_moves=state.invalid_moves + result.invalid,
        )
        report = f"ends at row {result.pos[0]}, col {result.pos[1]}; {result.invalid} blocked move(s)"
        if result.reached:
            report += "; goal reached"
        return new_state, Outcome(invalid=result.invalid, report=report)

    def render(self, state: PlanPathState) -> str:
        return prompts.render(state)

    def oracle_answer(self, state: PlanPathState) -> tuple[str, ...]:
        path = shortest_path(state.level, state.pos)
        if not path:
            raise ValueError(f"plan_path seed {state.seed}: no path from {state.pos} to the goal")
        return path

    def random_answer(self, state: PlanPathState, rng: random.Random) -> tuple[str, ...]:
        return tuple(rng.choice(MOVES) for _ in range(rng.randint(1, self.config.random_max_moves)))
