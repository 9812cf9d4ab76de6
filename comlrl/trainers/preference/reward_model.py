"""MARLHF's joint reward model: one scalar for the whole team's response, fit with Bradley–Terry.

**Joint text.** A joint response of n agents is read as one text (agents numbered from 1)::

    Joint multi-agent response

    Agent 1 prompt:
    <prompt 1>

    Agent 1 response:
    <response 1>

    Agent 2 prompt:
    ...

    Agent n response:
    <response n><eos>

Its ids are the concatenation of each piece tokenized on its own (labels, prompts, responses, and the
tokenizer's EOS token at the end when it has one, as TRL's reward trainer appends), so cutting one piece
never shifts the tokens of another. :func:`format_joint_text` gives the same text as a string.

**Truncation** (``max_length``, the config's ``reward_max_length``). The label tokens always stay; the
rest of the budget is shared out per agent: prompts are cut first (the longest first, each keeping its
*tail*, the part nearest the response), and only when the responses alone exceed the budget are the
responses cut, evenly (the longest first, each keeping its *head*), so every agent keeps at least one
response token. A budget too small for that is an error naming ``reward_max_length``. Encoding returns
how many joint texts were cut; callers log it (:func:`truncation_message`).

**Scoring.** The scalar is a ``Linear(hidden, 1)`` head (float32, no bias: the Bradley–Terry loss does
not see a constant shift) on the backbone's last hidden state at each row's final real token, found from
the attention mask (left or right padding alike); position ids come from the mask too, so a padded row
scores as it does alone. Winners and losers of a batch share one padded forward.

**Fitting** minimises ``-mean log sigmoid(r(w) - r(l))`` (:func:`bradley_terry_loss`) with AdamW. Dropout
stays off while fitting (TRL's ``disable_dropout`` default), so the only randomness is the shuffling
(a generator seeded from ``seed``) and the head's initialisation (also from ``seed``).

**Saved folder** (:meth:`JointRewardModel.save`)::

    dir/backbone/            save_pretrained backbone + tokenizer
    dir/head.safetensors     the head's weight
    dir/reward_model.json    format, version, options (max_length, padding and truncation sides, ...)
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from comlrl.atomic_io import atomic_replace_dir, atomic_write_bytes, atomic_write_json
from comlrl.rl import nonfinite_names
from comlrl.seeding import derive_seed
from comlrl.trainers.core.models import hidden_size, last_token_index
from comlrl.trainers.core.nonfinite import SETTING, NonFiniteError
from comlrl.trainers.core.optimization import GradientSteps, accumulated_steps, build_optimizer
from comlrl.trainers.preference.reward_oracle import RewardModelOracle, truncation_message
from comlrl.validation import check_choice, check_int

logger = logging.getLogger(__name__)

__all__ = [
    "JOINT_TEXT_HEADER",
    "JointEncoding",
    "JointRewardModel",
    "RewardModelOracle",
    "bradley_terry_loss",
    "evaluate_reward_model",
    "fair_allocation",
    "fit_reward_model",
    "fit_reward_model_from_config",
    "format_joint_text",
    "joint_budget",
    "last_token_index",
    "pairwise_accuracy",
    "resolve_reward_model_device",
    "resolve_reward_model_source",
    "split_pairs",
    "truncation_message",
]

JOINT_TEXT_HEADER = "Joint multi-agent response\n\n"
AGENT_SEPARATOR = "\n\n"
KEEP_SIDES = ("head", "tail")
FORMAT_NAME = "comlrl.joint_reward_model"
FORMAT_VERSION = 1
CONFIG_FILE = "reward_model.json"
HEAD_FILE = "head.safetensors"
BACKBONE_DIR = "backbone"


def _prompt_label(agent: int) -> str:
    return f"Agent {agent + 1} prompt:\n"


def _response_label(agent: int) -> str:
    return f"\n\nAgent {agent + 1} response:\n"


# --------------------------------------------------------------------------------------------------
# Pure functions: the loss, accuracy, pooling index, truncation budget, data split, sources
# --------------------------------------------------------------------------------------------------


def bradley_terry_loss(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> torch.Tensor:
    """``-mean log sigmoid(r_w - r_l)`` over pairs (logsigmoid: finite for any margin)."""
    if chosen_rewards.shape != rejected_rewards.shape or chosen_rewards.dim() != 1:
        raise ValueError(
            "`chosen_rewards` and `rejected_rewards` must be 1-D of the same length, got shapes "
            f"{tuple(chosen_rewards.shape)} and {tuple(rejected_rewards.shape)}"
        )
    if chosen_rewards.numel() == 0:
        raise ValueError("`chosen_rewards` is empty: the Bradley–Terry loss needs at least one pair")
    return -F.logsigmoid(chosen_rewards - rejected_rewards).mean()


def pairwise_accuracy(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> float:
    """Fraction of pairs with ``r_w > r_l`` (a tie counts as wrong); nan for no pairs."""
    if chosen_rewards.shape != rejected_rewards.shape:
        raise ValueError(
            f"`chosen_rewards` {tuple(chosen_rewards.shape)} and `rejected_rewards` "
            f"{tuple(rejected_rewards.shape)} differ in shape"
        )
    if chosen_rewards.numel() == 0:
        return math.nan
    return (chosen_rewards > rejected_rewards).float().mean().item()


def fair_allocation(lengths: Sequence[int], budget: int) -> list[int]:
    """Share ``budget`` tokens among pieces of the given lengths, cutting the longest first.

    Max-min fair: each piece keeps ``min(length, level)`` for the largest level that fits, and the
    leftover tokens (fewer than the number of cut pieces) go one each to the cut pieces in index order.
    The result sums to ``min(budget, sum(lengths))``.
    """
    if budget < 0:
        raise ValueError(f"`budget` must be >= 0, got {budget}")
    if any(length < 0 for length in lengths):
        raise ValueError(f"`lengths` must be >= 0, got {list(lengths)}")
    if sum(lengths) <= budget:
        return list(lengths)
    remaining, left, level = budget, len(lengths), 0
    for length in sorted(lengths):
        share = remaining // left
        if length > share:
            level = share
            break
        remaining -= length
        left -= 1
    keep = [min(length, level) for length in lengths]
    extra = budget - sum(keep)
    for i, length in enumerate(lengths):
        if extra == 0:
            break
        if length > keep[i]:
            keep[i] += 1
            extra -= 1
    return keep


def joint_budget(
    prompt_lengths: Sequence[int], response_lengths: Sequence[int], budget: int | None
) -> tuple[list[int], list[int]]:
    """Tokens each agent's prompt and response keep within ``budget`` content tokens (None: all).

    Prompts are cut first; responses only when they alone exceed the budget, and then evenly. Needs
    ``budget >= number of agents`` whenever responses must be cut, so none is dropped entirely.
    """
    if len(prompt_lengths) != len(response_lengths):
        raise ValueError(
            f"one prompt length per response length: got {len(prompt_lengths)} and {len(response_lengths)}"
        )
    prompts, responses = list(prompt_lengths), list(response_lengths)
    if budget is None or sum(prompts) + sum(responses) <= budget:
        return prompts, responses
    if sum(responses) <= budget:
        return fair_allocation(prompts, budget - sum(responses)), responses
    if budget < len(responses):
        raise ValueError(
            f"a budget of {budget} content tokens cannot keep one response token for each of "
            f"{len(responses)} agents"
        )
    return [0] * len(prompts), fair_allocation(responses, budget)


def _keep(ids: list[int], count: int, side: str) -> list[int]:
    if count >= len(ids):
        return ids
    return ids[:count] if side == "head" else ids[len(ids) - count :]


def format_joint_text(prompts: Sequence[str], responses: Sequence[str]) -> str:
    """The joint text of one joint response (without the trailing EOS token); see the module doc."""
    if len(prompts) != len(responses) or not prompts:
        raise ValueError(
            f"`prompts` and `responses` must hold one entry per agent (>= 1), got {len(prompts)} and "
            f"{len(responses)}"
        )
    blocks = [
        _prompt_label(k) + prompt + _response_label(k) + response
        for k, (prompt, response) in enumerate(zip(prompts, responses))
    ]
    return JOINT_TEXT_HEADER + AGENT_SEPARATOR.join(blocks)


def split_pairs(pairs: Sequence[Any], eval_fraction: float, seed: int) -> tuple[list[Any], list[Any]]:
    """Seeded held-out split: ``ceil(eval_fraction * n)`` pairs (at most ``n - 1``) go to evaluation.

    Returns ``(train, eval)``, each in the original order. No pairs are held out when
    ``eval_fraction == 0`` or there are fewer than two pairs.
    """
    if not 0 <= eval_fraction < 1:
        raise ValueError(f"`reward_eval_fraction` must be in [0, 1), got {eval_fraction}")
    n = len(pairs)
    num_eval = 0 if eval_fraction == 0 or n < 2 else min(n - 1, math.ceil(n * eval_fraction - 1e-9))
    if num_eval == 0:
        return list(pairs), []
    generator = torch.Generator().manual_seed(derive_seed(seed, "reward_model", "split"))
    held = set(torch.randperm(n, generator=generator)[:num_eval].tolist())
    return [p for i, p in enumerate(pairs) if i not in held], [p for i, p in enumerate(pairs) if i in held]


def resolve_reward_model_source(reward_model_name: str | None, actor_names: Sequence[str | None]) -> str:
    """The reward model's backbone: ``reward_model_name`` if set, else the first actor's model name.

    ``actor_names`` holds, per agent, the name (preset, path or hub id) the actor was given by, or None
    for an actor given as a model object. Never guesses a name from a model's class or ``model_type``.
    """
    if reward_model_name is not None:
        if not isinstance(reward_model_name, str) or not reward_model_name.strip():
            raise ValueError(f"`reward_model_name` must be a non-empty string, got {reward_model_name!r}")
        return reward_model_name.strip()
    if actor_names and isinstance(actor_names[0], str) and actor_names[0].strip():
        return actor_names[0].strip()
    raise ValueError(
        "`reward_model_name` must be set: the actors were given as model objects without a name, so there "
        "is no model to build the reward model from (give a preset such as 'test-tiny', a local "
        "checkpoint folder or a hub id)"
    )


def resolve_reward_model_device(
    reward_model_device: str | torch.device | None, first_agent_device: str | torch.device
) -> str:
    """``reward_model_device`` if set, else the first agent's device (never a hard-coded accelerator)."""
    device = reward_model_device if reward_model_device is not None else first_agent_device
    try:
        return str(torch.device(device))
    except (RuntimeError, TypeError, ValueError) as exc:
        field = "reward_model_device" if reward_model_device is not None else "first_agent_device"
        raise ValueError(f"`{field}` is not a device: {device!r} ({exc})") from None


# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JointEncoding:
    """Token ids of joint texts and which of them were cut to fit ``max_length``."""

    input_ids: list[list[int]]
    truncated: list[bool]

    @property
    def num_truncated(self) -> int:
        return sum(self.truncated)

    def __len__(self) -> int:
        return len(self.input_ids)


class JointRewardModel(nn.Module):
    """A backbone (causal LM or base model) plus a scalar head read at each text's last real token.

    Args:
        backbone: a transformers model; for a causal LM only its base model runs (no vocabulary logits).
        tokenizer: the backbone's tokenizer (its pad id fills padding; real tokens come from the mask). None
            (the public ``JointRewardModel(backbone)``) gives a model that scores token ids (``forward``,
            ``score_ids``; padding id 0, right padding) and refuses to encode text.
        seed: seeds the head's initialisation when ``head`` is None.
        head: an existing ``Linear(hidden, 1)`` head (e.g. when loading); None makes a fresh one.
        max_length: ``reward_max_length``, the token budget of a joint text (None: the backbone's
            ``max_position_embeddings`` when it has one, else no limit).
        freeze_backbone: ``reward_freeze_backbone``: train only the head.
        padding_side: ``"left"`` or ``"right"``; None takes the tokenizer's.
        prompt_keep / response_keep: which end of a cut prompt / response is kept (``"head"`` or ``"tail"``).
        source: where the backbone came from (recorded in the saved folder).
    """

    def __init__(
        self,
        backbone: nn.Module,
        tokenizer: Any = None,
        *,
        seed: int = 0,
        head: nn.Linear | None = None,
        max_length: int | None = None,
        freeze_backbone: bool = False,
        padding_side: str | None = None,
        prompt_keep: str = "tail",
        response_keep: str = "head",
        source: str | None = None,
    ) -> None:
        super().__init__()
        if isinstance(tokenizer, bool):  # the public JointRewardModel(backbone, freeze_backbone) order
            raise TypeError(f"`tokenizer` must be a tokenizer or None, got {tokenizer!r}: pass freeze_backbone=...")
        if max_length is not None and (not isinstance(max_length, int) or max_length < 1):
            raise ValueError(f"`reward_max_length` must be None or an int >= 1, got {max_length!r}")
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.hidden_size = hidden_size(backbone.config)
        self.max_length = max_length
        self.freeze_backbone = bool(freeze_backbone)
        self.padding_side = padding_side or getattr(tokenizer, "padding_side", "right")
        check_choice("padding_side", self.padding_side, ("left", "right"))
        check_choice("prompt_keep", prompt_keep, KEEP_SIDES)
        self.prompt_keep = prompt_keep
        check_choice("response_keep", response_keep, KEEP_SIDES)
        self.response_keep = response_keep
        self.source = source
        device = next(backbone.parameters()).device
        if head is None:
            head = nn.Linear(self.hidden_size, 1, bias=False, dtype=torch.float32)
            std = float(getattr(backbone.config, "initializer_range", 0.02) or 0.02)
            generator = torch.Generator().manual_seed(derive_seed(seed, "reward_model", "head"))
            with torch.no_grad():
                head.weight.copy_(torch.randn(head.weight.shape, generator=generator) * std)
        elif head.in_features != self.hidden_size or head.out_features != 1:
            raise ValueError(
                f"`head` must be Linear({self.hidden_size}, 1), got Linear({head.in_features}, "
                f"{head.out_features})"
            )
        self.head = head.to(device=device, dtype=torch.float32)
        for param in self.backbone.parameters():
            param.requires_grad_(not self.freeze_backbone)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_token_id = pad if pad is not None else (getattr(tokenizer, "eos_token_id", None) or 0)
        eos = getattr(tokenizer, "eos_token_id", None)
        self._end_ids = [eos] if isinstance(eos, int) else []
        self._label_cache: dict[tuple[str, int], list[int]] = {}

    # ---- construction -----------------------------------------------------------------------------

    @classmethod
    def from_source(
        cls,
        source: str | os.PathLike,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
        seed: int = 0,
        **kwargs: Any,
    ) -> JointRewardModel:
        """Load the backbone and tokenizer from a preset, folder or hub id; fresh head seeded by ``seed``.

        ``dtype`` defaults to float32: the reward model trains in full precision (pass bfloat16 to save
        memory). Other keywords go to the constructor.
        """
        from comlrl.models import load_model, load_tokenizer, resolve_model_path

        path = resolve_model_path(source)
        backbone = load_model(path, device=str(device), dtype=dtype or torch.float32)
        tokenizer = load_tokenizer(path)
        kwargs.setdefault("source", str(source))
        return cls(backbone, tokenizer, seed=seed, **kwargs)

    @property
    def base(self) -> nn.Module:
        """The module that returns hidden states (a causal LM's decoder, or the backbone itself)."""
        return getattr(self.backbone, "base_model", self.backbone)

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    @property
    def effective_max_length(self) -> int | None:
        limit = getattr(self.backbone.config, "max_position_embeddings", None)
        if self.max_length is None:
            return limit if isinstance(limit, int) else None
        return min(self.max_length, limit) if isinstance(limit, int) else self.max_length

    # ---- text -> ids ------------------------------------------------------------------------------

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        if self.tokenizer is None:
            raise ValueError(
                "this JointRewardModel has no `tokenizer`, so it cannot encode text: build it with "
                "JointRewardModel(backbone, tokenizer) or JointRewardModel.from_source(...)"
            )
        return [list(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

    def _label(self, kind: str, agent: int) -> list[int]:
        key = (kind, agent)
        if key not in self._label_cache:
            text = {
                "header": JOINT_TEXT_HEADER,
                "sep": AGENT_SEPARATOR,
                "prompt": _prompt_label(agent),
                "response": _response_label(agent),
            }[kind]
            self._label_cache[key] = self._ids([text])[0]
        return self._label_cache[key]

    def encode(self, prompts: Sequence[Sequence[str]], responses: Sequence[Sequence[str]]) -> JointEncoding:
        """Token ids of joint texts: ``prompts[m]`` / ``responses[m]`` hold text m's per-agent strings."""
        if len(prompts) != len(responses):
            raise ValueError(f"`prompts` ({len(prompts)}) and `responses` ({len(responses)}) differ in length")
        for m, (p, r) in enumerate(zip(prompts, responses)):
            if isinstance(p, str) or isinstance(r, str) or len(p) != len(r) or not p:
                raise ValueError(
                    f"joint text {m} must have one prompt and one response per agent (lists of strings)"
                )
        prompt_ids = iter(self._ids([p for texts in prompts for p in texts]))
        response_ids = iter(self._ids([r for texts in responses for r in texts]))
        max_length = self.effective_max_length
        out, truncated = [], []
        for texts in prompts:
            n = len(texts)
            p_ids = [next(prompt_ids) for _ in range(n)]
            r_ids = [next(response_ids) for _ in range(n)]
            fixed = len(self._label("header", 0)) + len(self._end_ids) + (n - 1) * len(self._label("sep", 0))
            fixed += sum(len(self._label("prompt", k)) + len(self._label("response", k)) for k in range(n))
            budget = None if max_length is None else max_length - fixed
            if budget is not None and budget < n:
                raise ValueError(
                    f"`reward_max_length` ({max_length}) is too small for {n} agents: the joint text's labels "
                    f"take {fixed} tokens and each agent's response needs at least one, so it must be >= "
                    f"{fixed + n}"
                )
            p_keep, r_keep = joint_budget([len(x) for x in p_ids], [len(x) for x in r_ids], budget)
            ids = list(self._label("header", 0))
            for k in range(n):
                if k:
                    ids += self._label("sep", 0)
                ids += self._label("prompt", k) + _keep(p_ids[k], p_keep[k], self.prompt_keep)
                ids += self._label("response", k) + _keep(r_ids[k], r_keep[k], self.response_keep)
            out.append(ids + self._end_ids)
            truncated.append(
                any(keep < len(x) for keep, x in zip(p_keep + r_keep, p_ids + r_ids))
            )
        return JointEncoding(input_ids=out, truncated=truncated)

    def collate(self, input_ids: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Pad once on ``padding_side``: ``(input_ids, attention_mask)`` on the model's device."""
        if not input_ids or any(len(ids) == 0 for ids in input_ids):
            raise ValueError("`input_ids` must be a non-empty list of non-empty sequences")
        width = max(len(ids) for ids in input_ids)
        batch = torch.full((len(input_ids), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(input_ids), width), dtype=torch.long)
        for i, ids in enumerate(input_ids):
            start = 0 if self.padding_side == "right" else width - len(ids)
            batch[i, start : start + len(ids)] = torch.tensor(list(ids), dtype=torch.long)
            mask[i, start : start + len(ids)] = 1
        return batch.to(self.device), mask.to(self.device)

    # ---- scoring ----------------------------------------------------------------------------------

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """One float32 score per row, read at the row's last real token."""
        index = last_token_index(attention_mask)
        position_ids = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)
        inputs = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "use_cache": False,
        }
        if self.freeze_backbone:
            with torch.no_grad():
                hidden = self.base(**inputs)[0]
        else:
            hidden = self.base(**inputs)[0]
        pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), index]
        return self.head(pooled.float()).squeeze(-1)

    def score_ids(self, input_ids: Sequence[Sequence[int]]) -> torch.Tensor:
        """Scores of already encoded joint texts in one padded forward (gradients as the caller set)."""
        return self(*self.collate(input_ids))

    def pair_rewards(
        self, winner_ids: Sequence[Sequence[int]], loser_ids: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(r(winners), r(losers))`` from ONE padded forward over winners and losers together."""
        if len(winner_ids) != len(loser_ids):
            raise ValueError(f"{len(winner_ids)} winners but {len(loser_ids)} losers")
        scores = self.score_ids([*winner_ids, *loser_ids])
        return scores[: len(winner_ids)], scores[len(winner_ids) :]

    @torch.no_grad()
    def score(
        self,
        prompts: Sequence[Sequence[str]],
        responses: Sequence[Sequence[str]],
        *,
        batch_size: int | None = None,
    ) -> tuple[torch.Tensor, int]:
        """Scores of joint texts without gradients: ``([M] float32 on CPU, number of cut texts)``.

        ``batch_size`` bounds the texts per forward (None: one forward).
        """
        encoding = self.encode(prompts, responses)
        if len(encoding) == 0:
            return torch.zeros(0), 0
        step = batch_size or len(encoding)
        parts = [self.score_ids(encoding.input_ids[i : i + step]) for i in range(0, len(encoding), step)]
        return torch.cat(parts).float().cpu(), encoding.num_truncated

    # ---- save / load ------------------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "hidden_size": self.hidden_size,
            "max_length": self.max_length,
            "freeze_backbone": self.freeze_backbone,
            "padding_side": self.padding_side,
            "prompt_keep": self.prompt_keep,
            "response_keep": self.response_keep,
            "source": self.source,
            "backbone_kind": "base" if self.base is self.backbone else "causal_lm",
        }

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the folder (backbone + tokenizer, head, options) atomically, replacing an old one."""
        from safetensors.torch import save as save_tensors

        directory = Path(directory)
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
        try:
            self.backbone.save_pretrained(tmp / BACKBONE_DIR)
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(tmp / BACKBONE_DIR)
            weight = self.head.weight.detach().to("cpu", torch.float32).contiguous()
            atomic_write_bytes(tmp / HEAD_FILE, save_tensors({"weight": weight}))
            atomic_write_json(tmp / CONFIG_FILE, self.options())
            return atomic_replace_dir(tmp, directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    @classmethod
    def load(
        cls, directory: str | os.PathLike, *, device: str | torch.device = "cpu", dtype: torch.dtype | None = None
    ) -> JointRewardModel:
        """Rebuild a model written by :meth:`save` (``dtype`` defaults to float32)."""
        import json

        from safetensors.torch import load_file
        from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

        directory = Path(directory)
        config_path = directory / CONFIG_FILE
        if not config_path.is_file():
            raise FileNotFoundError(f"{directory} is not a saved reward model: no {CONFIG_FILE}")
        options = json.loads(config_path.read_text(encoding="utf-8"))
        if options.get("format") != FORMAT_NAME or options.get("version") != FORMAT_VERSION:
            raise ValueError(
                f"{config_path}: expected format {FORMAT_NAME!r} version {FORMAT_VERSION}, got "
                f"{options.get('format')!r} version {options.get('version')!r}"
            )
        loader = AutoModel if options["backbone_kind"] == "base" else AutoModelForCausalLM
        backbone = loader.from_pretrained(directory / BACKBONE_DIR, dtype=dtype or torch.float32).to(device)
        saved_tokenizer = (directory / BACKBONE_DIR / "tokenizer_config.json").is_file()
        tokenizer = AutoTokenizer.from_pretrained(directory / BACKBONE_DIR) if saved_tokenizer else None
        head = nn.Linear(options["hidden_size"], 1, bias=False, dtype=torch.float32)
        with torch.no_grad():
            head.weight.copy_(load_file(str(directory / HEAD_FILE))["weight"])
        return cls(
            backbone,
            tokenizer,
            head=head,
            max_length=options["max_length"],
            freeze_backbone=options["freeze_backbone"],
            padding_side=options["padding_side"],
            prompt_keep=options["prompt_keep"],
            response_keep=options["response_keep"],
            source=options["source"],
        )


# --------------------------------------------------------------------------------------------------
# Fitting and evaluation
# --------------------------------------------------------------------------------------------------


def _pair_fields(pair: Any, index: int) -> tuple[list[str], list[str], list[str]]:
    """(prompts, winner completions, loser completions) of a PreferencePair or a record mapping."""
    if isinstance(pair, Mapping):
        get = pair.get
    else:
        def get(name):
            return getattr(pair, name, None)
    fields = [get(name) for name in ("prompts", "winner_completions", "loser_completions")]
    if any(not isinstance(f, (list, tuple)) for f in fields) or not (
        len(fields[0]) == len(fields[1]) == len(fields[2]) >= 1
    ):
        raise ValueError(
            f"pair {index} needs `prompts`, `winner_completions` and `loser_completions`, one string per agent"
        )
    return [list(f) for f in fields]  # type: ignore[return-value]


def _encode_pairs(model: JointRewardModel, pairs: Sequence[Any]) -> tuple[JointEncoding, JointEncoding]:
    """Winner and loser encodings of every pair (tokenized once, before any epoch)."""
    fields = [_pair_fields(pair, i) for i, pair in enumerate(pairs)]
    winners = model.encode([f[0] for f in fields], [f[1] for f in fields])
    losers = model.encode([f[0] for f in fields], [f[2] for f in fields])
    return winners, losers


@torch.no_grad()
def _evaluate_encoded(
    model: JointRewardModel, winners: JointEncoding, losers: JointEncoding, batch_size: int
) -> tuple[float, float]:
    if len(winners) == 0:
        return math.nan, math.nan
    chosen, rejected = [], []
    for start in range(0, len(winners), batch_size):
        c, r = model.pair_rewards(
            winners.input_ids[start : start + batch_size], losers.input_ids[start : start + batch_size]
        )
        chosen.append(c)
        rejected.append(r)
    chosen_t, rejected_t = torch.cat(chosen), torch.cat(rejected)
    return bradley_terry_loss(chosen_t, rejected_t).item(), pairwise_accuracy(chosen_t, rejected_t)


def evaluate_reward_model(model: JointRewardModel, pairs: Sequence[Any], *, batch_size: int = 8) -> dict[str, float]:
    """Bradley–Terry loss and pairwise accuracy on ``pairs`` under no_grad (nan for no pairs)."""
    check_int("batch_size", batch_size, 1, spell_out=True)
    was_training = model.training
    model.eval()
    try:
        winners, losers = _encode_pairs(model, pairs)
        loss, accuracy = _evaluate_encoded(model, winners, losers, batch_size)
    finally:
        model.train(was_training)
    return {"loss": loss, "accuracy": accuracy, "truncated": winners.num_truncated + losers.num_truncated}


def fit_reward_model(
    model: JointRewardModel,
    train_pairs: Sequence[Any],
    eval_pairs: Sequence[Any] = (),
    *,
    epochs: int = 1,
    batch_size: int = 1,
    lr: float = 1e-5,
    seed: int = 0,
    weight_decay: float = 0.0,
    max_grad_norm: float | None = None,
    eval_batch_size: int | None = None,
    max_nonfinite_fraction: float = 0.1,
    max_nonfinite_losses_in_a_row: int = 10,
    on_step: Callable[[dict[str, float]], None] | None = None,
    training: Any = None,
    data_parallel: Any = None,
) -> dict[str, float]:
    """Fit ``model`` in place with the Bradley–Terry loss; return the metrics.

    ``epochs``, ``batch_size`` and ``lr`` are the config's ``reward_num_train_epochs``,
    ``reward_train_batch_size`` and ``reward_learning_rate``. Pairs are PreferencePair objects or record
    mappings. The order of each epoch comes from a generator seeded by ``seed``; the optimizer is a fresh
    AdamW over the trainable parameters (a warm start is the caller passing last round's model).
    A step with a non-finite loss (or non-finite rewards of its winners or losers) is skipped, counted and
    logged; the fit stops with an error past ``max_nonfinite_fraction`` of the planned steps, after
    ``max_nonfinite_losses_in_a_row`` skipped steps in a row (the trainers' setting, same meaning), or when
    no step went through. ``on_step`` receives ``{"reward_model/step_loss", ...}`` per step.
    ``training``: an object with the :class:`~comlrl.trainers.core.optimization.TrainingKnobFields` (the
    trainer's config): gradient accumulation over consecutive batches of an epoch, its LR schedule over the
    fit's optimizer steps, clipping (``max_grad_norm`` here wins) and bf16 / fp16 autocast; ``save_steps``
    does not apply (a fit is redone on resume). ``reward_model/steps`` counts the batches that went through.
    ``data_parallel``: the trainer's :class:`~comlrl.trainers.core.data_parallel.DataParallel`; every rank
    walks the same shuffled batches and fits on its shard of each (gradients and rows summed over the ranks
    before each step, a batch non-finite on one rank skipped on all), and the metrics are every rank's.

    Returns ``reward_model/loss`` and ``reward_model/accuracy`` (the last epoch, each pair scored before
    its update, as TRL reports them), ``reward_model/eval_loss`` and ``reward_model/eval_accuracy`` (held
    out, after fitting; nan without eval pairs), ``reward_model/truncated`` (joint texts cut, over train and
    eval), ``reward_model/train_pairs``, ``reward_model/eval_pairs``, ``reward_model/steps`` and
    ``reward_model/skipped_steps``.
    """
    check_int("epochs", epochs, 1, spell_out=True)
    check_int("batch_size", batch_size, 1, spell_out=True)
    if eval_batch_size is not None:
        check_int("eval_batch_size", eval_batch_size, 1, spell_out=True)
    if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"`lr` must be a finite number > 0, got {lr!r}")
    if not 0 <= max_nonfinite_fraction <= 1:
        raise ValueError(f"`max_nonfinite_fraction` must be in [0, 1], got {max_nonfinite_fraction}")
    check_int(SETTING, max_nonfinite_losses_in_a_row, 1, spell_out=True)
    if len(train_pairs) == 0:
        raise ValueError("`train_pairs` is empty: the reward model needs at least one preference pair")

    winners, losers = _encode_pairs(model, train_pairs)
    eval_winners, eval_losers = _encode_pairs(model, eval_pairs)
    truncated = winners.num_truncated + losers.num_truncated + eval_winners.num_truncated
    truncated += eval_losers.num_truncated
    total_texts = 2 * (len(train_pairs) + len(eval_pairs))
    if truncated:
        logger.warning(truncation_message(truncated, total_texts))

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = build_optimizer(params, learning_rate=lr, weight_decay=weight_decay)
    generator = torch.Generator().manual_seed(derive_seed(seed, "reward_model", "shuffle"))
    num_pairs = len(winners)
    steps_per_epoch = math.ceil(num_pairs / batch_size)
    updates = GradientSteps(training, {"reward_model": optimizer}, device_type=model.device.type)
    if data_parallel is not None:
        data_parallel.attach(updates)
    updates.save_steps = None
    if max_grad_norm is not None:
        updates.max_grad_norm = float(max_grad_norm) or None
    updates.begin_phase(epochs * accumulated_steps(steps_per_epoch, updates.k))
    allowed_skips = max_nonfinite_fraction * steps_per_epoch * epochs
    model.eval()  # dropout off while fitting: deterministic given the seed
    steps = skipped = in_a_row = 0
    epoch_loss = epoch_correct = epoch_seen = 0.0
    for epoch in range(epochs):
        epoch_loss = epoch_correct = epoch_seen = 0.0
        order = torch.randperm(num_pairs, generator=generator).tolist()
        for start in range(0, num_pairs, batch_size):
            rows = order[start : start + batch_size]
            rows = data_parallel.shard(rows) if data_parallel is not None else rows  # this rank's part
            updates.start_micro_batch()
            bad: list[str] = []
            if rows:
                with updates.autocast():
                    chosen, rejected = model.pair_rewards(
                        [winners.input_ids[i] for i in rows], [losers.input_ids[i] for i in rows]
                    )
                chosen, rejected = chosen.float(), rejected.float()
                loss = bradley_terry_loss(chosen, rejected)
                bad = nonfinite_names({"winner rewards": chosen, "loser rewards": rejected, "Bradley–Terry loss": loss})
            if bad:
                updates.discard_micro_batch()
            else:
                if rows:
                    updates.backward(loss, len(rows))
                if not updates.end_micro_batch(len(rows)):  # data parallel: another rank's part was non-finite
                    bad = ["reward on another rank"]
            if bad:
                skipped += 1
                in_a_row += 1
                where = f"epoch {epoch + 1}, step {start // batch_size + 1} of {steps_per_epoch}"
                logger.warning(
                    "reward model step skipped: non-finite %s at %s (%d skipped so far)", ", ".join(bad), where, skipped
                )
                if in_a_row >= max_nonfinite_losses_in_a_row:
                    raise NonFiniteError(
                        f"reward model fitting stopped: {in_a_row} non-finite steps in a row (limit "
                        f"`{SETTING}`={max_nonfinite_losses_in_a_row}), the last at {where}: non-finite {', '.join(bad)}"
                    )
                if skipped > allowed_skips:
                    raise FloatingPointError(
                        f"reward model fitting stopped: {skipped} non-finite losses in "
                        f"{steps + skipped} steps exceed `max_nonfinite_fraction` ({max_nonfinite_fraction})"
                    )
                continue
            in_a_row = 0
            steps += 1
            part = [loss.item() * len(rows), (chosen > rejected).sum().item(), len(rows)] if rows else [0.0] * 3
            step_loss, step_correct, step_seen = data_parallel.totals(part) if data_parallel is not None else part
            epoch_loss += step_loss
            epoch_correct += step_correct
            epoch_seen += step_seen
            if on_step is not None:
                on_step(
                    {
                        "reward_model/step_loss": step_loss / step_seen,
                        "reward_model/step_accuracy": step_correct / step_seen,
                        "reward_model/step": float(steps),
                    }
                )
        updates.flush()
    optimizer.zero_grad(set_to_none=True)
    if steps == 0:  # nothing was fit: the model is its initialisation, not a reward model
        raise NonFiniteError(
            f"reward model fitting stopped: all {skipped} steps had a non-finite loss (`{SETTING}`="
            f"{max_nonfinite_losses_in_a_row} was not reached, but no step went through)"
        )
    eval_loss, eval_accuracy = _evaluate_encoded(
        model, eval_winners, eval_losers, eval_batch_size or max(batch_size, 8)
    )
    return {
        "reward_model/loss": epoch_loss / epoch_seen if epoch_seen else math.nan,
        "reward_model/accuracy": epoch_correct / epoch_seen if epoch_seen else math.nan,
        "reward_model/eval_loss": eval_loss,
        "reward_model/eval_accuracy": eval_accuracy,
        "reward_model/truncated": float(truncated),
        "reward_model/train_pairs": float(len(train_pairs)),
        "reward_model/eval_pairs": float(len(eval_pairs)),
        "reward_model/steps": float(steps),
        "reward_model/skipped_steps": float(skipped),
    }


def fit_reward_model_from_config(
    model: JointRewardModel, pairs: Sequence[Any], config: Any, *, seed: int, **kwargs: Any
) -> dict[str, float]:
    """Split ``pairs`` by ``config.reward_eval_fraction`` and fit with the config's reward fields.

    ``seed`` drives both the split and the shuffling (the trainer derives it per round). Non-finite steps
    stop the fit after the config's ``max_nonfinite_losses_in_a_row`` in a row, as they stop the trainers
    (no fraction limit unless ``max_nonfinite_fraction`` is passed); the config's training knobs apply.
    """
    kwargs.setdefault(SETTING, config.max_nonfinite_losses_in_a_row)
    kwargs.setdefault("max_nonfinite_fraction", 1.0)
    kwargs.setdefault("training", config)  # accumulation, LR schedule, clipping and precision of the config
    train, held_out = split_pairs(pairs, config.reward_eval_fraction, seed)
    return fit_reward_model(
        model,
        train,
        held_out,
        epochs=config.reward_num_train_epochs,
        batch_size=config.reward_train_batch_size,
        lr=config.reward_learning_rate,
        seed=seed,
        **kwargs,
    )
