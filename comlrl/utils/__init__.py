"""The public library's import path ``comlrl.utils``: its helpers, each defined where it belongs in comlrl
with the public meaning (docs/compatibility.md, section 8), and re-exported here and from the public
submodules (``comlrl.utils.reward_utils``, ``.reward_processor``, ``.reference_kl``, ``.formatters``,
``.model_loading``, ``.tokenizer_utils``, ``.distributed``). ``read_checkpoint_metadata`` is the one public
name left out: it reads the public library's ``training_state.pt``, a checkpoint format comlrl does not
write. For users' scripts only: no comlrl module imports from here.
"""

from comlrl.distributed import DistributedContext, local_context, unwrap_model
from comlrl.trainers.core.reference_kl import (
    clone_reference_models,
    load_reference_models_from_sources,
    reference_kl_coef,
    reference_kl_enabled,
    reference_kl_for_sequence,
    resolve_reference_devices,
    validate_reference_kl_config,
)
from comlrl.trainers.core.reward_functions import (
    RewardProcessors,
    call_reward_function,
    normalize_reward_lengths,
    resolve_reward_range,
    set_reward_range,
)
from comlrl.trainers.core.team_keywords import (
    apply_tokenizer_specials,
    build_formatters,
    ensure_pad_token,
    ensure_tokenizer,
    infer_model_name,
    resolve_model_sources,
    resolve_tokenizers,
)

__all__ = [
    "build_formatters",
    "ensure_pad_token",
    "ensure_tokenizer",
    "apply_tokenizer_specials",
    "resolve_tokenizers",
    "infer_model_name",
    "resolve_model_sources",
    "clone_reference_models",
    "load_reference_models_from_sources",
    "reference_kl_coef",
    "reference_kl_enabled",
    "reference_kl_for_sequence",
    "resolve_reference_devices",
    "validate_reference_kl_config",
    "RewardProcessors",
    "call_reward_function",
    "normalize_reward_lengths",
    "resolve_reward_range",
    "set_reward_range",
    "DistributedContext",
    "local_context",
    "unwrap_model",
]
