"""pettingllms: multi-agent LLM environments with shared state, and the system that trains on them.

Submodules are imported on demand (``import pettingllms`` stays light): :mod:`pettingllms.agents`
(the agent protocol), :mod:`pettingllms.envs` (environments), :mod:`pettingllms.registry` (names ->
environments, agents, env workers) and :mod:`pettingllms.scripted` (model-free scripted policies).
"""

__all__ = ["agents", "envs", "registry", "scripted"]
