"""The multi-agent, multi-turn rollout engine: decision points, batching, tree and independent sampling.

All episodes advance in lock-step through *decision points*, one per ``(turn, position in turn_order)``.
At each one the engine

1. builds every pending prompt (all problems, all tree copies or trajectories) from its own agent copy;
2. sends them through the :class:`~pettingllms.execution.router.Router`: one ``generate`` call per policy,
   one request per problem in tree mode (``n = K``: the K copies share the prompt) and one per trajectory
   in independent mode;
3. parses each completion with its own agent copy and steps every environment copy concurrently
   (``asyncio.gather``; tool code runs through ``env_worker``);
4. records a :class:`~pettingllms.execution.samples.Sample` per completion and, in tree mode, selects the
   branch to continue per problem from that group's own rewards (:mod:`pettingllms.execution.tree`);
   with ``credit_depth > 0`` each candidate is first continued a few steps on a copy and trained on its
   return over them (:mod:`pettingllms.execution.continuation`, batched the same way).

Seeds: the request of problem ``p`` at ``(turn, agent_index)`` of ``step`` has seed
``derive_seed(run_seed, "rollout", step, p, turn, agent_index)`` (independent trajectories append their
index ``k``; evaluation uses the stream ``"eval"``), and candidate ``j`` samples with
``derive_seed(request_seed, j)`` inside the backend, so no result depends on its batch partners.

Failures: an :class:`~pettingllms.agents.failures.InfrastructureError` from a step (a crashed worker, a
step timeout) drops that sample (in independent mode, its whole trajectory, whose return is then
undefined), counts it and logs it; the engine's :class:`~pettingllms.agents.failures.FailureBudget`
stops the run once the rate passes ``max_infra_failure_rate``. Model failures (parse errors, tool errors)
are ordinary samples carrying the environment's failure reward, counted per label in
``RolloutBatch.failures``. Any other exception is a bug and propagates.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from comlrl.rollout.types import Completion, GenerationRequest, SamplingParams
from comlrl.seeding import derive_seed
from comlrl.validation import strict_from_dict
from pettingllms.agents.failures import MODEL_FAILURES, FailureBudget, InfrastructureError
from pettingllms.config.rollout_section import check_credit, check_num_generations, check_transcripts_rate
from pettingllms.envs.base import StepResult
from pettingllms.execution.continuation import continue_candidates
from pettingllms.execution.independent import EvalResult, assign_returns, summarize_eval
from pettingllms.execution.policies import EnvContext
from pettingllms.execution.router import Router
from pettingllms.execution.samples import TRAJECTORY_RETURNS, GroupKey, ProblemOutcome, RolloutBatch, Sample
from pettingllms.execution.state_snapshots import state_snapshot
from pettingllms.execution.transcripts import TranscriptWriter, check_state_max_chars, episode_sampled
from pettingllms.execution.tree import fresh_copies, select_branch, selection_rng

__all__ = ["SAMPLING_MODES", "EngineConfig", "ProgressHook", "RolloutEngine", "check_problem_ids"]

logger = logging.getLogger("pettingllms.execution")

SAMPLING_MODES: tuple[str, ...] = ("tree", "independent")
#: ``on_progress(finished outcomes, total trajectories)`` of :meth:`RolloutEngine.evaluate`.
ProgressHook = Callable[[Sequence[ProblemOutcome], int], None]


@dataclass
class EngineConfig:
    """Settings of the rollout engine (TRL's names where the meaning is the same).

    A trainer's engine config is made from its validated settings
    (:func:`~pettingllms.trainer.at_grpo_setup.engine_config_for`: the ``rollout`` section's
    :class:`~pettingllms.config.rollout_section.RolloutConfig` and the stage's ``ATGRPOConfig``); one built
    directly is checked here, the knobs it shares with the ``rollout`` section by that section's own checks
    (:func:`~pettingllms.config.rollout_section.check_num_generations`, ``check_transcripts_rate``,
    ``check_state_max_chars``).

    > Sampling structure

    - ``num_generations``: K, the tree width (candidates per decision) or trajectories per problem.
    - ``sampling_mode``: ``tree`` (AT-GRPO) or ``independent`` (GRPO baseline; also the fallback for
      environments that cannot be copied).
    - ``greedy_selection``: tree branch selection by best reward (seeded tie-break); False: random branch.
    - ``trajectory_return``: independent mode's return, ``final`` (task reward of the final state) or
      ``sum`` (sum of step rewards).
    - ``credit_depth`` / ``credit_discount``: credit across turns in tree mode: each candidate is continued
      up to ``credit_depth`` further agent steps and its training reward is
      ``r_0 + sum_j credit_discount**j * g_j`` (:mod:`~pettingllms.execution.continuation`); 0: off.

    > Generation

    - ``temperature``, ``top_p``, ``top_k``, ``max_completion_length``, ``stop``.

    > Reproducibility and failures

    - ``seed``: the run seed every request and selection seed derives from.
    - ``max_infra_failure_rate`` / ``min_samples_for_failure_rate``: stop the run once more than this
      fraction of attempted samples was dropped for infrastructure failures (after the minimum count).

    > Transcripts

    - ``transcript_rate``: probability that an episode is written to ``output_dir/rollouts.jsonl``.
    - ``output_dir``: the run's output folder (needed when ``transcript_rate > 0``).
    - ``transcript_state_max_chars``: cut each written state snapshot to this many characters (None:
      whole; :mod:`~pettingllms.execution.state_snapshots`).
    - ``write_transcripts``: False takes the sampled episodes' state snapshots but writes nothing (an
      EnvWorker: the driver selects and writes the records of every worker).
    """

    num_generations: int = field(default=4, metadata={"help": "K: tree width or trajectories per problem"})
    sampling_mode: str = field(default="tree", metadata={"help": "tree | independent"})
    greedy_selection: bool = field(default=True, metadata={"help": "continue the best branch (else random)"})
    trajectory_return: str = field(default="final", metadata={"help": "independent mode: final | sum"})
    credit_depth: int = field(
        default=0, metadata={"help": "tree mode: continuation steps per candidate (0: off)"}
    )
    credit_discount: float = field(default=1.0, metadata={"help": "gamma of the continuation increments"})
    temperature: float = field(default=1.0, metadata={"help": "sampling temperature (0: greedy)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling mass"})
    top_k: int = field(default=0, metadata={"help": "top-k truncation (0: off)"})
    max_completion_length: int = field(default=256, metadata={"help": "max new tokens per completion"})
    stop: tuple[str, ...] = field(default=(), metadata={"help": "stop strings"})
    seed: int = field(default=0, metadata={"help": "run seed"})
    max_infra_failure_rate: float = field(default=0.05, metadata={"help": "max dropped-sample fraction"})
    min_samples_for_failure_rate: int = field(
        default=20, metadata={"help": "samples before the rate applies"}
    )
    transcript_rate: float = field(
        default=0.0, metadata={"help": "fraction of episodes written to rollouts.jsonl"}
    )
    output_dir: str | None = field(default=None, metadata={"help": "run output folder (transcripts)"})
    transcript_state_max_chars: int | None = field(
        default=None, metadata={"help": "characters kept of each transcript state snapshot (None: all)"}
    )
    write_transcripts: bool = field(
        default=True, metadata={"help": "write the transcripts (False: only take the snapshots)"}
    )

    def __post_init__(self) -> None:
        # The generation knobs the ``rollout`` section shares are checked by its checks (RolloutConfig's).
        check_num_generations(self.num_generations)
        if self.sampling_mode not in SAMPLING_MODES:
            raise ValueError(
                f"`sampling_mode` must be one of {list(SAMPLING_MODES)}, got {self.sampling_mode!r}"
            )
        check_credit(self.credit_depth, self.credit_discount, self.sampling_mode)
        if self.trajectory_return not in TRAJECTORY_RETURNS:
            raise ValueError(
                f"`trajectory_return` must be one of {list(TRAJECTORY_RETURNS)}, "
                f"got {self.trajectory_return!r}"
            )
        if not 0.0 <= self.max_infra_failure_rate <= 1.0:
            raise ValueError(f"`max_infra_failure_rate` must be in [0, 1], got {self.max_infra_failure_rate}")
        if self.min_samples_for_failure_rate < 1:
            raise ValueError(
                f"`min_samples_for_failure_rate` must be >= 1, got {self.min_samples_for_failure_rate}"
            )
        check_transcripts_rate(self.transcript_rate, "transcript_rate")
        check_state_max_chars(self.transcript_state_max_chars)
        if self.transcript_rate > 0 and self.write_transcripts and not self.output_dir:
            raise ValueError("`output_dir` must be set when `transcript_rate` > 0 (transcripts go there)")
        self.stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)
        self.sampling_params()  # validates temperature, top_p, top_k, max_completion_length

    def sampling_params(self, n: int | None = None, temperature: float | None = None) -> SamplingParams:
        return SamplingParams(
            n=n or self.num_generations,
            temperature=self.temperature if temperature is None else temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=self.max_completion_length,
            stop=self.stop,
        )

    # From a mapping (a YAML section); an unknown key is an error naming it.
    from_dict = classmethod(strict_from_dict)


@dataclass
class _Slot:
    """One request of a decision point: m environment copies sharing one prompt (tree: m = K;
    independent: m = 1), each with its own agent copy."""

    problem_id: int
    envs: list[Any]
    agents: list[Any]
    seed: int


@dataclass
class _Episode:
    """A tree problem (its selected state) or an independent trajectory, as it advances."""

    problem_id: int
    env_index: int
    trajectory: int
    env: Any
    agents: list[Any] | None = None  # independent: one agent copy per turn_order slot
    samples: list[Sample] = field(default_factory=list)
    alive: bool = True


class RolloutEngine:
    """Turns an environment, its agents and a router into training samples.

    ``env_factory()`` returns a fresh (not yet reset) environment; ``agents[i]`` is the template agent of
    ``turn_order[i]`` (deep-copied per environment copy, never stepped itself). ``env_worker`` (e.g. a
    :class:`~pettingllms.sandbox.SandboxPool`) runs tool code. ``on_transcripts(records)`` receives each
    rollout's transcript records (TRL's ``log_completions`` hook); they are also on the batch.
    """

    def __init__(
        self,
        env_factory: Callable[[], Any],
        agents: Sequence[Any],
        router: Router,
        config: EngineConfig | None = None,
        env_worker: Any = None,
        on_transcripts: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None:
        if not callable(env_factory):
            raise TypeError(f"`env_factory` must be callable, got {type(env_factory).__name__}")
        if not agents:
            raise ValueError("`agents` must hold one template agent per turn_order entry")
        self.env_factory = env_factory
        self.agents = list(agents)
        self.router = router
        self.config = config or EngineConfig()
        self.env_worker = env_worker
        self.on_transcripts = on_transcripts
        for agent in self.agents:
            router.policy_for(agent.role)
        self.budget = FailureBudget(
            self.config.max_infra_failure_rate, self.config.min_samples_for_failure_rate
        )
        self.transcripts = (
            TranscriptWriter(
                self.config.output_dir,
                self.config.transcript_rate,
                self.config.seed,
                self.config.transcript_state_max_chars,
            )
            if self.config.transcript_rate > 0 and self.config.write_transcripts
            else None
        )
        self.generate_calls = 0

    @classmethod
    def from_registry(
        cls,
        env_name: str,
        env_config: Any,
        router: Router,
        config: EngineConfig | None = None,
        agent_options: Mapping[str, Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> RolloutEngine:
        """Engine over a registered environment; agents for its ``turn_order`` from the registry."""
        from pettingllms.registry import make_agents, make_env

        probe = make_env(env_name, env_config)
        agents = make_agents(env_name, probe.config.turn_order, agent_options)
        return cls(lambda: make_env(env_name, probe.config), agents, router, config, **kwargs)

    # ---- public API -----------------------------------------------------------------------------
    def rollout(self, problem_ids: Sequence[int], step: int = 0) -> RolloutBatch:
        """Synchronous :meth:`arollout` (not from inside a running event loop)."""
        _require_no_loop("rollout", "arollout")
        return asyncio.run(self.arollout(problem_ids, step))

    async def arollout(self, problem_ids: Sequence[int], step: int = 0) -> RolloutBatch:
        """Roll out ``problem_ids`` (instance seeds) for training step ``step`` in ``sampling_mode``."""
        ids = check_problem_ids(problem_ids)
        mode = self.config.sampling_mode
        notices: list[str] = []
        if mode == "tree":
            probe = self.env_factory()
            if not probe.copyable:
                notice = (
                    f"environment {getattr(probe, 'name', type(probe).__name__)!r} cannot be copied; "
                    "tree sampling falls back to independent sampling"
                    + (" (without credit across turns: `credit_depth` continues tree candidates)"
                       if self.config.credit_depth else "")
                )
                logger.warning(notice)
                notices.append(notice)
                mode = "independent"
            await probe.close()
        params = self.config.sampling_params()
        batch = RolloutBatch(step=step, mode=mode, samples=[], outcomes=[], notices=notices)
        start = time.perf_counter()
        snapshots = _snapshot_filter(self.config.seed, step, self.config.transcript_rate)
        if mode == "tree":
            await self._tree(ids, step, params, batch, snapshots)
        else:
            await self._independent(ids, step, params, batch, stream="rollout", snapshots=snapshots)
        batch.timings["total_s"] = time.perf_counter() - start
        if self.transcripts is not None:
            batch.transcripts = self.transcripts.select(batch.samples, step)
            self.transcripts.write(batch.transcripts)
        if self.on_transcripts is not None and batch.transcripts:
            self.on_transcripts(batch.transcripts)
        return batch

    def evaluate(
        self,
        problem_ids: Sequence[int],
        num_samples: int = 1,
        temperature: float = 0.0,
        step: int = 0,
        on_progress: ProgressHook | None = None,
        *,
        transcripts: TranscriptWriter | None = None,
    ) -> EvalResult:
        """Synchronous :meth:`aevaluate`."""
        _require_no_loop("evaluate", "aevaluate")
        return asyncio.run(
            self.aevaluate(problem_ids, num_samples, temperature, step, on_progress, transcripts=transcripts)
        )

    async def aevaluate(
        self,
        problem_ids: Sequence[int],
        num_samples: int = 1,
        temperature: float = 0.0,
        step: int = 0,
        on_progress: ProgressHook | None = None,
        *,
        transcripts: TranscriptWriter | None = None,
    ) -> EvalResult:
        """Success rate over ``num_samples`` independent trajectories per problem at ``temperature``
        (0: greedy). Seeds come from the ``"eval"`` stream. No transcripts are written (the engine's own
        writer is the training rollouts'), unless a ``transcripts`` writer is given: the episodes it samples
        (at its rate and seed, every trajectory of a sampled problem) keep their state snapshots, and their
        records replace the writer's file in one write (:meth:`TranscriptWriter.replace`).

        ``on_progress(finished, total)`` is called after every decision point with the outcomes of the
        trajectories finished so far (dropped ones included) and the number of trajectories; it only
        observes (a progress bar), so results do not depend on it."""
        if transcripts is None:
            batch = await self.aevaluate_batch(problem_ids, num_samples, temperature, step, on_progress)
        else:
            batch = await self.aevaluate_batch(
                problem_ids, num_samples, temperature, step, on_progress, transcripts=transcripts
            )
            batch.transcripts = transcripts.select(batch.samples, step)
            transcripts.replace(batch.transcripts)
        return summarize_eval(batch.outcomes, float(temperature), batch.samples)

    async def aevaluate_batch(
        self,
        problem_ids: Sequence[int],
        num_samples: int = 1,
        temperature: float = 0.0,
        step: int = 0,
        on_progress: ProgressHook | None = None,
        *,
        transcripts: TranscriptWriter | None = None,
    ) -> RolloutBatch:
        """The trajectories of :meth:`aevaluate` as a batch (its outcomes and samples), before the summary:
        what EnvWorkers return, so the driver summarises the trajectories of every shard at once. With a
        ``transcripts`` writer, the episodes it samples keep their state snapshots (nothing is written)."""
        ids = check_problem_ids(problem_ids)
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"`num_samples` must be an integer >= 1, got {num_samples!r}")
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
            raise ValueError(f"`temperature` must be a finite number >= 0, got {temperature!r}")
        params = self.config.sampling_params(n=1, temperature=float(temperature))
        batch = RolloutBatch(step=step, mode="independent", samples=[], outcomes=[])
        # batch.outcomes grows in place: the hook sees every trajectory finished so far.
        total = len(ids) * num_samples
        report = None if on_progress is None else functools.partial(on_progress, batch.outcomes, total)
        snapshots = None if transcripts is None else _snapshot_filter(transcripts.seed, step, transcripts.rate)
        await self._independent(
            ids, step, params, batch, stream="eval", k=num_samples, after_decision=report, snapshots=snapshots
        )
        return batch

    def state_dict(self) -> dict[str, Any]:
        """Counters that a checkpoint keeps (the failure budget and the call count)."""
        return {
            "attempted": self.budget.attempted,
            "infra_failed": self.budget.infra_failed,
            "model_failures": dict(self.budget.model_failures),
            "generate_calls": self.generate_calls,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.budget.attempted = int(state["attempted"])
        self.budget.infra_failed = int(state["infra_failed"])
        self.budget.model_failures = dict(state["model_failures"])
        self.generate_calls = int(state["generate_calls"])

    # ---- one decision point ---------------------------------------------------------------------
    async def _decide(
        self,
        slots: list[_Slot],
        turn: int,
        agent_index: int,
        params: SamplingParams,
        batch: RolloutBatch,
        continuation: int | None = None,
    ) -> list[list[tuple[Completion, StepResult | InfrastructureError]]]:
        """Prompt, generate (one call per policy), parse and step every copy of every slot concurrently.
        ``continuation``: the depth of a credit continuation step (recorded with its calls)."""
        role = self.agents[agent_index].role
        policy = self.router.policy_for(role)
        wants_context = getattr(self.router.backend_for(policy), "wants_env_context", False)
        requests = []
        for slot in slots:
            prompts = [agent.update_from_env(turn, env) for agent, env in zip(slot.agents, slot.envs)]
            if any(p != prompts[0] for p in prompts[1:]):
                raise RuntimeError(
                    f"copies of problem {slot.problem_id} (turn {turn}, agent {agent_index} {role!r}) built "
                    "different prompts from identical states: the prompt builder is not deterministic"
                )
            metadata: dict[str, Any] = {
                "problem_id": slot.problem_id,
                "turn": turn,
                "agent_index": agent_index,
                "role": role,
            }
            if wants_context:
                metadata["env_context"] = EnvContext(slot.agents[0], slot.envs[0])
            requests.append(
                GenerationRequest(
                    prompt=prompts[0],
                    policy=policy,
                    seed=slot.seed,
                    params=params.with_(n=len(slot.envs)),
                    metadata=metadata,
                )
            )
        start = time.perf_counter()
        completions, made = self.router.generate(requests)
        batch.timings["generate_s"] = batch.timings.get("generate_s", 0.0) + time.perf_counter() - start
        calls = sum(made.values())
        batch.generate_calls += calls
        self.generate_calls += calls
        point: dict[str, Any] = {"turn": turn, "agent_index": agent_index, "role": role, "requests": len(requests), "calls": made}
        if continuation is not None:
            point["continuation"] = continuation
        batch.calls_per_decision_point.append(point)

        steps = []
        for slot, group in zip(slots, completions):
            for agent, env, completion in zip(slot.agents, slot.envs, group):
                agent.update_from_model(completion.text)
                steps.append(env.step_agent(agent, self.env_worker))
        start = time.perf_counter()
        results = await asyncio.gather(*steps, return_exceptions=True)
        batch.timings["env_s"] = batch.timings.get("env_s", 0.0) + time.perf_counter() - start
        for result in results:  # a bug (anything but an infrastructure failure) stops the run
            if isinstance(result, BaseException) and not isinstance(result, InfrastructureError):
                raise result
        out, position = [], 0
        for group in completions:
            out.append(list(zip(group, results[position : position + len(group)])))
            position += len(group)
        return out

    async def _decide_single(
        self,
        items: list[tuple[int, Any, Any, int]],
        turn: int,
        agent_index: int,
        params: SamplingParams,
        batch: RolloutBatch,
        continuation: int,
    ) -> list[tuple[Completion, StepResult | InfrastructureError]]:
        """One completion per ``(problem_id, env, agent, seed)``: a credit continuation step
        (:mod:`~pettingllms.execution.continuation`)."""
        slots = [_Slot(pid, [env], [agent], seed) for pid, env, agent, seed in items]
        return [group[0] for group in await self._decide(slots, turn, agent_index, params, batch, continuation)]

    def _record(self, result: StepResult | InfrastructureError, batch: RolloutBatch, where: str) -> bool:
        """Count one attempted sample; True when it was dropped (logged). May stop the run."""
        dropped = isinstance(result, InfrastructureError)
        if dropped:
            logger.warning("dropped sample (%s): infrastructure failure: %s", where, result)
            batch.dropped_samples += 1
            batch.failures["infrastructure"] = batch.failures.get("infrastructure", 0) + 1
        elif result.failure is not None:
            batch.failures[result.failure] = batch.failures.get(result.failure, 0) + 1
        label = None if dropped or result.failure not in MODEL_FAILURES else result.failure
        self.budget.record(infra_failed=dropped, model_failure=label)
        return dropped

    def _sample(
        self,
        episode: _Episode,
        agent: Any,
        completion: Completion,
        result: StepResult,
        *,
        turn: int,
        agent_index: int,
        candidate: int,
        env_index: int,
        key: GroupKey,
        mode: str,
        state: dict[str, Any] | None = None,
    ) -> Sample:
        return Sample(
            problem_id=episode.problem_id,
            env_index=env_index,
            turn=turn,
            agent_index=agent_index,
            role=agent.role,
            candidate=candidate,
            policy=completion.policy,
            policy_version=int(completion.policy_version),
            seed=completion.seed,
            prompt=agent.prompt,
            response=completion.text,
            prompt_ids=list(completion.prompt_token_ids),
            completion_ids=list(completion.token_ids),
            logprobs=list(completion.logprobs),
            finish_reason=completion.finish_reason,
            action=agent.action,
            parse_error=result.parse_error,
            failure=result.failure,
            feedback=result.feedback,
            local_reward=result.local_reward,
            global_reward=result.global_reward,
            alpha=result.alpha,
            reward=result.reward,
            done=result.done,
            success=result.success,
            group_key=key,
            mode=mode,
            selected=mode == "independent",
            group_reward=result.reward,
            state=state,
        )

    # ---- tree sampling --------------------------------------------------------------------------
    async def _tree(
        self,
        ids: list[int],
        step: int,
        params: SamplingParams,
        batch: RolloutBatch,
        snapshots: Callable[[int], bool] | None = None,
    ) -> None:
        k = self.config.num_generations
        episodes = [_Episode(pid, index, 0, self.env_factory()) for index, pid in enumerate(ids)]
        created = [episode.env for episode in episodes]  # copies hold no outside resource; these are closed
        try:
            for episode in episodes:
                await episode.env.reset(episode.problem_id)
            self._check_turn_order(episodes[0].env)
            max_turns = episodes[0].env.config.max_turns
            for turn in range(max_turns):
                for agent_index in range(len(self.agents)):
                    active = [e for e in episodes if e.alive]
                    if not active:
                        break
                    slots = []
                    for episode in active:
                        _check_position(episode, turn, agent_index)
                        envs, agents = fresh_copies(episode.env, self.agents[agent_index], k)
                        seed = derive_seed(
                            self.config.seed, "rollout", step, episode.problem_id, turn, agent_index
                        )
                        slots.append(_Slot(episode.problem_id, envs, agents, seed))
                    decided = await self._decide(slots, turn, agent_index, params, batch)
                    returns: Sequence[list[float | None] | None] = [None] * len(slots)
                    if self.config.credit_depth:  # credit across turns (off: nothing of it runs)
                        returns = await continue_candidates(
                            self._decide_single, self.agents, self.config, slots, decided,
                            step=step, turn=turn, agent_index=agent_index, params=params, batch=batch,
                        )
                    for episode, slot, group, credit in zip(active, slots, decided, returns):
                        self._tree_select(episode, slot, group, turn, agent_index, step, batch, snapshots, credit)
            for episode in episodes:
                if episode.alive:  # the turn budget ends every episode; this guards a misconfigured env
                    raise RuntimeError(
                        f"problem {episode.problem_id} is not done after max_turns={max_turns}"
                    )
        finally:
            for env in created:
                await env.close()

    def _tree_select(
        self,
        episode: _Episode,
        slot: _Slot,
        group: list,
        turn: int,
        agent_index: int,
        step: int,
        batch: RolloutBatch,
        snapshots: Callable[[int], bool] | None = None,
        credit: list[float | None] | None = None,
    ) -> None:
        key = GroupKey(episode.problem_id, turn, agent_index)
        snapshot = snapshots is not None and snapshots(episode.problem_id)
        rewards: list[float | None] = []
        members: list[Sample | None] = []
        for candidate, (completion, result) in enumerate(group):
            where = f"problem {episode.problem_id}, turn {turn}, agent {agent_index}, candidate {candidate}"
            if self._record(result, batch, where):
                rewards.append(None)
                members.append(None)
                continue
            sample = self._sample(
                episode,
                slot.agents[candidate],
                completion,
                result,
                turn=turn,
                agent_index=agent_index,
                candidate=candidate,
                env_index=episode.env_index,
                key=key,
                mode="tree",
                state=state_snapshot(slot.envs[candidate]) if snapshot else None,
            )
            if credit is not None:  # the return over the continuation (None only for a dropped candidate);
                sample.group_reward = credit[candidate]  # type: ignore[assignment]  # selection stays on `reward`
            rewards.append(sample.reward)
            members.append(sample)
        kept = [s for s in members if s is not None]
        batch.samples.extend(kept)
        if not kept:
            logger.warning(
                "problem %s abandoned at turn %s agent %s: every candidate was dropped",
                episode.problem_id,
                turn,
                agent_index,
            )
            episode.alive = False
            batch.outcomes.append(_outcome(episode, dropped=True))
            return
        chosen = select_branch(
            rewards,
            self.config.greedy_selection,
            selection_rng(self.config.seed, step, episode.problem_id, turn, agent_index),
        )
        members[chosen].selected = True  # type: ignore[union-attr]
        episode.env = slot.envs[chosen]
        if episode.env.done:
            episode.alive = False
            batch.outcomes.append(_outcome(episode))

    # ---- independent sampling -------------------------------------------------------------------
    async def _independent(
        self,
        ids: list[int],
        step: int,
        params: SamplingParams,
        batch: RolloutBatch,
        stream: str,
        k: int | None = None,
        after_decision: Callable[[], None] | None = None,
        snapshots: Callable[[int], bool] | None = None,
    ) -> None:
        import copy

        k = k or self.config.num_generations
        episodes = []
        for index, pid in enumerate(ids):
            for trajectory in range(k):
                agents = [copy.deepcopy(agent) for agent in self.agents]
                episodes.append(_Episode(pid, index * k + trajectory, trajectory, self.env_factory(), agents))
        try:
            for episode in episodes:
                await episode.env.reset(episode.problem_id)
            self._check_turn_order(episodes[0].env)
            max_turns = episodes[0].env.config.max_turns
            for turn in range(max_turns):
                for agent_index in range(len(self.agents)):
                    active = [e for e in episodes if e.alive]
                    if not active:
                        break
                    slots = []
                    for episode in active:
                        _check_position(episode, turn, agent_index)
                        seed = derive_seed(
                            self.config.seed,
                            stream,
                            step,
                            episode.problem_id,
                            turn,
                            agent_index,
                            episode.trajectory,
                        )
                        slots.append(
                            _Slot(episode.problem_id, [episode.env], [episode.agents[agent_index]], seed)
                        )
                    decided = await self._decide(slots, turn, agent_index, params, batch)
                    for episode, slot, [(completion, result)] in zip(active, slots, decided):
                        where = (
                            f"problem {episode.problem_id}, trajectory {episode.trajectory}, turn {turn}, "
                            f"agent {agent_index}"
                        )
                        if self._record(result, batch, where):
                            # The trajectory's return is undefined without this step: drop all of it.
                            batch.dropped_samples += len(episode.samples)
                            episode.samples = []
                            episode.alive = False
                            batch.outcomes.append(_outcome(episode, dropped=True))
                            continue
                        key = GroupKey(episode.problem_id, None, None)
                        episode.samples.append(
                            self._sample(
                                episode,
                                slot.agents[0],
                                completion,
                                result,
                                turn=turn,
                                agent_index=agent_index,
                                candidate=episode.trajectory,
                                env_index=episode.env_index,
                                key=key,
                                mode="independent",
                                state=(
                                    state_snapshot(episode.env)
                                    if snapshots is not None and snapshots(episode.problem_id)
                                    else None
                                ),
                            )
                        )
                        if episode.env.done:
                            episode.alive = False
                            assign_returns(
                                episode.samples, result.global_reward, self.config.trajectory_return
                            )
                            batch.samples.extend(episode.samples)
                            batch.outcomes.append(_outcome(episode))
                    if after_decision is not None:
                        after_decision()
            for episode in episodes:
                if episode.alive:
                    raise RuntimeError(
                        f"problem {episode.problem_id} is not done after max_turns={max_turns}"
                    )
        finally:
            for episode in episodes:
                await episode.env.close()

    def _check_turn_order(self, env: Any) -> None:
        order = list(env.config.turn_order)
        roles = [agent.role for agent in self.agents]
        if roles != order:
            raise ValueError(f"agents' roles {roles} must match the environment's turn_order {order}")


def _snapshot_filter(seed: int, step: int, rate: float) -> Callable[[int], bool] | None:
    """Whether a problem's episode at ``step`` is transcribed (so its samples keep state snapshots);
    None when no episode is (``rate`` 0)."""
    if rate <= 0:
        return None
    return functools.cache(lambda problem_id: episode_sampled(seed, step, problem_id, rate))


def _outcome(episode: _Episode, dropped: bool = False) -> ProblemOutcome:
    env = episode.env
    return ProblemOutcome(
        problem_id=episode.problem_id,
        trajectory=episode.trajectory,
        success=bool(env.success) and not dropped,
        done=bool(env.done),
        turns=int(env.state.turn),
        task_reward=float(env.task_reward),
        dropped=dropped,
    )


def _check_position(episode: _Episode, turn: int, agent_index: int) -> None:
    state = episode.env.state
    if (state.turn, state.position) != (turn, agent_index):
        raise RuntimeError(
            f"problem {episode.problem_id}: environment is at turn {state.turn} position {state.position}, "
            f"the engine at turn {turn} position {agent_index}"
        )


def check_problem_ids(problem_ids: Sequence[int]) -> list[int]:
    ids = list(problem_ids)
    if not ids:
        raise ValueError("`problem_ids` must name at least one problem")
    for pid in ids:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid < 0:
            raise ValueError(f"`problem_ids` must be integers >= 0, got {pid!r}")
    repeated = sorted(p for p, c in Counter(ids).items() if c > 1)
    if repeated:
        raise ValueError(f"`problem_ids` must be distinct (they key the groups), repeated: {repeated}")
    return ids


def _require_no_loop(name: str, async_name: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"RolloutEngine.{name} was called inside a running event loop; await {async_name}()")
