"""What every trainer shares, in both packages: the config base and its validators, the trainer base (loop,
checkpoints, resume, logging, ``save_model``, the team of models and tokenizers), the oracle, centralized
collaboration, the frozen reference model and the optimizer steps. The online RL layer (RL stage, critics,
multi-turn episodes, the MAGRPO / IAC / MAAC base) is ``comlrl.trainers.online_rl``, built on this one. The
trainer families (``preference/``, ``reinforce/``, ``actor_critic/``) import from here, from ``online_rl``
and from the layers below (``comlrl.validation``, ``comlrl.rl``, ``comlrl.scoring``, ``comlrl.policy``,
``comlrl.rollout``), never from one another.

The public CoMLRL library's helpers live here too, with its meanings (``reward_functions``, ``team_keywords``,
``device_scheduler``, ``reference_kl``); its import paths ``comlrl.utils`` and ``comlrl.schedulers`` re-export
them (docs/compatibility.md, section 8)."""
