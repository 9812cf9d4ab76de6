"""The public library's import path ``comlrl.utils``. None of its names has a counterpart here that means
the same thing, so none is provided (never a stand-in that pretends): the public helpers are internals of
its trainers (tokenizer, formatter, model-source and device plumbing, reference-model copies, its checkpoint
format), and comlrl's trainers do the same work inside :mod:`comlrl.trainers.core`. docs/compatibility.md
(section 8) lists every public name with what to use instead; for example, declare a reward range with
``reward_func.reward_range = (low, high)`` and pass any callable as ``reward_processor``.
"""

__all__ = []
