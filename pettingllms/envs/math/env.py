"""The math environment: a tool agent computes, a reasoner answers, the environment verifies (for the rewards).

Episode. ``dataset: arith`` (the default) generates the problem of each seed (:mod:`pettingllms.envs.math.arith`,
``arith_level``); any other dataset's seeds index one split of its normalised file, as the code workflow's do:
``split`` when the environment is built for evaluation, ``train_split`` when a training stage builds it
(``purpose``), read from ``data_dir/<split>.jsonl`` (default: ``$PETTINGLLMS_DATA/math/<dataset>/``).

Each turn the agents of ``turn_order`` act in order; the seed's workflow: the tool agent
(``tool_generator``) writes a Python program that prints its answer (run in the sandbox) or, with
``tool: calculator``, an arithmetic expression (:mod:`pettingllms.envs.math.calculator`, never ``eval``); the
reasoner (``reasoning_generator``) reads the tool's result and writes its final answer as ``\\boxed{...}``;
the environment verifies both (:mod:`pettingllms.envs.math.verify`). L0 plays the ``single`` role: the reasoner
alone, with the tool of ``single_tool`` (``none``, ``calculator`` or ``python``): a response may call the tool
(its result shows in the next turn's prompt) and/or give the boxed answer.

Shared state (:class:`MathState`): the problem, every tool run (source, output or error, the answer it
printed, whether that verifies), every answer of the reasoner and whether it verifies, and whether the
latest answers of the two agree.

What the agents see (ARCHITECTURE principle 10: nothing computed from the ground truth reaches an agent
during an episode). The environment verifies every answer against the reference, but only for the rewards,
the success metric and the episode viewer: the prompts (:mod:`pettingllms.envs.math.prompts`) show the
problem, the team's tool runs and answers, never whether one is right, and ``last_report`` holds no
verdict either. A team that guesses and keeps what a prompt calls correct would otherwise succeed without
solving anything. The team decides for itself when it is done: it agrees.

Rewards (:mod:`pettingllms.envs.math.rewards`): global = the latest final answer verifies (success); tool
local = +1 verified, 0 wrong, -0.5 failed (raised, timed out, printed nothing), -1 unparseable; reasoner
local = +1 verifies, 0 wrong, -1 no parseable answer, plus ``judgement_reward`` when it turned down a wrong tool
result and its own answer verifies (off by default); a single agent's turn that only calls the tool scores
the tool's local reward.

When the episode ends (:attr:`MathEnv.done`) depends on what the agents did, never on a verdict: when the
tool's and the reasoner's latest answers agree with each other (the anchor's rule; whether they are right
plays no part, so a team that agrees on a wrong answer stops too), for a workflow without a tool agent when
an answer is given, or on the turn budget. Success is read from the state afterwards.

Checks (:mod:`pettingllms.envs.math.verify`) run in a pool of worker processes, each with its own deadline
(``verify_timeout_s``): a check past it counts as a no, is counted in ``MathState.verify_timeouts`` and
labels its step ``verify_timeout`` (logged by the verifier, counted per label by the engine).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pettingllms.envs.base import BaseEnv, EnvConfig, EnvState
from pettingllms.envs.math import rewards
from pettingllms.envs.math.arith import ARITH_LEVELS, generate
from pettingllms.envs.math.data import DATASETS, MathDataError, MathProblem, normalised_path, read_jsonl
from pettingllms.envs.records import QuestionInstances, played_split

__all__ = [
    "ARITH",
    "SINGLE_TOOLS",
    "TOOLS",
    "MathConfig",
    "MathEnv",
    "MathState",
    "ToolRun",
    "load_split",
    "played_split",
    "split_path",
]

#: The generated task's dataset name.
ARITH = "arith"
TOOLS: tuple[str, ...] = ("python", "calculator")
SINGLE_TOOLS: tuple[str, ...] = ("none", *TOOLS)
TOOL_ROLE, REASONER_ROLE, SINGLE_ROLE = "tool_generator", "reasoning_generator", "single"


@dataclass(frozen=True)
class MathConfig(EnvConfig):
    """Math settings (see :class:`~pettingllms.envs.base.EnvConfig` for the shared ones).

    > Problems

    - ``dataset``: ``arith`` (generated, :mod:`~pettingllms.envs.math.arith`) or one of ``gsm8k``, ``math``,
      ``math500``, ``aime24``, ``aime25``, ``aime_past``, ``olympiadbench``, ``polaris``, ``dapo``.
    - ``arith_level``: difficulty of the generated problems (1, 2 or 3: more and larger operations).
    - ``arith_named``: label the generated problems' numbers with letters (``a = 6402``) that the tools know,
      so a model need not copy digits into its expression (the small preset cannot).
    - ``split``: the split evaluation plays (a dataset's seeds index its problems).
    - ``train_split``: the split the training stages play (``null``: the dataset has none to train on).
    - ``data_dir``: the folder holding ``<split>.jsonl`` normalised files (``pettingllms dataprocess math``
      writes them); ``null``: ``$PETTINGLLMS_DATA/math/<dataset>``.
    - ``level``: keep only problems with this level label (``null``: all).

    > Tools

    - ``tool``: the tool agent's tool: ``python`` (a program run in the sandbox that prints its answer) or
      ``calculator`` (an arithmetic expression).
    - ``single_tool``: the ``single`` agent's tool: ``none``, ``calculator`` or ``python``.
    - ``accept_tool_answer``: the reasoner (and the single agent) may answer ``\\boxed{tool}`` to take the
      latest tool answer as its own, as Plan-Path's plan agent plays a tool proposal with ``#### proposal``
      (for models that cannot copy an 8-digit number from their prompt, like the small preset).
    - ``time_limit_s``: wall seconds of one tool program.
    - ``verify_timeout_s``: seconds one answer check may take, its own deadline in the verifier's worker pool
      (past it the check counts as a no, the answer as wrong, and it is counted as ``verify_timeout``).

    > Rewards

    - ``judgement_reward``: added to the reasoner's local reward when it turns down a wrong tool result (its
      answer does not agree with the tool's) and its own answer verifies
      (:func:`~pettingllms.envs.math.rewards.reasoner_judgement_reward`); ``0`` (the default): off, every reward
      as without it. The reasoner role only: the single agent is never paid it (it makes the tool result it
      would reject). Computed after the step, for the reward alone: no prompt shows it.
    """

    eval_fields: ClassVar[tuple[str, ...]] = ("step_timeout", "dataset", "arith_level", "arith_named", "split", "train_split", "data_dir", "level", "time_limit_s", "verify_timeout_s")
    dataset_fields: ClassVar[tuple[str, ...]] = ("split", "data_dir", "level", "train_split")

    turn_order: tuple[str, ...] = (TOOL_ROLE, REASONER_ROLE)
    max_turns: int = 3
    dataset: str = ARITH
    arith_level: int = 2
    arith_named: bool = False
    split: str = "test"
    train_split: str | None = "train"
    data_dir: str | None = None
    level: str | None = None
    tool: str = "python"
    single_tool: str = "none"
    accept_tool_answer: bool = False
    time_limit_s: float = 5.0
    verify_timeout_s: float = 5.0
    judgement_reward: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset != ARITH and self.dataset not in DATASETS:
            raise ValueError(f"`dataset` must be one of {[ARITH, *DATASETS]}, got {self.dataset!r}")
        if self.arith_level not in ARITH_LEVELS or isinstance(self.arith_level, bool):
            raise ValueError(f"`arith_level` must be one of {list(ARITH_LEVELS)}, got {self.arith_level!r}")
        for name in ("arith_named", "accept_tool_answer"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.split, str) or not self.split:
            raise ValueError(f"`split` must be a non-empty split name, got {self.split!r}")
        if self.train_split is not None and (not isinstance(self.train_split, str) or not self.train_split):
            raise ValueError(f"`train_split` must be a split name or null, got {self.train_split!r}")
        if self.data_dir is not None and (not isinstance(self.data_dir, str) or not self.data_dir):
            raise ValueError(f"`data_dir` must be a folder path or null, got {self.data_dir!r}")
        if self.level is not None and (not isinstance(self.level, str) or not self.level):
            raise ValueError(f"`level` must be a level label or null, got {self.level!r}")
        if self.purpose == "train" and self.dataset != ARITH and self.train_split is None:
            raise ValueError(
                f"`train_split` is null: {self.dataset} has no split to train on here; give one "
                f"(`env.train_split=train`, made by `pettingllms dataprocess math --split train`) or run "
                f"evaluation only"
            )
        if self.tool not in TOOLS:
            raise ValueError(f"`tool` must be one of {list(TOOLS)}, got {self.tool!r}")
        if self.single_tool not in SINGLE_TOOLS:
            raise ValueError(f"`single_tool` must be one of {list(SINGLE_TOOLS)}, got {self.single_tool!r}")
        for name in ("time_limit_s", "verify_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
                raise ValueError(f"`{name}` must be a finite number of seconds > 0, got {value!r}")
        value = self.judgement_reward
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
            raise ValueError(f"`judgement_reward` must be a finite number >= 0, got {value!r}")

    @property
    def generated(self) -> bool:
        """Whether the problems are generated (``arith``) rather than read from a dataset split."""
        return self.dataset == ARITH

    def tool_of(self, role: str) -> str:
        """The tool ``role`` uses: ``tool`` for the tool agent, ``single_tool`` for the single agent, else ``none``."""
        if role == TOOL_ROLE:
            return self.tool
        return self.single_tool if role == SINGLE_ROLE else "none"


@dataclass
class ToolRun:
    """One call of the tool: the program or expression, what it printed (or the calculator's value), the
    error line when it failed, the answer read from it, whether that answer verifies, and the outcome
    (one of :data:`~pettingllms.envs.math.rewards.TOOL_OUTCOMES`)."""

    tool: str
    source: str
    output: str
    error: str
    answer: str | None
    verified: bool
    outcome: str


@dataclass(kw_only=True)
class MathState(EnvState):
    """The blackboard of one math episode.

    - ``problem``: the problem being solved.
    - ``tool_runs``: every tool call that parsed, oldest first (the tool agent's, or the single agent's).
    - ``answers`` / ``answers_verified``: every final answer given, oldest first, and whether each verifies.
    - ``agreed``: the latest tool answer and the latest final answer are equivalent.
    - ``last_report``: what the latest step did, one line, without any verdict.
    - ``verify_timeouts``: answer checks of this episode that ran past ``verify_timeout_s`` (each a no).

    The verdicts (``ToolRun.verified``, ``answers_verified``) are for the rewards, the success metric and the
    viewer; no prompt reads them (see the module docstring).
    """

    problem: MathProblem
    tool_runs: list[ToolRun] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    answers_verified: list[bool] = field(default_factory=list)
    agreed: bool = False
    last_report: str = ""
    verify_timeouts: int = 0

    @property
    def tool_run(self) -> ToolRun | None:
        """The latest tool run, ``None`` before the first."""
        return self.tool_runs[-1] if self.tool_runs else None

    @property
    def tool_answer(self) -> str | None:
        """The answer of the latest tool run (``None``: no run yet, or it printed nothing)."""
        return None if self.tool_run is None else self.tool_run.answer

    @property
    def answer(self) -> str | None:
        """The latest final answer, ``None`` before the first."""
        return self.answers[-1] if self.answers else None

    @property
    def answer_verified(self) -> bool:
        return bool(self.answers_verified) and self.answers_verified[-1]


# ---- problems ----------------------------------------------------------------------------------------


def split_path(config: MathConfig) -> Path:
    """The normalised file of the played split: ``data_dir/<split>.jsonl`` (default folder
    ``$PETTINGLLMS_DATA/math/<dataset>``)."""
    split = played_split(config)
    if config.data_dir is not None:
        return Path(config.data_dir) / f"{split}.jsonl"
    return normalised_path(config.dataset, split)


@functools.lru_cache(maxsize=8)
def _read_split(dataset: str, split: str, path: str, stamp: int, level: str | None) -> tuple[MathProblem, ...]:
    # ``stamp`` (the file's mtime) is part of the cache key only: a rewritten file is read again.
    problems = [p for p in read_jsonl(path) if p.split == split and p.dataset == dataset]
    if level is not None:
        problems = [p for p in problems if (p.level or "").lower() == level.lower()]
    return tuple(problems)


def load_split(config: MathConfig) -> tuple[MathProblem, ...]:
    """The problems the seeds of a dataset ``config`` index (:func:`played_split`), read once per file
    version. A missing file is a :class:`~pettingllms.envs.math.data.MathDataError` naming it and the command
    that writes it."""
    split, path = played_split(config), split_path(config)
    if not path.is_file():
        from pettingllms.envs.sources import missing_split_message

        raise MathDataError(missing_split_message("math", config.dataset, split, path))
    problems = _read_split(config.dataset, split, str(path), os.stat(path).st_mtime_ns, config.level)
    if not problems:
        raise MathDataError(f"{path} holds no {config.dataset} problem of split {split!r}"
                            + (f" with level {config.level!r}" if config.level else ""))
    return problems


# ---- the environment -----------------------------------------------------------------------------------


class MathEnv(QuestionInstances, BaseEnv[MathState]):
    """Math with a tool agent and a reasoner (see the module docstring)."""

    name: ClassVar[str] = "math"
    config_class: ClassVar[type[EnvConfig]] = MathConfig
    roles: ClassVar[tuple[str, ...]] = (TOOL_ROLE, REASONER_ROLE, SINGLE_ROLE)
    scripted_policies = {
        "oracle": "pettingllms.envs.math.scripted:MathOraclePolicy",
        "random": "pettingllms.envs.math.scripted:RandomMathPolicy",
        "wrong": "pettingllms.envs.math.scripted:WrongMathPolicy",
    }
    config: MathConfig

    @classmethod
    def sandbox_needed(cls, config: EnvConfig) -> bool:
        """A sandbox only where a role of the workflow runs Python (``tool`` / ``single_tool`` ``python``)."""
        assert isinstance(config, MathConfig)
        return any(config.tool_of(role) == "python" for role in config.turn_order)

    def problems(self) -> tuple[MathProblem, ...]:
        """The problems a dataset's seeds index (see :func:`load_split`); an error for ``arith``."""
        if self.config.generated:
            raise ValueError("`arith` problems are generated from their seed; they are not a list")
        return load_split(self.config)

    def num_instances(self) -> int | None:
        return None if self.config.generated else len(self.problems())

    def problem(self, seed: int) -> MathProblem:
        """The problem of ``seed``: generated for ``arith``, else the split's ``seed``-th."""
        if self.config.generated:
            return generate(seed, self.config.arith_level, named=self.config.arith_named)
        problems = self.problems()
        if seed >= len(problems):
            raise ValueError(
                f"`seed` {seed} is past the {len(problems)} problems of {self.config.dataset} split "
                f"{played_split(self.config)!r}: seeds index the split, 0 .. {len(problems) - 1}"
            )
        return problems[seed]

    def initial_state(self, seed: int) -> MathState:
        return MathState(seed=seed, problem=self.problem(seed))

    def task_reward_of(self, state: MathState) -> float:
        return rewards.global_reward(state.answer_verified)

    def is_success(self, state: MathState) -> bool:
        return state.answer_verified

    @property
    def done(self) -> bool:
        """Agreement, an answer without a tool agent, or the turn budget: never the verdict (module docstring)."""
        state = self.state
        if state.out_of_turns or state.agreed:
            return True
        # Without a tool agent there is no second answer to agree with: the first answer ends the episode.
        return TOOL_ROLE not in self.config.turn_order and state.answer is not None
