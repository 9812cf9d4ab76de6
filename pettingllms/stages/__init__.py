"""Pipeline stages that need more than a few lines: :mod:`pettingllms.stages.preference` (``madpo`` /
``marlhf`` through comlrl's iterative preference trainers, with the environment as the oracle). The other
stages live in :mod:`pettingllms.pipeline`."""
