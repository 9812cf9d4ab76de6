"""Which instances each stage plays, and the check that training never sees an evaluation instance.

A seed names an instance. For a generated task (the games, Plan-Path) every seed makes one and the seed
is the instance, so training and evaluation seed ranges must not overlap. A dataset environment's seeds
index a split instead: the train split when a training stage builds it, the test split for evaluation
(:attr:`~pettingllms.envs.base.EnvConfig.purpose`). There the same seed names different problems in
training and evaluation, so the check compares what identifies an instance across purposes: its
:meth:`~pettingllms.envs.base.BaseEnv.instance_id` (a problem id) and, where the environment has
``instance_key(seed)``, the problem whatever split it was filed under (the code, math and search datasets:
the native id and the statement, :func:`~pettingllms.envs.records.problem_key`, so one file normalised as
two splits is caught though its ids carry the split). Every seed a stage plays must lie
in its split: ``at_grpo`` / ``grpo`` draw from ``train_seed_range``, which is clamped to the split with a
note (its default is far larger than a benchmark); ``sft``, ``madpo`` and ``marlhf`` play every seed of
theirs, and ``eval`` its ``num_instances`` (``null``: the whole split from ``seed_start``), so a seed past
the split is an error naming the key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pettingllms.config.env_section import env_arguments
from pettingllms.config.errors import ConfigError
from pettingllms.config.levels import level_turn_order

__all__ = [
    "SEEDED_TRAINING_STAGES",
    "SEED_KEYS",
    "check_disjoint_seeds",
    "check_held_out_instances",
    "clamp_to_instances",
    "played_seeds",
    "stage_env",
]

# The config key that says where each stage's seeds start (named in the disjointness errors).
SEED_KEYS: dict[str, str] = {
    "sft": "seed_start",
    "at_grpo": "train_seed_range",
    "grpo": "train_seed_range",
    "madpo": "seed_start",
    "marlhf": "seed_start",
    "eval": "seed_start",
}
SEEDED_TRAINING_STAGES = ("sft", "at_grpo", "grpo", "madpo", "marlhf")  # train on seeds of their own
_SAMPLED = ("at_grpo", "grpo")  # draw problems from a range instead of playing each seed once


def _workflow(config: Mapping[str, Any]) -> list[str]:
    return list(level_turn_order(config["policy"]["level"], config["env"]["turn_order"]))


def stage_env(config: Mapping[str, Any], purpose: str) -> Any:
    """The run's environment (its workflow's turn order) built for ``purpose`` (``train`` / ``eval``).
    A bad env section, or a dataset whose files are missing, is a ConfigError naming the section."""
    from pettingllms.registry import make_env

    name, fields, _ = env_arguments(config, _workflow(config), purpose)
    try:
        return make_env(name, fields)
    except (ValueError, TypeError, OSError) as exc:
        raise ConfigError(f"section `env` ({purpose}): {exc}") from exc


def _count(env: Any, purpose: str) -> int | None:
    """``env.num_instances()`` (None for generated tasks or an environment without the method)."""
    counter = getattr(env, "num_instances", None)
    if counter is None:
        return None
    try:
        return counter()
    except (ValueError, OSError) as exc:  # a dataset file that is missing or does not parse
        raise ConfigError(f"section `env` ({purpose}): {exc}") from exc


def _int(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"`{key}` must be an integer >= 0, got {value!r}")
    return value


def check_disjoint_seeds(
    train: Iterable[int], held_out: Iterable[int], train_name: str = "train seeds", held_out_name: str = "eval seeds"
) -> None:
    """Raise ValueError when an instance seed is in both ranges (naming both and the first shared ones)."""
    train, held_out = _as_seeds(train), _as_seeds(held_out)
    if isinstance(train, range) and isinstance(held_out, range) and train.step == held_out.step == 1:
        shared = list(range(max(train.start, held_out.start), min(train.stop, held_out.stop))[:5])
    else:
        shared = sorted(set(train) & set(held_out))[:5]
    if shared:
        raise ValueError(
            f"{train_name} and {held_out_name} must be disjoint; both contain {shared} "
            f"({train_name}: {_describe(train)}, {held_out_name}: {_describe(held_out)})"
        )


def _as_seeds(seeds: Iterable[int]) -> range | list[int]:
    return seeds if isinstance(seeds, range) else list(seeds)


def _describe(seeds: Iterable[int]) -> str:
    if isinstance(seeds, range):
        return f"[{seeds.start}, {seeds.stop})"
    values = list(seeds)
    return f"{len(values)} seeds in [{min(values)}, {max(values)}]" if values else "none"


def clamp_to_instances(seeds: range, count: int | None) -> range:
    """``seeds`` cut to the ``count`` instances a dataset holds (unchanged for generated tasks)."""
    return seeds if count is None else range(seeds.start, min(seeds.stop, count))


def played_seeds(config: Mapping[str, Any], stage: str, count: int | None = None) -> range:
    """The seeds ``stage`` plays under ``config``; ``count``: the number of instances of the split it plays
    (None: generated). ``at_grpo`` / ``grpo``'s ``train_seed_range`` is clamped to ``count``; any other
    stage's seeds must lie within it, and ``eval.num_instances: null`` means every instance from
    ``eval.seed_start`` (a ConfigError for generated tasks, which have no end)."""
    section = config[stage]
    if stage in _SAMPLED:
        value = section["train_seed_range"]
        ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value) and 0 <= value[0] < value[1]
        if not ok:
            raise ConfigError(f"`{stage}.train_seed_range` must be [start, stop) with 0 <= start < stop, got {value!r}")
        seeds = clamp_to_instances(range(value[0], value[1]), count)
        if not seeds:
            raise ConfigError(
                f"`{stage}.train_seed_range` {list(value)} starts past the {count} instances of the split training plays"
            )
        return seeds
    count_key = "num_instances" if stage == "eval" else "num_problems"
    start = _int(section["seed_start"], f"{stage}.seed_start")
    number = section[count_key]
    if number is None and stage == "eval":
        if count is None:
            raise ConfigError(
                "`eval.num_instances` is null (every instance of a dataset), but this environment generates its "
                "instances: give a number"
            )
        if start >= count:
            raise ConfigError(f"`eval.seed_start` {start} is past the {count} instances of the split evaluation plays")
        return range(start, count)
    number = _int(number, f"{stage}.{count_key}")
    seeds = range(start, start + number)
    if count is not None and seeds.stop > count:
        raise ConfigError(
            f"`{stage}.seed_start` / `{stage}.{count_key}` play seeds {seeds.start}..{seeds.stop - 1}, but the split "
            f"{'evaluation' if stage == 'eval' else 'training'} plays holds {count} instances (seeds 0..{count - 1})"
        )
    return seeds


def _identities(env: Any, seeds: range, count: int | None) -> dict[Any, str]:
    """What identifies each instance of ``seeds`` -> its label: its instance id and, where the environment
    gives one, its ``instance_key`` (the same problem under another split's id)."""
    if count is None and not hasattr(env, "instance_id"):
        return {("id", seed): str(seed) for seed in seeds}
    key_of = getattr(env, "instance_key", None)
    out: dict[Any, str] = {}
    for seed in seeds:
        label = str(env.instance_id(seed))
        out[("id", label)] = label
        key = key_of(seed) if key_of is not None else None
        if key is not None:
            out[("problem", key)] = label
    return out


def _shared(train: dict[Any, str], held_out: dict[Any, str]) -> list[str]:
    """The training instances that are evaluation instances, as their labels (``train = eval`` where the two
    name one problem differently)."""
    labels = {train[k] if train[k] == held_out[k] else f"{train[k]} = {held_out[k]}" for k in train.keys() & held_out.keys()}
    return sorted(labels)


def check_held_out_instances(config: Mapping[str, Any], stages: Sequence[str] | None = None) -> dict[str, range]:
    """Check that no training stage of the pipeline plays an instance an evaluation plays (every benchmark
    of ``eval.benchmarks``, :mod:`pettingllms.config.benchmarks`), and that every stage's seeds fit its split.
    Returns ``{stage: seeds}`` for the stages checked (default: the pipeline's; ``eval``: the first
    benchmark's). A ConfigError names the keys and a few shared instances."""
    from pettingllms.config.benchmarks import benchmark_configs

    stages = list(dict.fromkeys(config["pipeline"] if stages is None else stages))
    train: dict[str, Any] = {}

    def train_split() -> tuple[Any, int | None]:
        if not train:
            train["env"] = stage_env(config, "train")
            train["count"] = _count(train["env"], "train")
        return train["env"], train["count"]

    seeds: dict[str, range] = {}
    for stage in stages:
        if stage in SEEDED_TRAINING_STAGES:
            seeds[stage] = played_seeds(config, stage, train_split()[1])
    if "eval" not in stages:
        return seeds
    for benchmark in benchmark_configs(config):
        where = "" if benchmark.name is None else f"`eval.benchmarks.{benchmark.name}`: "
        try:
            eval_env = stage_env(benchmark.config, "eval")
            eval_count = _count(eval_env, "eval")
            eval_seeds = played_seeds(benchmark.config, "eval", eval_count)
        except ConfigError as exc:
            raise ConfigError(f"{where}{exc}") from exc
        seeds.setdefault("eval", eval_seeds)
        _check_disjoint(config, stages, seeds, train_split, eval_env, eval_count, eval_seeds, where)
    return seeds


def _check_disjoint(config: Mapping[str, Any], stages: Sequence[str], seeds: Mapping[str, range], train_split: Any,
                    eval_env: Any, eval_count: int | None, eval_seeds: range, where: str) -> None:
    """No training stage's instance is one of ``eval_seeds`` (one benchmark's)."""
    held_out = None
    for stage in stages:
        if stage not in SEEDED_TRAINING_STAGES:
            continue
        train_env, train_count = train_split()
        if train_count is None and eval_count is None:  # generated tasks: the seed is the instance
            try:
                check_disjoint_seeds(seeds[stage], eval_seeds, f"{stage} seeds", "eval seeds")
            except ValueError as exc:
                raise ConfigError(f"{where}`{stage}.{SEED_KEYS[stage]}` / `eval.seed_start`: {exc}") from exc
            continue
        if held_out is None:
            held_out = _identities(eval_env, eval_seeds, eval_count)
        shared = _shared(_identities(train_env, seeds[stage], train_count), held_out)
        if shared:
            # `a = b`: the same problem (native id and statement) under two split labels, e.g. one file made twice.
            hint = ("splits made from different problems" if any(" = " in label for label in shared)
                    else "different splits: `env.train_split` / `env.split`")
            raise ConfigError(
                f"{where}`{stage}.{SEED_KEYS[stage]}` / `eval.seed_start`: the {stage} instances and the eval instances "
                f"must be disjoint; both hold {len(shared)} instance(s), e.g. {shared[:3]} (train and evaluate "
                f"on {hint})"
            )
