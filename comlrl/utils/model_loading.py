"""The public library's import path ``comlrl.utils.model_loading``: ``infer_model_name`` and
``resolve_model_sources``, defined in :mod:`comlrl.trainers.core.team_keywords`. For users' scripts only:
no comlrl module imports from here.
"""

from comlrl.trainers.core.team_keywords import infer_model_name, resolve_model_sources

__all__ = ["infer_model_name", "resolve_model_sources"]
