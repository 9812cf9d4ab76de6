"""Entry points of the command line (``pettingllms <command>``), each also runnable on its own:

- :mod:`~pettingllms.scripts.train`: ``python -m pettingllms.scripts.train CONFIG [overrides]``;
- :mod:`~pettingllms.scripts.evaluate`: ``python -m pettingllms.scripts.evaluate CONFIG --checkpoint DIR``;
- :mod:`~pettingllms.scripts.dataprocess`: puzzle banks and oracle demonstration sets.

Each module has ``add_arguments(parser)``, ``run(args) -> exit code`` and ``main(argv)``.
"""


def quiet_model_io() -> None:
    """Hide transformers' per-file progress bars (loading and saving weights): the run's own bars and
    per-step table are what a user watches."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
