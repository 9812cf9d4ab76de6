"""The public library's import path ``comlrl.utils.distributed``: ``DistributedContext``, ``local_context``
and ``unwrap_model``, defined in :mod:`comlrl.distributed`. For users' scripts only: no comlrl module
imports from here.
"""

from comlrl.distributed import DistributedContext, local_context, unwrap_model

__all__ = ["DistributedContext", "local_context", "unwrap_model"]
