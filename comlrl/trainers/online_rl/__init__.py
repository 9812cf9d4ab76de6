"""The online RL family on the task reward: the RL stage (:mod:`.policy_learning`), its critics, multi-turn
episodes, the trainer base of MAGRPO (``reinforce/``), IAC and MAAC (``actor_critic/``) and its config base.
MARLHF's RL stage runs the same :class:`~comlrl.trainers.online_rl.policy_learning.PolicyLearner`. It imports
from ``core`` and the layers below, never from the trainer families."""
