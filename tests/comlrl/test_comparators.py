"""Comparator sources on the test-tiny model: seed streams, batch independence, copies, history, models."""

from __future__ import annotations

import io
import logging

import pytest
import torch

from comlrl.models import load_model, load_tokenizer
from comlrl.policy import MultiAgentPolicy
from comlrl.rollout import GenerationRequest, HFBackend, SamplingParams
from comlrl.seeding import derive_seed
from comlrl.trainers.preference.comparators import (
    COMPARATOR_CLASSES,
    CentralizedComparatorParseError,
    ComparatorContext,
    CurrentComparator,
    CurrentCopyComparator,
    HistoryComparator,
    ModelComparator,
    build_comparator,
    comparator_seed,
    history_source_round,
    resolve_comparator_devices,
    snapshots_to_keep,
    tokenizers_match,
)
from comlrl.trainers.preference.comparators import model as model_source
from comlrl.trainers.preference.config import MADPOIterConfig

SEED = 11
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=5)
ITEMS = [{"id": i, "question": f"q{i}"} for i in range(3)]
PROMPTS = [[f"writer {i}: plan the route", f"critic {i}: check the route"] for i in range(3)]


def make_args(tmp_path, **overrides) -> MADPOIterConfig:
    values = dict(
        num_agents=2,
        preference_num_candidates=3,
        max_new_tokens=5,
        output_dir=str(tmp_path),
        seed=SEED,
    )
    values.update(overrides)
    return MADPOIterConfig(**values)


@pytest.fixture()
def team(tiny_model_path) -> MultiAgentPolicy:
    return MultiAgentPolicy.per_agent([tiny_model_path, tiny_model_path])


def context(team, args, backend=None, **kwargs) -> ComparatorContext:
    backend = backend if backend is not None else HFBackend(team.handles)
    return ComparatorContext(team, backend, args, args.output_dir, SEED, **kwargs)


def same_samples(a, b) -> bool:
    """Equal token ids and log-probs equal up to batch-padding round-off (log-probs pin the weights, ids
    the sampling stream)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if [[c.token_ids for c in agent] for agent in x.candidates] != [
            [c.token_ids for c in agent] for agent in y.candidates
        ]:
            return False
        lx = torch.tensor([v for agent in x.candidates for c in agent for v in c.logprobs])
        ly = torch.tensor([v for agent in y.candidates for c in agent for v in c.logprobs])
        if not torch.allclose(lx, ly, atol=1e-4, rtol=0):
            return False
    return True


def close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-4, rtol=0)


def perturb(team: MultiAgentPolicy, seed: int) -> None:
    """A stand-in for one round's update: seeded noise on every trainable weight, then a version bump."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name in team.policies:
            for p in team.trainable_parameters(name):
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
            team.bump_version(name)


def weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


# ------------------------------------------------------------------------------------------ pure helpers


def test_history_source_round_is_k_updates_before_the_current_policy():
    # Round r builds pairs after r - 1 updates; k = 1 is the policy before the last update.
    assert [history_source_round(r, 1) for r in range(1, 6)] == [0, 0, 1, 2, 3]
    assert [history_source_round(r, 2) for r in range(1, 6)] == [0, 0, 0, 1, 2]
    for r in range(1, 20):
        for k in range(1, 5):
            assert history_source_round(r, k) < r - 1 or history_source_round(r, k) == 0
    with pytest.raises(ValueError, match="`comparator_history_k` must be >= 1, got 0"):
        history_source_round(3, 0)
    with pytest.raises(ValueError, match="`round_index` must be >= 1"):
        history_source_round(0, 1)


def test_snapshots_to_keep_holds_exactly_what_later_rounds_use():
    for k in (1, 2, 3):
        stored: list[int] = [0]
        for r in range(1, 9):
            stored = snapshots_to_keep([*stored, r], r, k)
            # Of the snapshots taken so far (rounds 0..r), exactly those a later round compares with.
            needed = {history_source_round(later, k) for later in range(r + 1, r + 20)} & set(range(r + 1))
            assert set(stored) == needed
            assert len(stored) <= k + 1


def test_resolve_comparator_devices():
    cpu = torch.device("cpu")
    assert resolve_comparator_devices(None, [cpu, cpu]) == [cpu, cpu]
    assert resolve_comparator_devices("auto", [cpu]) == [cpu]
    assert resolve_comparator_devices("cpu", [cpu, cpu]) == [cpu, cpu]
    assert resolve_comparator_devices(["cpu"], [cpu, cpu]) == [cpu, cpu]
    with pytest.raises(ValueError, match="`comparator_devices` must have 1 or 2 entries, got 3"):
        resolve_comparator_devices(["cpu"] * 3, [cpu, cpu])


def test_tokenizers_match_compares_vocabularies(tiny_model_path, model_cache):
    a, b = load_tokenizer(tiny_model_path), load_tokenizer(tiny_model_path)
    other = load_tokenizer("tiny")
    assert tokenizers_match(a, a) and tokenizers_match(a, b)
    assert not tokenizers_match(a, other)
    assert not tokenizers_match(a, None)


# ------------------------------------------------------------------------------------------ current


def test_current_samples_the_comparator_stream(team, tmp_path):
    args = make_args(tmp_path)
    backend = HFBackend(team.handles)
    comp = build_comparator(args, context(team, args, backend))
    assert isinstance(comp, CurrentComparator) and comp.backend is backend
    outputs = comp.sample(ITEMS[:2], PROMPTS[:2], PARAMS, round_index=2, item_indices=[5, 9])
    # Independent computation: one request per (item, agent) with the documented seed, n = 3.
    for out, prompts, item_index in zip(outputs, PROMPTS[:2], [5, 9]):
        assert out.indices == [0, 1, 2] and out.error is None and out.same_tokenizer
        for agent in range(2):
            request = GenerationRequest(
                prompts[agent],
                policy=team.policy_name(agent),
                seed=derive_seed(SEED, "comparator", 2, item_index, agent),
            )
            [expected] = HFBackend(team.handles).generate([request], PARAMS.with_(n=3))
            assert [c.token_ids for c in out.candidates[agent]] == [c.token_ids for c in expected]
            assert all(close(c.logprobs, e.logprobs) for c, e in zip(out.candidates[agent], expected))
    assert comparator_seed(SEED, 2, 5, 1) == derive_seed(SEED, "comparator", 2, 5, 1)


def test_current_is_independent_of_batch_partners_and_of_the_actor_stream(team, tmp_path):
    args = make_args(tmp_path)
    backend = HFBackend(team.handles)
    comp = build_comparator(args, context(team, args, backend))
    together = comp.sample(ITEMS, PROMPTS, PARAMS, round_index=1, item_indices=[0, 1, 2])
    # The actors sample on their own stream and the global generator moves in between.
    actor_requests = [
        GenerationRequest(
            PROMPTS[2][a], policy=team.policy_name(a), seed=derive_seed(SEED, "candidates", 1, 2, a)
        )
        for a in range(2)
    ]
    actor = backend.generate(actor_requests, PARAMS.with_(n=3))
    torch.rand(100)
    state = torch.get_rng_state()
    alone = comp.sample(ITEMS[2:], PROMPTS[2:], PARAMS, round_index=1, item_indices=[2])
    assert torch.equal(state, torch.get_rng_state())  # the comparator never draws from the global stream
    assert same_samples(alone, together[2:])
    # Same prompts and weights, other stream: the actors' candidates differ from the comparator's.
    assert [c.logprobs for c in actor[0]] != [c.logprobs for c in alone[0].candidates[0]]
    # Another round is another stream.
    later = comp.sample(ITEMS[2:], PROMPTS[2:], PARAMS, round_index=2, item_indices=[2])
    assert not same_samples(later, alone)


def test_comparator_candidate_count_may_differ_from_the_actors(team, tmp_path):
    few = build_comparator(
        *(lambda a: (a, context(team, a)))(make_args(tmp_path, comparator_num_candidates=2))
    )
    many = build_comparator(
        *(lambda a: (a, context(team, a)))(make_args(tmp_path, comparator_num_candidates=5))
    )
    short = few.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])[0]
    long = many.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])[0]
    assert short.indices == [0, 1] and long.indices == [0, 1, 2, 3, 4]
    assert [len(agent) for agent in long.candidates] == [5, 5]
    # Candidate j samples with derive_seed(request seed, j): the shorter list is a prefix of the longer.
    for agent in range(2):
        assert [c.token_ids for c in long.candidates[agent][:2]] == [
            c.token_ids for c in short.candidates[agent]
        ]


def test_sample_checks_the_batch_shape(team, tmp_path):
    args = make_args(tmp_path)
    comp = build_comparator(args, context(team, args))
    with pytest.raises(ValueError, match=r"`agent_prompts\[0\]` must hold one prompt per agent \(2\), got 1"):
        comp.sample(ITEMS[:1], [["only one"]], PARAMS, round_index=1, item_indices=[0])
    with pytest.raises(ValueError, match="`item_indices`"):
        comp.sample(ITEMS[:2], PROMPTS[:2], PARAMS, round_index=1, item_indices=[0])
    assert comp.sample([], [], PARAMS, round_index=1, item_indices=[]) == []


def test_factory_resolves_aliases_and_rejects_unknown_sources(team, tmp_path):
    args = make_args(tmp_path)
    assert set(COMPARATOR_CLASSES) == {"current", "current_copy", "model", "history", "api"}
    args.comparator_policy = "online"
    assert isinstance(build_comparator(args, context(team, args)), CurrentComparator)
    args.comparator_policy = "previous"
    args.comparator_history_k = 2
    assert isinstance(build_comparator(args, context(team, args)), HistoryComparator)
    args.comparator_policy = "mirror"
    with pytest.raises(ValueError, match="`comparator_policy` must be one of: current, current_copy"):
        build_comparator(args, context(team, args))


def test_state_of_another_source_is_rejected(team, tmp_path):
    args = make_args(tmp_path)
    comp = build_comparator(args, context(team, args))
    assert comp.state_dict() == {"name": "current"}
    with pytest.raises(
        ValueError, match="comparator state is for source 'history', this comparator is 'current'"
    ):
        comp.load_state_dict({"name": "history"})


# ------------------------------------------------------------------------------------------ current_copy


def test_current_copy_on_the_actor_devices_is_current(team, tmp_path):
    args = make_args(tmp_path, comparator_policy="current_copy", comparator_devices="cpu")
    backend = HFBackend(team.handles)
    copy_comp = build_comparator(args, context(team, args, backend))
    assert isinstance(copy_comp, CurrentCopyComparator)
    assert not copy_comp.shadow.copies_anything and copy_comp.backend is backend
    copy_comp.begin_round(1)
    current = CurrentComparator(context(team, make_args(tmp_path), backend))
    assert same_samples(
        copy_comp.sample(ITEMS, PROMPTS, PARAMS, round_index=1, item_indices=[0, 1, 2]),
        current.sample(ITEMS, PROMPTS, PARAMS, round_index=1, item_indices=[0, 1, 2]),
    )


def test_current_copy_is_frozen_within_a_round_and_refreshed_once_per_round(team, tmp_path):
    args = make_args(tmp_path, comparator_policy="current_copy")
    comp = build_comparator(args, context(team, args), copy_on_same_device=True)
    current = CurrentComparator(context(team, make_args(tmp_path)))
    copies = dict(comp.shadow.copies)
    assert len(copies) == 2 and all(id(m) not in copies for m in copies.values())

    comp.begin_round(1)
    first = comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])
    assert same_samples(
        first, current.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])
    )
    perturb(team, seed=1)  # the actors change mid-round: the copy does not
    assert same_samples(comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0]), first)
    assert not same_samples(
        current.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0]), first
    )

    comp.begin_round(2)
    comp.begin_round(2)  # a repeated call does not copy again
    assert comp.refresh_count == 2
    assert comp.shadow.copies == copies  # refreshed in place, never rebuilt
    for agent in range(2):
        assert_same_weights(
            weights(comp.shadow.handles[team.policy_name(agent)].model), weights(team.handle(agent).model)
        )
        assert comp.shadow.handles[team.policy_name(agent)].version == team.version(agent) == 1
    assert all(not p.requires_grad for m in copies.values() for p in m.parameters())
    second = comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=2, item_indices=[0])
    assert same_samples(
        second, current.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=2, item_indices=[0])
    )


def test_current_copy_of_a_shared_model_copies_it_once(tiny_model_path, tmp_path):
    shared = MultiAgentPolicy.shared(tiny_model_path, 2)
    args = make_args(tmp_path, comparator_policy="current_copy")
    comp = build_comparator(args, context(shared, args), copy_on_same_device=True)
    assert len(comp.shadow.copies) == 1
    comp.begin_round(1)
    out = comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])[0]
    assert [len(agent) for agent in out.candidates] == [3, 3]


# ------------------------------------------------------------------------------------------ history


@pytest.mark.parametrize("k", [1, 2, 3])
def test_history_compares_with_the_policy_k_updates_back(team, tmp_path, k):
    args = make_args(tmp_path, comparator_policy="history", comparator_history_k=k)
    comp = build_comparator(args, context(team, args))
    after = [[weights(team.handle(a).model) for a in range(2)]]  # after[u]: the actors after u updates
    for r in range(1, 6):
        comp.begin_round(r)
        done = r - 1  # updates made before round r builds its pairs
        source = max(done - k, 0)
        for agent in range(2):
            shadow = comp.shadow.handles[team.policy_name(agent)]
            assert_same_weights(weights(shadow.model), after[source][agent])
            assert shadow.version == source
        if done >= 1:  # never the current policy once an update exists
            assert not torch.equal(
                comp.shadow.handles[team.policy_name(0)].model.lm_head.weight,
                team.handle(0).model.lm_head.weight,
            )
        perturb(team, seed=r)  # round r's update
        comp.end_round(r)
        after.append([weights(team.handle(a).model) for a in range(2)])
        assert len(comp.stored_rounds) <= k + 1
    # One snapshot copy per round whose source changed, never one per item or per sample call.
    assert comp.snapshot_loads == len({max(r - 1 - k, 0) for r in range(1, 6)} - {0})


def test_history_samples_from_its_snapshot(team, tiny_model_path, tmp_path):
    args = make_args(tmp_path, comparator_policy="history")
    comp = build_comparator(args, context(team, args))
    current = CurrentComparator(context(team, make_args(tmp_path)))
    comp.begin_round(1)
    # Round 1: no update yet, so the initial policy is the actors: same stream, same samples.
    assert same_samples(
        comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0]),
        current.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0]),
    )
    after_one = None
    for r in (1, 2):
        perturb(team, seed=10 + r)
        comp.end_round(r)
        if r == 1:
            after_one = [weights(team.handle(a).model) for a in range(2)]
    comp.begin_round(3)  # k = 1: the policy after round 1
    got = comp.sample(ITEMS[:2], PROMPTS[:2], PARAMS, round_index=3, item_indices=[0, 1])
    # Independent computation: fresh models with the weights after round 1, the comparator's seeds.
    fresh = {}
    for agent in range(2):
        model = load_model(tiny_model_path)
        model.load_state_dict(after_one[agent])
        fresh[f"p{agent}"] = (model, team.handle(agent).tokenizer)
    backend = HFBackend(fresh)
    for out, prompts, item_index in zip(got, PROMPTS[:2], [0, 1]):
        for agent in range(2):
            request = GenerationRequest(
                prompts[agent], policy=f"p{agent}", seed=comparator_seed(SEED, 3, item_index, agent)
            )
            [expected] = backend.generate([request], PARAMS.with_(n=3))
            assert all(close(c.logprobs, e.logprobs) for c, e in zip(out.candidates[agent], expected))
    assert not same_samples(
        got[:1], current.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=3, item_indices=[0])
    )


def test_history_state_dict_restores_the_snapshots(team, tiny_model_path, tmp_path):
    args = make_args(tmp_path, comparator_policy="history", comparator_history_k=2)
    comp = build_comparator(args, context(team, args))
    for r in range(1, 4):
        comp.begin_round(r)
        perturb(team, seed=20 + r)
        comp.end_round(r)
    buffer = io.BytesIO()
    torch.save(comp.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert sorted(int(s) for s in state["snapshots"]) == [1, 2, 3]

    # A resumed run: the actors hold the weights after round 3; a new comparator gets the saved state.
    resumed_team = MultiAgentPolicy.per_agent([tiny_model_path, tiny_model_path])
    for agent in range(2):
        resumed_team.handle(agent).model.load_state_dict(team.handle(agent).model.state_dict())
    resumed = build_comparator(args, context(resumed_team, args))
    resumed.load_state_dict(state)
    comp.begin_round(4)
    resumed.begin_round(4)
    for agent in range(2):
        name = team.policy_name(agent)
        assert_same_weights(
            weights(resumed.shadow.handles[name].model), weights(comp.shadow.handles[name].model)
        )
    assert same_samples(
        resumed.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=4, item_indices=[0]),
        comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=4, item_indices=[0]),
    )
    other_k = make_args(tmp_path, comparator_policy="history", comparator_history_k=3)
    with pytest.raises(
        ValueError, match="`comparator_history_k` is 3 but the checkpoint's history comparator used 2"
    ):
        build_comparator(other_k, context(resumed_team, other_k)).load_state_dict(state)


def test_history_of_lora_adapters_snapshots_only_the_adapters(tiny_model_path, tmp_path):
    from peft import LoraConfig

    config = LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    team = MultiAgentPolicy.lora(tiny_model_path, 2, config)
    args = make_args(tmp_path, comparator_policy="history")
    comp = build_comparator(args, context(team, args))
    assert all("lora_" in key for snapshot in comp.snapshots[0].values() for key in snapshot)
    before = {a: [p.detach().clone() for p in team.trainable_parameters(a)] for a in range(2)}
    for r in (1, 2):
        comp.begin_round(r)
        perturb(team, seed=30 + r)
        comp.end_round(r)
    comp.begin_round(3)  # the policy after round 1 is what was captured at end_round(1)
    for agent in range(2):
        name = team.policy_name(agent)
        shadow_params = dict(comp.shadow.handles[name].model.named_parameters(remove_duplicate=False))
        for (key, live), start in zip(team.named_trainable_parameters(agent), before[agent]):
            assert torch.equal(shadow_params[key], comp.snapshots[1][name][key])
            assert not torch.equal(shadow_params[key], start) and not torch.equal(shadow_params[key], live)
    out = comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=3, item_indices=[0])[0]
    assert [len(agent) for agent in out.candidates] == [3, 3]


# ------------------------------------------------------------------------------------------ model


@pytest.fixture()
def count_loads(monkeypatch):
    calls: list[str] = []
    real = model_source.load_model

    def counting(name, *args, **kwargs):
        calls.append(str(name))
        return real(name, *args, **kwargs)

    monkeypatch.setattr(model_source, "load_model", counting)
    return calls


def run_rounds(comp, rounds: int = 2):
    outs = []
    for r in range(1, rounds + 1):
        comp.begin_round(r)
        outs.append(comp.sample(ITEMS[:2], PROMPTS[:2], PARAMS, round_index=r, item_indices=[0, 1]))
        comp.end_round(r)
    return outs


def test_model_source_loads_each_model_once_and_matches_the_same_weights(
    team, tiny_model_path, tmp_path, count_loads
):
    args = make_args(tmp_path, comparator_policy="model", comparator_model_name=tiny_model_path)
    comp = build_comparator(args, context(team, args))
    assert isinstance(comp, ModelComparator)
    outs = run_rounds(comp)
    assert len(count_loads) == 1 and comp.loads == 1
    assert comp.policy_for(0) == comp.policy_for(1)
    assert all(not p.requires_grad for p in comp.handles[comp.policy_for(0)].model.parameters())
    # The comparator model has the actors' initial weights and tokenizer: it samples what current would.
    current = CurrentComparator(context(team, make_args(tmp_path)))
    assert same_samples(
        outs[1], current.sample(ITEMS[:2], PROMPTS[:2], PARAMS, round_index=2, item_indices=[0, 1])
    )
    assert all(out.same_tokenizer for out in outs[1])


def test_model_source_per_agent_with_another_vocabulary(team, tiny_model_path, tmp_path, count_loads):
    args = make_args(tmp_path, comparator_policy="model", comparator_agents=[tiny_model_path, "tiny"])
    comp = build_comparator(args, context(team, args))
    outs = run_rounds(comp, rounds=3)
    assert len(count_loads) == 2 and comp.policy_for(0) != comp.policy_for(1)
    assert comp.same_tokenizer_for(0) and not comp.same_tokenizer_for(1)
    # One agent's ids are in another vocabulary, so the trainer must tokenize the text.
    assert not any(out.same_tokenizer for round_outs in outs for out in round_outs)
    assert len(comp.handles[comp.policy_for(1)].tokenizer) == 1024


def test_model_source_accepts_objects_without_loading(team, tiny_model_path, tmp_path, count_loads):
    obj = load_model(tiny_model_path)
    pair = (load_model(tiny_model_path), load_tokenizer(tiny_model_path))
    args = make_args(tmp_path, comparator_policy="model", comparator_agents=[obj, pair])
    comp = build_comparator(args, context(team, args))
    run_rounds(comp, rounds=1)
    assert count_loads == [] and comp.loads == 0
    assert comp.handles[comp.policy_for(0)].model is obj and comp.handles[comp.policy_for(1)].model is pair[0]
    assert comp.same_tokenizer_for(0) and comp.same_tokenizer_for(1)
    bad = make_args(tmp_path, comparator_policy="model", comparator_agents=[obj, 3])
    with pytest.raises(TypeError, match="comparator model source for agent 1 must be"):
        build_comparator(bad, context(team, bad))


# ------------------------------------------------------------------------------------------ centralized


class HalfSplitAdapter:
    """A deterministic adapter for the random tiny model: joint text split at its middle; texts whose
    length is a multiple of 3 count as unparseable."""

    def __init__(self):
        self.built: list[tuple] = []

    def build_prompt(self, batch_item, agent_prompts):
        self.built.append((batch_item["id"], list(agent_prompts)))
        return "JOINT " + " || ".join(agent_prompts)

    def parse_completion(self, completion, batch_item, num_agents):
        if len(completion) % 3 == 0:
            raise CentralizedComparatorParseError("length divisible by 3")
        middle = len(completion) // 2
        return [completion[:middle], completion[middle:]]


@pytest.mark.parametrize("source", ["current", "history", "model"])
def test_centralized_generation_splits_joint_completions_and_drops_unparsed(
    team, tiny_model_path, tmp_path, source, caplog
):
    extra = {"comparator_model_name": tiny_model_path} if source == "model" else {}
    args = make_args(
        tmp_path,
        comparator_policy=source,
        comparator_generation_mode="centralized",
        comparator_centralized_agent_index=1,
        comparator_num_candidates=8,
        **extra,
    )
    adapter = HalfSplitAdapter()
    comp = build_comparator(args, context(team, args, centralized_adapter=adapter))
    comp.begin_round(1)
    with caplog.at_level(logging.WARNING):
        outputs = comp.sample(ITEMS[:2], PROMPTS[:2], PARAMS, round_index=1, item_indices=[4, 7])
    assert adapter.built == [(0, PROMPTS[0]), (1, PROMPTS[1])]
    total_unparsed = 0
    for out, prompts, item_index in zip(outputs, PROMPTS[:2], [4, 7]):
        # Independent computation: agent 1's model on the joint prompt, seeded with slot 1.
        request = GenerationRequest(
            "JOINT " + " || ".join(prompts),
            policy=team.policy_name(1),
            seed=comparator_seed(SEED, 1, item_index, 1),
        )
        [joint] = HFBackend(team.handles).generate([request], PARAMS.with_(n=8))
        keep = [j for j, c in enumerate(joint) if len(c.text) % 3 != 0]
        assert out.indices == keep and out.num_unparsed == 8 - len(keep)
        assert [c.token_ids for c in out.joint] == [joint[j].token_ids for j in keep]
        for pos, j in enumerate(keep):
            text = joint[j].text
            assert out.candidates[0][pos].text + out.candidates[1][pos].text == text
            assert out.candidates[0][pos].token_ids == []
        assert not out.same_tokenizer and out.joint_same_tokenizer and out.error is None
        total_unparsed += out.num_unparsed
    assert 0 < total_unparsed < 16  # the fixed seeds give both kept and dropped candidates
    assert sum("could not be parsed" in r.getMessage() for r in caplog.records) == total_unparsed


def test_centralized_adapter_contract_violations_are_errors(team, tmp_path):
    class Bad:
        def __init__(self, result):
            self.result = result

        def build_prompt(self, batch_item, agent_prompts):
            return "joint"

        def parse_completion(self, completion, batch_item, num_agents):
            return self.result

    args = make_args(tmp_path, comparator_generation_mode="centralized")
    for result, error, message in (
        ("one string", TypeError, "must return a sequence of 2 strings"),
        (["a", "b", "c"], ValueError, "must return exactly 2 outputs; got 3"),
    ):
        comp = build_comparator(args, context(team, args, centralized_adapter=Bad(result)))
        with pytest.raises(error, match=message):
            comp.sample(ITEMS[:1], PROMPTS[:1], PARAMS, round_index=1, item_indices=[0])

    class NoParser:
        def build_prompt(self, batch_item, agent_prompts):
            return "joint"

    with pytest.raises(TypeError, match="centralized_comparator_adapter.parse_completion must be callable"):
        build_comparator(args, context(team, args, centralized_adapter=NoParser()))
