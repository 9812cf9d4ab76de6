"""docs/compatibility.md against the code: the entries no other test exercises, and the table itself (every
config field it names exists on its dataclass, every field of the four preference configs is listed, every
status uses the legend's words)."""

from __future__ import annotations

import dataclasses
import re
import sys
import types
from pathlib import Path

import pytest
import torch

from comlrl.trainers.preference import (
    MADPOConfig,
    MADPOIterConfig,
    MADPOIterTrainer,
    MADPOTrainer,
    MARLHFConfig,
    MARLHFIterConfig,
    MARLHFTrainer,
    read_round,
)
from tests.helpers.http_fixture import APIServer, slow
from tests.helpers.http_fixture import (
    api_server as api_server,  # the fixture; "as" marks the re-export for ruff
)
from tests.helpers.trainer_helpers import (
    changed_per_agent,
    madpo_values,
    plan_items,
    records,
    varied_reward,
    weights,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
ITEMS = plan_items(2)


def madpo_args(tmp_path, cls=MADPOConfig, **overrides):
    base = dict(num_train_epochs=1, preference_num_candidates=3, max_new_tokens=5, seed=0)
    return cls(**madpo_values(tmp_path / "out", **{**base, **overrides}))


def every_agent_changed(before, after) -> bool:
    return all(changed_per_agent(before, after).values())


def checkpoints(folder: Path) -> list[str]:
    found = [p.name for p in folder.iterdir() if p.name.startswith("checkpoint-")]
    return sorted(found, key=lambda name: int(name.split("-")[1]))


# ------------------------------------------------------------------------------------ §2 constructor keywords


def test_agent_model_accepts_a_preset_name_and_a_model_object(tiny_model_path, model_cache, tmp_path):
    from comlrl.models import load_model, load_tokenizer

    by_preset = MADPOTrainer(agent_model="test-tiny", reward_func=varied_reward, args=madpo_args(tmp_path))
    assert by_preset.actor_names == ["test-tiny", "test-tiny"]
    reference = load_model(tiny_model_path).state_dict()
    for model in by_preset.agents:
        assert all(torch.equal(reference[k], v) for k, v in model.state_dict().items())

    obj = load_model(tiny_model_path)
    by_object = MADPOTrainer(
        agent_model=obj,
        tokenizer=load_tokenizer(tiny_model_path),
        reward_func=varied_reward,
        args=madpo_args(tmp_path),
    )
    # One object for every agent: the agents are independent copies, not one shared module.
    assert by_object.agents[0] is obj and by_object.agents[1] is not obj
    assert len(by_object.optimizers) == 2


def test_model_config_attn_implementation_and_nested_model_kwargs(tiny_model_path, tmp_path):
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        model_config={"attn_implementation": "eager", "model_kwargs": {"torch_dtype": "bfloat16"}},
        args=madpo_args(tmp_path),
    )
    for model in trainer.agents:
        assert model.config._attn_implementation == "eager"
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_datasets_may_be_iterable_hf_datasets_or_lists(tiny_model_path, tmp_path):
    from datasets import Dataset

    items = [{"prompt": f"p{i}", "id": i} for i in range(3)]
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        train_dataset=Dataset.from_list(items).to_iterable_dataset(),
        eval_dataset=items[:2],
        args=madpo_args(tmp_path),
    )
    assert trainer.train_dataset == items and trainer.eval_dataset == items[:2]
    with pytest.raises(ValueError, match="train_dataset"):
        MADPOTrainer(
            agent_model=tiny_model_path,
            reward_func=varied_reward,
            train_dataset="data.json",
            args=madpo_args(tmp_path),
        )


def test_reward_processor_maps_every_raw_reward(tiny_model_path, tmp_path):
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        reward_processor=lambda r: 10.0 * r - 1.0,
        args=madpo_args(tmp_path),
    )
    completions = [["abcd", "a", "abcdefg"], ["xy", "xyz", ""]]
    scores = trainer.oracle.score(completions, prompts=["p", "q"], item=ITEMS[0], item_index=0)
    raw = [varied_reward([a], [b]) for a, b in zip(*completions)]
    assert scores.raw == raw and scores.processed == [10.0 * r - 1.0 for r in raw]
    with pytest.raises(ValueError, match="reward_processor"):
        MADPOTrainer(
            agent_model=tiny_model_path,
            reward_func=varied_reward,
            reward_processor=3,
            args=madpo_args(tmp_path),
        )


def test_wandb_config_goes_to_wandb_init_and_never_moves_the_outputs(tiny_model_path, tmp_path, monkeypatch):
    calls = []

    class Run:
        def __init__(self):
            self.logged = []

        def log(self, metrics, step):
            self.logged.append((step, dict(metrics)))

        def finish(self):
            pass

    def init(**kwargs):
        calls.append(kwargs)
        return Run()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    wandb_config = {
        "project": "coop",
        "entity": "lab",
        "name": "run-7",
        "dir": str(tmp_path / "wandb"),
        "tags": ["tiny"],
        "id": "abc123",
        "resume": "allow",
        "output_dir": str(tmp_path / "elsewhere"),
    }
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        wandb_config=wandb_config,
        args=madpo_args(tmp_path, report_to="none"),
    )
    assert trainer.args.report_to == ["wandb"] and trainer.args.run_name == "run-7"
    trainer._log({"probe": 1.0})
    [kwargs] = calls
    assert {k: kwargs[k] for k in ("project", "entity", "name", "dir", "tags", "id", "resume")} == {
        k: wandb_config[k] for k in ("project", "entity", "name", "dir", "tags", "id", "resume")
    }
    assert kwargs["config"]["dpo_beta"] == trainer.args.dpo_beta
    assert trainer.metrics_logger._wandb_run.logged == [(0, {"probe": 1.0})]
    assert trainer.metrics_logger.path == tmp_path / "out" / "metrics.jsonl"
    assert not (tmp_path / "elsewhere").exists()


def test_centralized_comparator_generation_under_decentralized_collaboration(tiny_model_path, tmp_path):
    class HalvesAdapter:
        def __init__(self):
            self.built = []

        def build_prompt(self, item, agent_prompts):
            self.built.append(list(agent_prompts))
            return "JOINT " + " | ".join(agent_prompts)

        def parse_completion(self, completion, item, num_agents):
            cut = len(completion) // 2
            return [completion[:cut], completion[cut:]]

    adapter = HalvesAdapter()
    trainer = MADPOIterTrainer(
        agent_model=tiny_model_path,
        num_agents=2,
        reward_func=varied_reward,
        train_dataset=ITEMS,
        centralized_comparator_adapter=adapter,
        args=madpo_args(
            tmp_path,
            MADPOIterConfig,
            num_iterations=1,
            comparator_generation_mode="centralized",
            comparator_centralized_agent_index=1,
        ),
    )
    assert trainer.comparator.adapter is adapter and trainer.collaboration is None
    before = weights(trainer)
    trainer.train()
    assert adapter.built == [[item["prompt"]] * 2 for item in ITEMS]
    pairs = read_round(tmp_path / "out" / "preference_replay" / "iteration_0001.json").pairs
    assert pairs and every_agent_changed(before, weights(trainer))
    for pair in pairs:
        assert pair.num_agents == 2 and pair.has_token_ids
        comparator_side = (
            pair.winner_completions
            if pair.winner_reward == pair.comparator_raw_reward
            else pair.loser_completions
        )
        # The two role texts are the halves of one joint completion.
        assert len(comparator_side[0]) in (len(comparator_side[1]), len(comparator_side[1]) - 1)


# ------------------------------------------------------------------------------------ §3 entry points


def test_checkpoint_interval_total_limit_and_default_directory(tiny_model_path, tmp_path):
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        train_dataset=ITEMS,
        args=madpo_args(tmp_path, num_train_epochs=4, save_total_limit=2, preference_pairs_per_sample=1),
    )
    trainer.train(checkpoint_interval=2)
    # Commits 0 (after collection, forced), 2 and 4 (the last) in args.output_dir; save_total_limit keeps 2.
    assert checkpoints(tmp_path / "out") == ["checkpoint-2", "checkpoint-4"]
    trainer.train(checkpoint_dir=tmp_path / "ck", checkpoint_total_limit=1)  # overrides save_total_limit
    assert checkpoints(tmp_path / "ck") == ["checkpoint-4"]
    with pytest.raises(ValueError, match="checkpoint_total_limit"):
        trainer.train(checkpoint_total_limit=0)


def test_save_and_load_checkpoint_after_a_plain_train(tiny_model_path, tmp_path):
    def make(out):
        return MADPOTrainer(
            agent_model=tiny_model_path,
            reward_func=varied_reward,
            train_dataset=ITEMS,
            args=madpo_args(out),
        )

    done = make(tmp_path / "a")
    done.train()  # no checkpoint keyword
    path = done.save_checkpoint(tmp_path / "manual")
    assert path == tmp_path / "manual" / "checkpoint-1"
    restored = make(tmp_path / "b")
    restored.load_checkpoint(path)
    a, b = weights(done), weights(restored)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for name in ("env_step", "updates_seen", "pairs_built", "pairs_skipped"):
        assert getattr(done, name) == getattr(restored, name), name
    assert restored.metrics_logger.history == done.metrics_logger.history


def test_generation_keywords_override_top_p_top_k_and_stop_for_one_call(tiny_model_path, tmp_path):
    trainer = MADPOTrainer(
        agent_model=tiny_model_path, reward_func=varied_reward, train_dataset=ITEMS, args=madpo_args(tmp_path)
    )
    seen = []
    original = trainer.backend.generate

    def spy(requests, params=None):
        seen.append(params)
        return original(requests, params)

    trainer.backend.generate = spy
    trainer.train(top_p=0.9, top_k=7, stop=["\n\n"], do_sample=True)
    [params] = seen
    assert (params.top_p, params.top_k, tuple(params.stop)) == (0.9, 7, ("\n\n",))
    after = trainer.sampling_params(1)
    assert (after.top_p, after.top_k) == (1.0, 50)


# ------------------------------------------------------------------------------------ §4.1 fields


def test_logging_steps_throttle_on_the_env_step_axis(tiny_model_path, tmp_path):
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        train_dataset=ITEMS,
        args=madpo_args(tmp_path, train_batch_size=1, environment_steps_per_pair=2, logging_steps=4),
    )
    trainer.train()
    updates = trainer.updates_seen
    assert updates == trainer.pairs_built >= 2
    steps = [r["step"] for r in records(trainer) if "loss" in r]
    # Two env steps per one-pair update, one log line per four env steps, the rest flushed at the epoch's end.
    assert steps == [min(4 * k, 2 * updates) for k in range(1, -(-updates // 2) + 1)]


def test_use_environment_step_false_logs_against_the_update_count(tiny_model_path, tmp_path):
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        train_dataset=ITEMS,
        args=madpo_args(tmp_path, train_batch_size=1, use_environment_step=False, logging_steps=1),
    )
    trainer.train()
    steps = [r["step"] for r in records(trainer) if "loss" in r]
    assert steps == list(range(1, trainer.updates_seen + 1))
    assert trainer.env_step == 2 * trainer.updates_seen  # still counted, only not the x-axis


def test_parallel_training_places_agents(tiny_model_path, tmp_path):
    from comlrl.trainers.core.team import resolve_devices

    assert resolve_devices(["cuda:0", "cuda:1"], 2, "none") == ["cuda:0", "cuda:0"]
    assert resolve_devices(["cuda:0", "cuda:1"], 2, "mp") == ["cuda:0", "cuda:1"]
    assert resolve_devices("cpu", 3, "mp") == ["cpu"] * 3
    trainer = MADPOTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        args=madpo_args(tmp_path, parallel_training="mp", agent_devices=["cpu", "cpu"]),
    )
    assert [str(trainer.policy.device(a)) for a in range(2)] == ["cpu", "cpu"]
    assert madpo_args(tmp_path, parallel_training=None).parallel_training == "none"


# ------------------------------------------------------------------------------------ §4.2 MARLHF fields


def test_marlhf_reward_model_and_critic_fields_reach_the_models(tiny_model_path, tmp_path):
    common = dict(
        output_dir=str(tmp_path),
        reward_model_name=tiny_model_path,
        num_generations=2,
        disable_tqdm=True,
        seed=0,
    )
    iac = MARLHFTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        args=MARLHFConfig(
            rl_algorithm="iac",
            use_separate_critic=False,
            value_head_hidden_dim=8,
            reward_max_length=64,
            reward_freeze_backbone=True,
            **common,
        ),
    )
    # use_separate_critic=False: a value head on each agent's own model, with value_head_hidden_dim units.
    assert [c.shared for c in iac.critics] == [True, True]
    assert [c.backbone is agent for c, agent in zip(iac.critics, iac.agents)] == [True, True]
    assert [layer.out_features for layer in iac.critics[0].head if hasattr(layer, "out_features")] == [8, 1]
    reward_model = iac.new_reward_model(1)
    assert reward_model.max_length == 64 and reward_model.freeze_backbone
    assert not any(p.requires_grad for p in reward_model.backbone.parameters())

    maac = MARLHFTrainer(
        agent_model=tiny_model_path,
        reward_func=varied_reward,
        args=MARLHFConfig(
            rl_algorithm="maac",
            critic_model_name=tiny_model_path,
            critic_value_head_hidden_dim=6,
            critic_devices=["cpu"],
            **common,
        ),
    )
    [critic] = maac.critics
    assert not critic.shared and critic.device == torch.device("cpu")
    assert [layer.out_features for layer in critic.head if hasattr(layer, "out_features")] == [6, 1]
    assert not any(critic.backbone is agent for agent in maac.agents)
    assert not maac.new_reward_model(1).freeze_backbone  # the default trains the backbone too


# ------------------------------------------------------------------------------------ §4.3 comparator fields


@pytest.mark.parametrize("source", ["current_copy", "model", "api"])
def test_madpo_iter_trains_against_each_comparator_source(source, tiny_model_path, tmp_path, api_server):
    def reward(a, b):
        # The API's answers ("re: ...") always win, so pairs exist whatever the tiny model samples.
        return float(a[0].startswith("re:")) + float(len(a[0]) % 5) / 10 + float(len(b[0]) % 3) / 100

    extra = {
        "current_copy": {"comparator_devices": "cpu"},
        "model": {"comparator_model_name": tiny_model_path},
        "api": {"comparator_api_url": api_server.url("generic"), "comparator_api_max_retries": 0},
    }[source]
    trainer = MADPOIterTrainer(
        agent_model=tiny_model_path,
        reward_func=reward,
        train_dataset=ITEMS,
        args=madpo_args(tmp_path, MADPOIterConfig, num_iterations=1, comparator_policy=source, **extra),
    )
    before = weights(trainer)
    trainer.train()
    assert trainer.comparator.name == source
    assert trainer.last_round_stats.failed_items == 0 and trainer.pairs_built > 0
    assert every_agent_changed(before, weights(trainer))
    if source == "api":
        bodies = api_server.bodies()
        # One request per (item, agent), sent concurrently (in any order), carrying the public metadata.
        sent = sorted((b["batch_item"]["prompt"], b["agent_idx"]) for b in bodies)
        assert sent == [(it["prompt"], a) for it in ITEMS for a in (0, 1)]


def test_comparator_api_timeout_and_headers_reach_the_requests(tmp_path):
    from comlrl.rollout import SamplingParams
    from comlrl.trainers.preference.comparators import ComparatorContext, build_comparator

    with APIServer() as server:
        args = MADPOIterConfig(
            output_dir=str(tmp_path),
            preference_num_candidates=2,
            comparator_policy="api",
            comparator_api_url=server.url("generic"),
            comparator_api_timeout=0.2,
            comparator_api_max_retries=0,
            comparator_api_headers={"X-Team": "blue"},
        )
        comparator = build_comparator(
            args,
            ComparatorContext(None, None, args, args.output_dir, 0),
            backend_options={"backoff_base": 0.001, "backoff_max": 0.002, "max_concurrency": 1},
        )
        server.script(slow(1.0))  # the first request answers after the 0.2 s timeout
        [out] = comparator.sample(
            ITEMS[:1], [["a", "b"]], SamplingParams(max_new_tokens=8), round_index=1, item_indices=[0]
        )
        assert out.error is not None and out.candidates == []
        assert comparator.stats["timeouts"] == 1
        assert server.requests[0].headers["x-team"] == "blue"


# ------------------------------------------------------------------------------------ the table itself

CONFIG_SECTIONS = {"4.1": MADPOConfig, "4.2": MARLHFConfig, "4.3": MADPOIterConfig, "4.4": MADPOConfig}
TAGS = {"MARLHF*": MARLHFConfig, "Iter": MADPOIterConfig, "MARLHFIter": MARLHFIterConfig}
STATUS_WORDS = ("works", "rejected", "out of scope", "partial", "not yet")


def table_rows(text: str):
    """``(section, header cells, row cells)`` of every table row under a ``##``/``###`` heading."""
    section, header = None, None
    for line in text.splitlines():
        heading = re.match(r"#{2,3} (\d+(?:\.\d+)?)\.? ", line)
        if heading:
            section, header = heading.group(1), None
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set("".join(cells)) <= set("-: "):
            yield section, header, cells


def documented_fields(text: str) -> dict[str, set[type]]:
    """Config field name -> the config classes §4 says have it."""
    out: dict[str, set[type]] = {}
    for section, _, cells in table_rows(text):
        if section not in CONFIG_SECTIONS:
            continue
        tag = re.search(r"\((MARLHF\*|Iter|MARLHFIter)\)", cells[0])
        cls = TAGS[tag.group(1)] if tag else CONFIG_SECTIONS[section]
        for name in re.findall(r"`([a-z_][a-z0-9_]*)`", cells[0]):
            out.setdefault(name, set()).add(cls)
    return out


def test_every_documented_config_field_exists_and_every_field_is_documented():
    documented = documented_fields(DOC.read_text(encoding="utf-8"))
    assert len(documented) > 80
    missing = sorted(
        f"{cls.__name__}.{name}"
        for name, classes in documented.items()
        for cls in classes
        if name not in {f.name for f in dataclasses.fields(cls)}
    )
    assert not missing, f"the table names fields the configs lack: {missing}"
    for cls in (MADPOConfig, MARLHFConfig, MADPOIterConfig, MARLHFIterConfig):
        undocumented = sorted(f.name for f in dataclasses.fields(cls) if f.name not in documented)
        assert not undocumented, f"{cls.__name__} fields missing from docs/compatibility.md: {undocumented}"


def test_every_status_uses_the_legend():
    text = DOC.read_text(encoding="utf-8")
    assert "works (trainer)" not in text
    statuses = 0
    for section, header, cells in table_rows(text):
        columns = [i for i, h in enumerate(header) if h.startswith("status")]
        for i in columns:
            statuses += 1
            assert cells[i].startswith(STATUS_WORDS), (section, cells[0], cells[i])
    assert statuses > 100
