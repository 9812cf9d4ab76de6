"""One strict reader (``comlrl.validation.strict_arguments``) under both packages' configs: comlrl's
``from_dict`` and pettingllms' ``section_to_dataclass`` find the same unknown keys, missing fields and
guesses, and differ only in wording (the section names its dotted keys)."""

from __future__ import annotations

import dataclasses

import pytest

from comlrl.validation import (
    MissingFieldsError,
    StrictFromDict,
    UnknownFieldsError,
    strict_arguments,
    strict_from_dict,
)
from pettingllms.config import ConfigError, section_to_dataclass


@dataclasses.dataclass
class Knobs(StrictFromDict):
    steps: int
    learning_rate: float = 0.1
    names: tuple[str, ...] = ("a",)


def test_unknown_keys_come_with_their_order_the_fields_and_the_guesses():
    with pytest.raises(UnknownFieldsError) as info:
        strict_arguments(Knobs, {"zzz": 1, "learning_rat": 0.2, "steps": 1})
    error = info.value
    assert isinstance(error, ValueError)
    assert (error.unknown, error.known, error.guesses) == (
        ["zzz", "learning_rat"], ["steps", "learning_rate", "names"], {"learning_rat": "learning_rate"}
    )


def test_both_wordings_of_one_unknown_key():
    values = {"steps": 1, "learning_rat": 0.2}
    with pytest.raises(ValueError) as comlrl:
        Knobs.from_dict(values)
    assert str(comlrl.value) == (
        "unknown Knobs field(s) ['learning_rat']; known fields: ['steps', 'learning_rate', 'names']; "
        "did you mean `learning_rate` for `learning_rat`?"
    )
    with pytest.raises(ConfigError) as section:
        section_to_dataclass(Knobs, values, "train")
    assert str(section.value) == (
        "unknown key `train.learning_rat` for Knobs; did you mean `train.learning_rate`? known keys of `train`: "
        "['learning_rate', 'names', 'steps']"
    )


def test_required_fields_and_tuples_are_the_sections_options():
    assert strict_arguments(Knobs, {"steps": 1, "names": ["x"]}) == {"steps": 1, "names": ["x"]}
    assert strict_arguments(Knobs, {"steps": 1, "names": ["x"]}, tuples=True) == {"steps": 1, "names": ("x",)}
    with pytest.raises(MissingFieldsError, match=r"\['steps'\]"):
        strict_arguments(Knobs, {}, required=True)
    with pytest.raises(TypeError):  # from_dict leaves a missing field to the class, as before
        strict_from_dict(Knobs, {})
    with pytest.raises(ConfigError, match=r"missing key `train.steps` \(required by Knobs\)"):
        section_to_dataclass(Knobs, {}, "train")
    assert section_to_dataclass(Knobs, {"steps": 2, "names": ["x"]}, "train") == Knobs(2, 0.1, ("x",))
