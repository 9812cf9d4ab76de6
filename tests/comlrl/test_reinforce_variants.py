"""The public library's MAGRPO variants on the test-tiny model: MAREINFORCE, MAReMax, MARLOO and
CentralizedMAGRPO train (every trainable parameter moves), their defaults are the public ones, and the
advantages of a fixed batch, taken through the trainer's own loss path, equal a hand computation of each
baseline."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from comlrl.rollout import Completion
from comlrl.trainers.core.sampling import ItemSample
from comlrl.trainers.reinforce import (
    CentralizedMAGRPOConfig,
    CentralizedMAGRPOTrainer,
    MAGRPOConfig,
    MAGRPOTrainer,
    MAREINFORCEConfig,
    MAREINFORCETrainer,
    MAReMaxConfig,
    MAReMaxTrainer,
    MARLOOConfig,
    MARLOOTrainer,
)
from tests.helpers.trainer_helpers import plan_items, varied_reward, weights

ITEMS = plan_items(3)
VARIANTS = [
    (MAREINFORCETrainer, MAREINFORCEConfig, "raw", "mareinforce"),
    (MAReMaxTrainer, MAReMaxConfig, "max", "maremax"),
    (MARLOOTrainer, MARLOOConfig, "rloo", "marloo"),
]
IDS = ["mareinforce", "maremax", "marloo"]


def values(tmp_path, **overrides):
    out = dict(
        output_dir=str(tmp_path / "out"),
        num_turns=1,
        max_new_tokens=5,
        temperature=1.0,
        top_p=1.0,
        agent_learning_rate=1e-2,
        num_generations=3,
        num_train_epochs=1,
        rollout_buffer_size=2,
        logging_steps=1,
        eval_interval=0,
        disable_tqdm=True,
        seed=3,
    )
    out.update(overrides)
    return out


class HalvesAdapter:
    """Splits a joint completion into equal slices, so every completion parses (the random test model
    writes no tags) and the role rewards vary."""

    def build_prompt(self, item, role_prompts):
        return "Answer for every role: " + " | ".join(role_prompts)

    def parse_completion(self, text, item, num_roles):
        size = len(text) // num_roles
        return [text[r * size : (r + 1) * size] for r in range(num_roles)]


def unchanged(before, after) -> list[str]:
    return [k for k in before if torch.equal(before[k], after[k])]


# ------------------------------------------------------------------------------------ defaults


@pytest.mark.parametrize("trainer_cls, config_cls, mode, algorithm", VARIANTS, ids=IDS)
def test_variant_configs_are_magrpo_with_the_public_baseline(trainer_cls, config_cls, mode, algorithm):
    cfg = config_cls(num_turns=1)
    assert cfg.advantage_mode == mode and cfg.rl_algorithm == algorithm
    assert cfg.advantage_normalization is True and cfg.num_generations == 4  # the public defaults
    assert cfg.output_dir == f"outputs/{algorithm}"
    base = MAGRPOConfig(num_turns=1).to_dict()
    mine = cfg.to_dict()
    assert {k for k in base if base[k] != mine[k]} == {"advantage_mode", "output_dir"}
    assert issubclass(config_cls, MAGRPOConfig) and issubclass(trainer_cls, MAGRPOTrainer)
    assert trainer_cls.config_class is config_cls and trainer_cls.algorithm_name


def test_centralized_config_defaults_and_checks():
    cfg = CentralizedMAGRPOConfig()
    assert (cfg.collaboration_mode, cfg.num_turns, cfg.advantage_mode) == ("centralized", 1, "mean")
    assert cfg.is_centralized and cfg.num_actor_models == 1 and cfg.num_generations == 4
    assert CentralizedMAGRPOConfig(collaboration_mode=" Centralised ").collaboration_mode == "centralized"
    with pytest.raises(ValueError, match="CentralizedMAGRPOConfig requires centralized collaboration"):
        CentralizedMAGRPOConfig(collaboration_mode="decentralized")
    with pytest.raises(ValueError, match="Centralized MAGRPO currently supports num_turns=1 only"):
        CentralizedMAGRPOConfig(num_turns=2)
    assert {f.name for f in dataclasses.fields(CentralizedMAGRPOConfig)} == {
        f.name for f in dataclasses.fields(MAGRPOConfig)
    } | {"collaboration_mode"}


# ------------------------------------------------------------------------------------ training


@pytest.mark.parametrize("trainer_cls, config_cls, mode, algorithm", VARIANTS, ids=IDS)
def test_variant_trains_every_parameter(trainer_cls, config_cls, mode, algorithm, tiny_model_path, tmp_path):
    # Without normalization the baseline decides the update, so each variant trains on its own signal.
    trainer = trainer_cls(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=ITEMS,
        args=config_cls(**values(tmp_path, advantage_normalization=False)),
    )
    assert trainer.advantage_mode == mode and trainer.rl.algorithm == algorithm
    before = weights(trainer)
    trainer.train()
    assert not unchanged(before, weights(trainer))
    assert trainer.updates_seen == 2 and trainer.env_step == len(ITEMS) * 3
    assert trainer.critics == []


def test_centralized_magrpo_trains_one_actor_on_role_rewards(tiny_model_path, tmp_path):
    seen = []

    def reward(first, second, batch_items=None):
        seen.append((first[0], second[0]))
        return varied_reward(first, second)

    trainer = CentralizedMAGRPOTrainer(
        centralized_adapter=HalvesAdapter(),
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=reward,
        train_dataset=ITEMS,
        eval_dataset=ITEMS[:2],
        args=CentralizedMAGRPOConfig(**values(tmp_path, max_new_tokens=8, num_turns=1, eval_num_samples=2)),
    )
    assert trainer.num_agents == 1 and trainer.num_roles == 2 and len(trainer.agents) == 1
    assert trainer.centralized_collaboration is trainer.collaboration
    prompt = trainer.agent_prompts(ITEMS[0])
    assert prompt == ["Answer for every role: Task 0: write a short plan. | Task 0: write a short plan."]
    before = weights(trainer)
    trainer.train()
    assert not unchanged(before, weights(trainer))
    assert len(seen) == len(ITEMS) * 3 and trainer.collaboration.parse_failures == 0
    metrics = trainer.evaluate()
    assert "eval/turn_1/reward_mean" in metrics


# ------------------------------------------------------------------------------------ advantages


def fixed_batch(trainer):
    """Two items of three candidates each (token ids of the trainer's vocabulary, any text)."""
    tok = trainer.tokenizers[0]
    prompt = tok("Task 0: write a short plan.")["input_ids"]
    samples = []
    for i in range(2):
        cands = [
            Completion(
                list(prompt),
                [(5 * j + 3 * i + t) % 40 + 5 for t in range(2 + j)],
                [0.0] * (2 + j),
                "",
                "length",
            )
            for j in range(3)
        ]
        agents = [cands] * trainer.num_agents
        samples.append(
            ItemSample(ITEMS[i], i, ["p"] * trainer.num_agents, ["p"] * trainer.num_agents, agents)
        )
    return samples


RETURNS = [[1.0, 2.0, 6.0], [3.0, 3.0, 0.0]]


def hand_baseline(mode: str, group: list[float]) -> list[float]:
    n = len(group)
    if mode == "raw":
        return list(group)
    if mode == "max":
        return [r - max(group) for r in group]
    if mode == "rloo":
        return [r - (sum(group) - r) / (n - 1) for r in group]
    return [r - sum(group) / n for r in group]  # mean


def whiten(group: list[float], eps: float = 1e-4) -> list[float]:
    mean = sum(group) / len(group)
    std = (sum((a - mean) ** 2 for a in group) / (len(group) - 1)) ** 0.5
    return [(a - mean) / (std + eps) for a in group]


CASES = [*[(t, c, m) for t, c, m, _ in VARIANTS], (CentralizedMAGRPOTrainer, CentralizedMAGRPOConfig, "mean")]


@pytest.mark.parametrize("normalize", [False, True], ids=["raw-advantages", "normalized"])
@pytest.mark.parametrize("trainer_cls, config_cls, mode", CASES, ids=[*IDS, "centralized"])
def test_advantages_of_a_fixed_batch_equal_the_hand_baseline(
    trainer_cls, config_cls, mode, normalize, tiny_model_path, tmp_path
):
    extra = {"centralized_adapter": HalvesAdapter()} if trainer_cls is CentralizedMAGRPOTrainer else {}
    trainer = trainer_cls(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        args=config_cls(**values(tmp_path, advantage_normalization=normalize)),
        **extra,
    )
    samples = fixed_batch(trainer)
    returns = torch.tensor([r for row in RETURNS for r in row])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    expected = []
    for row in RETURNS:
        base = hand_baseline(mode, row)
        expected += whiten(base) if normalize else base
    for agent in range(trainer.num_agents):
        out = trainer.rl.agent_loss(agent, samples, returns, groups)
        torch.testing.assert_close(out.advantages.float(), torch.tensor(expected), rtol=0, atol=1e-5)
