"""The public library's import path ``comlrl.utils.reference_kl``. Its helpers have no counterpart here that
means the same thing, so none is provided: the frozen reference models and their per-sequence KL are
:class:`comlrl.trainers.core.reference.ReferencePolicy` (``sequence_kl``, any of the k1 / k2 / k3
estimators of :mod:`comlrl.rl`), configured by the ``reference_kl_*`` and ``reference_devices`` config
fields. docs/compatibility.md (section 8) lists each public name.
"""

__all__ = []
