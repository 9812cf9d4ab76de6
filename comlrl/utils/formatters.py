"""The public library's import path ``comlrl.utils.formatters``: ``build_formatters``, defined in
:mod:`comlrl.trainers.core.team_keywords`. For users' scripts only: no comlrl module imports from here.
"""

from comlrl.trainers.core.team_keywords import build_formatters

__all__ = ["build_formatters"]
