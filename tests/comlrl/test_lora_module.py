"""The LoRA helpers live in :mod:`comlrl.models.lora`, below both the rollout and the policy layers;
:mod:`comlrl.policy.lora` still publishes the same objects."""

from __future__ import annotations

import comlrl.models.lora as home
import comlrl.policy.lora as published


def test_policy_lora_reexports_the_same_objects():
    assert published.__all__
    for name in published.__all__:
        assert getattr(published, name) is getattr(home, name), name
