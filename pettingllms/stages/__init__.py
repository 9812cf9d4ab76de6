"""The pipeline's stages, one module each, over one shared :mod:`~pettingllms.stages.context`:

- :mod:`pettingllms.stages.sft`: the oracle-demonstration warm start;
- :mod:`pettingllms.stages.at_grpo`: ``at_grpo`` and ``grpo`` (AT-GRPO with independent sampling);
- :mod:`pettingllms.stages.madpo` / :mod:`pettingllms.stages.marlhf`: comlrl's iterative preference
  trainers with the environment as the oracle (:mod:`pettingllms.stages.env_oracle`);
- :mod:`pettingllms.stages.eval`: held-out success, the one evaluation every stage and script uses.

:mod:`pettingllms.pipeline` plans, checks and runs them; :mod:`pettingllms.stages.preference` keeps the
``madpo`` / ``marlhf`` names it had.
"""
