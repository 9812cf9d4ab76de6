"""Run configs: one YAML per task and policy level, ``base:`` inheritance, ``section.key=value`` overrides.

>>> from pettingllms.config import load_config
>>> config = load_config("plan_path/L1", ["env.rows=5", "sft.num_train_epochs=2"])
>>> config["env"]["rows"], config["policy"]["agents"]
(5, {'tool': 'shared', 'plan': 'shared'})
"""

from pettingllms.config.loader import (
    CONFIG_DIR,
    LEVELS,
    STAGES,
    ConfigError,
    env_arguments,
    find_config,
    load_config,
    save_resolved_config,
    section_to_dataclass,
    shipped_configs,
    validate_config,
)

__all__ = [
    "CONFIG_DIR",
    "LEVELS",
    "STAGES",
    "ConfigError",
    "env_arguments",
    "find_config",
    "load_config",
    "save_resolved_config",
    "section_to_dataclass",
    "shipped_configs",
    "validate_config",
]
