"""Centralized MAGRPO: one actor model writes every role's response in one joint completion and is trained
with MAGRPO on the task reward (the public CoMLRL ``CentralizedMAGRPOConfig`` /
``CentralizedMAGRPOTrainer``).

The actor's prompt is ``centralized_adapter.build_prompt(item, [role formatter(item) for each role])``;
each of its ``num_generations`` joint completions is split into role responses with
``centralized_adapter.parse_completion`` before the task reward scores them (a completion the adapter cannot
split gives every role ``""``, as in the public library, and is counted in
``trainer.collaboration.parse_failures``). The group baseline is MAGRPO's over the item's joint completions,
and the policy-gradient loss covers every token of each joint completion (earlier roles are the context of
later ones). This is the base trainer's centralized collaboration
(:class:`~comlrl.trainers.core.centralized.CentralizedCollaboration`, shared with the preference trainers'
``collaboration_mode="centralized"``). ``num_agents`` counts roles; the trainer holds one actor. Single turn,
as in the public library.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from comlrl.trainers.core.centralized import CentralizedCollaboration
from comlrl.trainers.core.config import GENERATION_MODE_ALIASES, TrainerConfig
from comlrl.trainers.reinforce.config import MAGRPOConfig
from comlrl.trainers.reinforce.magrpo import MAGRPOTrainer
from comlrl.validation import check_int, help_field, override_field

__all__ = ["CentralizedMAGRPOConfig", "CentralizedMAGRPOTrainer"]

_CENTRALIZED_ALIASES = sorted(a for a, target in GENERATION_MODE_ALIASES.items() if target == "centralized")


@dataclass
class CentralizedMAGRPOConfig(MAGRPOConfig):
    r"""
    Configuration class for [`CentralizedMAGRPOTrainer`]: every [`MAGRPOConfig`] parameter (`num_agents`
    counts the roles the one actor writes; device lists hold one entry), with `num_turns=1` (the only value)
    and `output_dir="outputs/centralized_magrpo"`, plus:

    Parameters:
        collaboration_mode (`str`, *optional*, defaults to `"centralized"`):
            Must be `"centralized"` (aliases: `centralised`, `single_agent`, `single-agent`).
    """

    num_turns: int = override_field(MAGRPOConfig, "num_turns", 1, "(centralized MAGRPO: 1, the only value)")
    collaboration_mode: str = help_field(
        "Must be 'centralized': one actor model writes every role.", "centralized"
    )
    output_dir: str = override_field(
        TrainerConfig,
        "output_dir",
        "outputs/centralized_magrpo",
        "(centralized MAGRPO: outputs/centralized_magrpo)",
    )

    def _normalize_choices(self) -> None:
        key = self.collaboration_mode.strip().lower() if isinstance(self.collaboration_mode, str) else None
        if GENERATION_MODE_ALIASES.get(key, key) != "centralized":
            raise ValueError(
                "CentralizedMAGRPOConfig requires centralized collaboration. `collaboration_mode` must be "
                f"'centralized' (aliases: {', '.join(_CENTRALIZED_ALIASES)}), got {self.collaboration_mode!r}"
            )
        self.collaboration_mode = "centralized"
        super()._normalize_choices()

    def _validate_episode(self) -> None:
        check_int("num_turns", self.num_turns)
        if self.num_turns != 1:
            raise ValueError(
                f"Centralized MAGRPO currently supports num_turns=1 only. Got `num_turns`={self.num_turns}."
            )
        super()._validate_episode()

    @property
    def is_centralized(self) -> bool:
        """One actor model writes every role (always, for this config)."""
        return True

    @property
    def num_actor_models(self) -> int:
        """The one actor model (device lists hold one entry)."""
        return 1


class CentralizedMAGRPOTrainer(MAGRPOTrainer):
    """MAGRPO of one actor that writes every role (see the module docstring).

    Keywords as in the public library: ``centralized_adapter`` (required, keyword-only: an object with
    ``build_prompt(item, role_prompts) -> str`` and ``parse_completion(text, item, num_roles) -> list[str]``,
    e.g. :class:`~comlrl.trainers.core.centralized.TaggedCentralizedComparatorAdapter`), ``num_agents``
    (the role count; must equal ``args.num_agents``), ``agents`` (one model), ``tokenizer`` (one),
    ``reward_func`` (scores the role responses as a decentralized team's), ``formatters`` (one per role, or
    one for all), ``args`` (a :class:`CentralizedMAGRPOConfig`), and every other :class:`MAGRPOTrainer`
    keyword (``agent_model``, ``train_dataset``, ``eval_dataset``, ``reward_processor``, ...).

    >>> trainer = CentralizedMAGRPOTrainer(
    ...     centralized_adapter=TaggedCentralizedComparatorAdapter(), agent_model="test-tiny", num_agents=2,
    ...     reward_func=reward, train_dataset=items, args=CentralizedMAGRPOConfig(num_agents=2))
    >>> trainer.train()
    """

    config_class = CentralizedMAGRPOConfig
    algorithm_name = "CentralizedMAGRPO"

    def __init__(
        self,
        *,
        centralized_adapter: Any,
        num_agents: int = 2,
        agents: Sequence[Any] | None = None,
        tokenizer: Any = None,
        reward_func: Callable[..., Any] | None = None,
        formatters: Any = None,
        args: CentralizedMAGRPOConfig | None = None,
        **kwargs: Any,
    ) -> None:
        args = args if args is not None else self.config_class()
        check_centralized_inputs(centralized_adapter, num_agents, agents, tokenizer, reward_func, args)
        super().__init__(
            agents=agents,
            num_agents=num_agents,
            tokenizer=tokenizer,
            reward_func=reward_func,
            formatters=formatters,
            args=args,
            centralized_comparator_adapter=centralized_adapter,
            **kwargs,
        )

    @property
    def centralized_collaboration(self) -> CentralizedCollaboration:
        """The joint prompt builder and role splitter (the public attribute name; also ``collaboration``)."""
        return self.collaboration


def check_centralized_inputs(
    adapter: Any, num_agents: Any, agents: Any, tokenizer: Any, reward_func: Any, args: Any
) -> None:
    """The public library's checks of a centralized MAGRPO trainer's keywords, in its order, before any
    model is loaded; each message holds the public wording and names our field and value."""
    if getattr(args, "collaboration_mode", None) != "centralized":
        raise ValueError(
            "CentralizedMAGRPOTrainer requires centralized configuration. `args` must be a "
            f"CentralizedMAGRPOConfig, got {type(args).__name__}"
        )
    if getattr(args, "num_turns", 1) != 1:
        raise ValueError(
            f"Centralized MAGRPO currently supports num_turns=1 only. Got `num_turns`={args.num_turns}."
        )
    if num_agents != args.num_agents:
        raise ValueError(
            "num_agents must match args.num_agents (the role count). Got `num_agents`="
            f"{num_agents!r} and `args.num_agents`={args.num_agents!r}."
        )
    if agents is not None and (
        not isinstance(agents, Sequence) or isinstance(agents, str) or len(agents) != 1
    ):
        count = (
            len(agents)
            if isinstance(agents, Sequence) and not isinstance(agents, str)
            else type(agents).__name__
        )
        raise ValueError(
            f"Centralized collaboration requires exactly one actor model. `agents` must hold one model, got {count}."
        )
    if isinstance(tokenizer, (list, tuple)) and len(tokenizer) != 1:
        raise ValueError(
            "Centralized collaboration requires one actor tokenizer. `tokenizer` is a list of "
            f"{len(tokenizer)}."
        )
    if not callable(reward_func):
        raise ValueError(f"reward_func must be callable. Got `reward_func`={type(reward_func).__name__}.")
    for method in ("build_prompt", "parse_completion"):
        if not callable(getattr(adapter, method, None)):
            raise TypeError(
                f"centralized_adapter.{method} must be callable. Got `centralized_adapter`={adapter!r}."
            )
