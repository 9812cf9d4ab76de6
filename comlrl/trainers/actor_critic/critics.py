"""Re-export: the critics live in :mod:`comlrl.trainers.online_rl.critics` (MARLHF's RL stage uses them too)."""

from comlrl.trainers.online_rl.critics import ValueModel, agent_critic_text, joint_critic_text

__all__ = ["ValueModel", "agent_critic_text", "joint_critic_text"]
