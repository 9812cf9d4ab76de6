"""What every trainer shares, in both packages: the config base and its validators, the trainer base (loop,
checkpoints, resume, logging, ``save_model``, the team of models and tokenizers), the oracle, centralized
collaboration, the frozen reference model, critics and the RL stage. The trainer families
(``preference/``, ``reinforce/``, ``actor_critic/``) import from here and from the layers below
(``comlrl.rl``, ``comlrl.scoring``, ``comlrl.policy``, ``comlrl.rollout``), never from one another."""
