"""Sokoban environment: push every box onto a goal."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import ClassVar

from pettingllms.envs.game import GameConfig, GameEnv, GameSpec, Outcome
from pettingllms.envs.game_parsers import MOVES
from pettingllms.envs.sokoban import parsers, prompts, rewards
from pettingllms.envs.sokoban.generator import generate_level
from pettingllms.envs.sokoban.solver import solve
from pettingllms.envs.sokoban.state import SokobanState, apply_moves, is_corner_deadlocked, is_solved

SPEC = GameSpec(
    env_name="sokoban",
    env_tool="simulate",
    prompts=prompts.PROMPTS,
    parse_answer=parsers.parse_answer,
    format_answer=parsers.format_answer,
)


@dataclass(frozen=True)
class SokobanConfig(GameConfig):
    """Sokoban settings (see :class:`~pettingllms.envs.game.GameConfig` for the shared ones).

    > Instances

    - ``rows`` / ``cols``: board size, border walls included.
    - ``num_boxes``: boxes (and goals).
    - ``reverse_steps``: length of the generator's backward random play.
    - ``min_box_distance``: summed box-to-start-goal distance a level must have.

    > Answers and the oracle

    - ``max_answer_moves``: longest move list an answer may hold (longer is a parse error).
    - ``random_max_moves``: longest move list the random scripted policy draws.
    - ``solver_max_states``: search limit of the BFS oracle.
    """

    rows: int = 6
    cols: int = 6
    num_boxes: int = 1
    reverse_steps: int = 300
    min_box_distance: int = 2
    max_answer_moves: int = 64
    random_max_moves: int = 6
    solver_max_states: int = 200_000

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("rows", "cols"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 4:
                raise ValueError(f"`{name}` must be an integer >= 4 (border walls included), got {value!r}")
        for name in ("num_boxes", "reverse_steps", "min_box_distance", "max_answer_moves",
                     "random_max_moves", "solver_max_states"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")
        if self.num_boxes + 1 > (self.rows - 2) * (self.cols - 2):
            raise ValueError(f"`num_boxes` {self.num_boxes} does not fit in a {self.rows} x {self.cols} room")


class SokobanEnv(GameEnv[SokobanState]):
    """Sokoban. Success: every box on a goal. Failure (episode ends): a corner deadlock."""

    name: ClassVar[str] = "sokoban"
    config_class: ClassVar[type[GameConfig]] = SokobanConfig
    spec: ClassVar[GameSpec] = SPEC
    config: SokobanConfig

    def initial_state(self, seed: int) -> SokobanState:
        cfg = self.config
        level = generate_level(
            seed, cfg.rows, cfg.cols, cfg.num_boxes,
            reverse_steps=cfg.reverse_steps, min_box_distance=cfg.min_box_distance,
        )
        return SokobanState(seed=seed, level=level, player=level.start_player, boxes=level.start_boxes)

    def task_reward_of(self, state: SokobanState) -> float:
        return rewards.task_reward(state)

    def is_success(self, state: SokobanState) -> bool:
        return is_solved(state.level, state.boxes)

    def is_failed(self, state: SokobanState) -> bool:
        return is_corner_deadlocked(state.level, state.boxes)

    def answer_spec(self) -> parsers.MoveSpec:
        return parsers.MoveSpec(self.config.max_answer_moves)

    def apply_answer(self, state: SokobanState, answer: tuple[str, ...]) -> tuple[SokobanState, Outcome]:
        result = apply_moves(state.level, state.player, state.boxes, answer)
        new_state = dataclasses.replace(
            state,
            player=result.player,
            boxes=result.boxes,
            moves_made=state.moves_made + result.applied,
            pushes=state.pushes + result.pushes,
            invalid_moves=state.invalid_moves + result.invalid,
        )
        on_goal = len(result.boxes & state.level.goals)
        report = (
            f"{result.pushes} push(es), {result.invalid} blocked move(s), "
            f"{on_goal} of {len(state.level.goals)} boxes on goals"
        )
        if result.solved:
            report += "; solved"
        elif result.deadlocked:
            report += "; deadlock (a box is stuck in a corner)"
        return new_state, Outcome(invalid=result.invalid, report=report)

    def render(self, state: SokobanState) -> str:
        return prompts.render(state)

    def oracle_answer(self, state: SokobanState) -> tuple[str, ...]:
        moves = solve(state.level, state.player, state.boxes, self.config.solver_max_states)
        if not moves:
            raise ValueError(f"sokoban seed {state.seed}: no solution found from the current position")
        return moves

    def random_answer(self, state: SokobanState, rng: random.Random) -> tuple[str, ...]:
        return tuple(rng.choice(MOVES) for _ in range(rng.randint(1, self.config.random_max_moves)))
