"""The error every config check raises (:mod:`pettingllms.config.loader` re-exports it)."""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A config file or override that names an unknown key, has a wrong type or an invalid value."""
