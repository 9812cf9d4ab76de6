"""The public library's import path ``comlrl.trainers.preference.centralized``: the centralized adapter
protocol, the default tagged adapter and its parse error, defined in :mod:`comlrl.trainers.core.centralized`
(the public names, the same meanings). For users' scripts only: no comlrl module imports from here.
"""

from comlrl.trainers.core.centralized import (
    CentralizedComparatorAdapter,
    CentralizedComparatorParseError,
    TaggedCentralizedComparatorAdapter,
)

__all__ = [
    "CentralizedComparatorAdapter",
    "CentralizedComparatorParseError",
    "TaggedCentralizedComparatorAdapter",
]
