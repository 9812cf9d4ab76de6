"""What every trainer shares, in both packages: the config base and its validators, the trainer base (loop,
checkpoints, resume, logging, ``save_model``, the team of models and tokenizers), the oracle, centralized
collaboration, the frozen reference model, critics and the RL stage. The trainer families
(``preference/``, ``reinforce/``, ``actor_critic/``) import from here and from the layers below
(``comlrl.rl``, ``comlrl.scoring``, ``comlrl.policy``, ``comlrl.rollout``), never from one another.

The public CoMLRL library's helpers live here too, with its meanings (``reward_functions``, ``team_keywords``,
``device_scheduler``, ``reference_kl``); its import paths ``comlrl.utils`` and ``comlrl.schedulers`` re-export
them (docs/compatibility.md, section 8)."""
