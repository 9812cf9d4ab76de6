"""The LR schedule's keywords are checked with the config, without torch (comlrl.trainers.core.training_knobs):
the keyword table matches the installed transformers, a config refuses what transformers would refuse when the
scheduler is built, and what only building can tell is refused then, in the same words."""

from __future__ import annotations

import inspect
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from transformers.optimization import TYPE_TO_SCHEDULER_FUNCTION, SchedulerType

from comlrl.trainers.core.training_knobs import (
    LR_SCHEDULER_TYPES,
    SCHEDULE_KEYWORDS,
    build_lr_scheduler,
    check_schedule_keywords,
)
from comlrl.trainers.preference import MADPOConfig

# What get_scheduler passes itself, so a keyword of that name is no lr_scheduler_kwargs entry.
PASSED_BY_GET_SCHEDULER = {"optimizer", "num_warmup_steps", "num_training_steps"}


def settings(kind, kwargs=None, **extra):
    return SimpleNamespace(lr_scheduler_type=kind, lr_scheduler_kwargs=kwargs, warmup_steps=0, warmup_ratio=0.0, **extra)


def probe():
    return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)


@pytest.mark.parametrize("kind", LR_SCHEDULER_TYPES)
def test_the_keyword_table_is_the_installed_transformers(kind):
    assert set(SCHEDULE_KEYWORDS) == set(LR_SCHEDULER_TYPES)
    function = TYPE_TO_SCHEDULER_FUNCTION[SchedulerType(kind)]
    parameters = set(inspect.signature(function).parameters) - PASSED_BY_GET_SCHEDULER
    if SCHEDULE_KEYWORDS[kind] is None:  # get_scheduler calls these without the keywords
        build_lr_scheduler(settings(kind, {"anything": 1}), probe(), horizon=10)
    else:
        assert set(SCHEDULE_KEYWORDS[kind]) == parameters, kind


@pytest.mark.parametrize(
    ("kind", "kwargs"),
    [
        ("cosine", {"num_cyclez": 2}),
        ("linear", {"num_cycles": 2}),
        ("cosine_with_min_lr", None),
        ("cosine_warmup_with_min_lr", {"min_lr": 1e-7, "min_lr_rate": 0.1}),
        ("warmup_stable_decay", {}),
        ("warmup_stable_decay", {"num_decay_steps": 2, "decay_type": "cubic"}),
        ("warmup_stable_decay", {"num_decay_steps": 2, "warmup_type": "cubic"}),
    ],
)
def test_the_config_refuses_what_building_the_schedule_would(kind, kwargs):
    """Every keyword set the table refuses, transformers refuses too (the old probe's verdict), and the
    message names both fields."""
    with pytest.raises(ValueError, match=rf"`lr_scheduler_type` '{kind}' with `lr_scheduler_kwargs`=.* cannot be built"):
        check_schedule_keywords(settings(kind, kwargs))
    with pytest.raises(ValueError, match=rf"`lr_scheduler_type` '{kind}' with `lr_scheduler_kwargs`=.* cannot be built"):
        build_lr_scheduler(settings(kind, kwargs), probe(), horizon=10)


@pytest.mark.parametrize(
    ("kind", "kwargs"),
    [
        ("cosine", {"num_cycles": 2}),
        ("cosine_with_min_lr", {"min_lr": 1e-7}),
        ("cosine_warmup_with_min_lr", {"min_lr_rate": 0.1, "warmup_lr_rate": 0.01}),
        ("warmup_stable_decay", {"num_decay_steps": 2, "decay_type": "1-sqrt"}),
        ("polynomial", {"lr_end": 1e-8, "power": 2.0}),
        ("constant", {"whatever": 1}),
    ],
)
def test_the_config_accepts_what_builds(kind, kwargs):
    check_schedule_keywords(settings(kind, kwargs))
    build_lr_scheduler(settings(kind, kwargs), probe(), horizon=10)


def test_a_value_only_building_refuses_is_refused_when_the_trainer_builds_its_scheduler():
    """``lr_end`` must be below the optimizer's learning rate: the config (which has no optimizer) accepts it;
    building the schedule refuses it, naming both fields (this was the config's error while the config built
    a probe schedule with torch)."""
    config = MADPOConfig(lr_scheduler_type="polynomial", lr_scheduler_kwargs={"lr_end": 2.0})
    with pytest.raises(ValueError, match=r"`lr_scheduler_type` 'polynomial' with `lr_scheduler_kwargs`=\{'lr_end': 2.0\} "
                                         r"cannot be built: lr_end \(2.0\) must be smaller than initial lr"):
        build_lr_scheduler(config, probe(), horizon=10)


def test_a_config_with_a_schedule_is_checked_without_torch():
    code = (
        "import sys\n"
        "from comlrl.trainers.preference import MADPOConfig\n"
        "MADPOConfig(lr_scheduler_type='cosine_with_min_lr', lr_scheduler_kwargs={'min_lr': 1e-7})\n"
        "try:\n"
        "    MADPOConfig(lr_scheduler_type='cosine', lr_scheduler_kwargs={'num_cyclez': 2})\n"
        "except ValueError as error:\n"
        "    assert 'cannot be built' in str(error), error\n"
        "else:\n"
        "    raise AssertionError('accepted')\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
