"""The public library's import path ``comlrl.utils.tokenizer_utils``: its tokenizer helpers, defined in
:mod:`comlrl.trainers.core.team_keywords`. For users' scripts only: no comlrl module imports from here.
"""

from comlrl.trainers.core.team_keywords import (
    apply_tokenizer_specials,
    ensure_pad_token,
    ensure_tokenizer,
    resolve_tokenizers,
)

__all__ = ["ensure_pad_token", "ensure_tokenizer", "resolve_tokenizers", "apply_tokenizer_specials"]
