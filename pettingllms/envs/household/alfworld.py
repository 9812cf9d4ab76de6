"""The ``alfworld`` source: ALFWorld's TextWorld games, played through ALFWorld's public Python API.

Requirements (an optional extra, kept out of CI): the ``alfworld`` package (``pip install alfworld``; its
``textworld[pddl]`` dependency builds ``fast-downward-textworld`` from source, which needs a C++ toolchain
and CMake) and ALFWorld's game files, which ``alfworld-download`` fetches into ``$ALFWORLD_DATA`` (default
``~/.cache/alfworld``) or ``env.alfworld_data`` names. Nothing here is imported until the source is used;
a missing package or missing data is a :class:`HouseholdSetupError` (a ``ValueError``, so the command line
reports it in one line) naming what to install or set.

What is used, as ALFWorld documents it:

- the game files: ``alfworld.agents.environment.alfred_tw_env.AlfredTWEnv(config, train_eval)`` collects
  the solvable games (``game.tw-pddl``) of a split (``json_2.1.1/train``, ``valid_seen``,
  ``valid_unseen``) and task types exactly as ALFWorld's own training does; the seeds index them in sorted
  order;
- one game: ``textworld.start(game_file, request_infos, wrappers=[AlfredDemangler(shuffle=False),
  AlfredInfos, AlfredExpert(expert_type=...)])``, the wrappers ``AlfredTWEnv.init_env`` puts around every
  game, with admissible commands, the win, the facts and ALFWorld's expert plan (``extra.expert_plan``:
  the ``handcoded`` expert's next command, or the ``planner`` expert's whole plan, which needs
  fast-downward).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
from pathlib import Path
from typing import Any

__all__ = ["ALFWORLD_INSTALL", "ALFWORLD_SPLITS", "TASK_TYPES", "HouseholdSetupError", "data_root", "game_files",
           "require_alfworld", "start_game"]

ALFWORLD_INSTALL = (
    "pip install alfworld (its textworld[pddl] extra builds fast-downward-textworld from source: a C++ "
    "compiler and CMake), then run `alfworld-download` and set ALFWORLD_DATA"
)
#: ALFWorld's split folders and the ``train_eval`` name ``AlfredTWEnv`` gives each.
ALFWORLD_SPLITS: dict[str, str] = {
    "train": "train", "valid_seen": "eval_in_distribution", "valid_unseen": "eval_out_of_distribution",
}
#: ALFWorld's task types by id (``env.task_types`` in its configs).
TASK_TYPES: dict[int, str] = {
    1: "pick_and_place_simple", 2: "look_at_obj_in_light", 3: "pick_clean_then_place_in_recep",
    4: "pick_heat_then_place_in_recep", 5: "pick_cool_then_place_in_recep", 6: "pick_two_obj_and_place",
}
EXPERTS: tuple[str, ...] = ("handcoded", "planner")


class HouseholdSetupError(ValueError):
    """A source's package or data is missing (the message is one line naming what to install or set)."""


def require_alfworld() -> Any:
    """ALFWorld's TextWorld environment module, or a :class:`HouseholdSetupError` saying how to install it."""
    try:
        from alfworld.agents.environment import alfred_tw_env
    except ImportError as exc:
        raise HouseholdSetupError(
            f"env.source=alfworld needs the `alfworld` package, which is not installed ({exc}): {ALFWORLD_INSTALL}"
        ) from exc
    return alfred_tw_env


def data_root(configured: str | None) -> Path:
    """``configured`` (``env.alfworld_data``), else ``$ALFWORLD_DATA``, else ``~/.cache/alfworld``."""
    return Path(configured or os.environ.get("ALFWORLD_DATA") or Path.home() / ".cache" / "alfworld")


def _alfred_config(root: Path, split: str, task_types: tuple[int, ...]) -> dict[str, Any]:
    """The keys of ALFWorld's ``base_config.yaml`` that ``AlfredTWEnv`` reads to collect a split's games."""
    folder = root / "json_2.1.1"
    return {
        "dataset": {"data_path": str(folder / "train"), "eval_id_data_path": str(folder / "valid_seen"),
                    "eval_ood_data_path": str(folder / "valid_unseen"), "num_train_games": -1, "num_eval_games": -1},
        "env": {"type": "AlfredTWEnv", "goal_desc_human_anns_prob": 0.0, "task_types": list(task_types),
                "domain_randomization": False, "expert_type": "handcoded"},
        "general": {"training_method": "dagger"},
        "dagger": {"training": {"max_nb_steps_per_episode": 50}},
    }


def game_files(configured_root: str | None, split: str, task_types: tuple[int, ...]) -> tuple[str, ...]:
    """The solvable ALFWorld games of ``split`` and ``task_types``, sorted (the seeds index them)."""
    if split not in ALFWORLD_SPLITS:
        raise HouseholdSetupError(f"`alfworld` split must be one of {list(ALFWORLD_SPLITS)}, got {split!r}")
    root = data_root(configured_root).expanduser().resolve()
    return _game_files(str(root), split, tuple(task_types))


@functools.lru_cache(maxsize=8)
def _game_files(root: str, split: str, task_types: tuple[int, ...]) -> tuple[str, ...]:
    module = require_alfworld()
    folder = Path(root) / "json_2.1.1" / split
    if not folder.is_dir():
        raise HouseholdSetupError(
            f"no ALFWorld games at {folder}: run `alfworld-download` (it writes them into $ALFWORLD_DATA), or set "
            f"ALFWORLD_DATA / env.alfworld_data to the folder that holds json_2.1.1"
        )
    with contextlib.redirect_stdout(io.StringIO()):  # AlfredTWEnv prints its progress
        collector = module.AlfredTWEnv(_alfred_config(Path(root), split, task_types), train_eval=ALFWORLD_SPLITS[split])
    files = tuple(sorted(str(Path(f).resolve()) for f in collector.game_files))
    if not files:
        raise HouseholdSetupError(
            f"ALFWorld's {split!r} split at {folder} holds no solvable game of task types {list(task_types)}: "
            "check the download (`alfworld-download`) or `env.alfworld_task_types`"
        )
    return files


def start_game(path: str, expert: str) -> Any:
    """A live TextWorld environment of ALFWorld game ``path`` with ALFWorld's wrappers (see the module
    docstring), as ``AlfredTWEnv.init_env`` wraps each game; ``expert``: ``handcoded`` or ``planner``."""
    import textworld

    module = require_alfworld()
    if expert not in EXPERTS:
        raise HouseholdSetupError(f"`alfworld_expert` must be one of {list(EXPERTS)}, got {expert!r}")
    infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=True, extras=["gamefile", "expert_plan"])
    wrappers = [module.AlfredDemangler(shuffle=False), module.AlfredInfos, module.AlfredExpert(expert_type=expert)]
    return textworld.start(path, request_infos=infos, wrappers=wrappers)
