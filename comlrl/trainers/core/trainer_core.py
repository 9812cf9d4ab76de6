"""The base of every trainer in both packages: where the run writes, its metrics log, exact checkpoints in the
standard layout of :mod:`comlrl.checkpoint`, resume lookup, ``save_model`` and progress bars.

:class:`TrainerCore` knows nothing of any trainer's constructor keywords or config class; a trainer tells it
what it needs through the override points listed on the class. Pieces a trainer is composed of (the RL stage,
the preference rounds) are :class:`TrainerPart` objects registered with :meth:`TrainerCore.add_part`: each
keeps its own share of every checkpoint and hears when a fresh run starts, so no mixin is needed to thread
them through the checkpoint hooks.

A checkpoint holds, besides weights, optimizers, schedulers and every random stream:
``trainer_state.json`` with the step, :attr:`TrainerCore.data_cursor`, the metrics so far and ``extra`` (the
trainer's :meth:`TrainerCore.state_extra`, then each part's JSON state under its ``state_key``), and one
``extra/<name>/`` folder per payload (the trainer's :meth:`TrainerCore.checkpoint_payloads`, then the parts').
Loading restores in the same order, weights and random streams first. A resume first removes what writes
interrupted by a kill left in :attr:`TrainerCore.output_dir` (:func:`comlrl.atomic_io.remove_stale_temporaries`)
and checks the whole checkpoint before it changes anything (:func:`comlrl.checkpoint.verify_checkpoint`).

Data parallel (:mod:`comlrl.distributed`: ``accelerate launch`` / ``torchrun``): every rank calls
:meth:`TrainerCore.save_checkpoint`, :meth:`TrainerCore.load_checkpoint` and :meth:`TrainerCore.save_model`.
A save first runs :meth:`TrainerCore.prepare_checkpoint` on every rank (collectives: what rank 0's write
gathers from the others, e.g. FSDP's whole optimizer states), then rank 0 alone writes while the others wait
at a barrier; a load runs on rank 0 first (it tidies the folder), then on the others.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from comlrl import distributed as dist
from comlrl.atomic_io import remove_stale_temporaries
from comlrl.checkpoint import (
    TrainerState,
    find_checkpoint,
    load_checkpoint,
    read_trainer_state,
    save_checkpoint,
    verify_checkpoint,
)
from comlrl.policy import MultiAgentPolicy
from comlrl.seeding import seed_everything

__all__ = ["TrainerCore", "TrainerPart"]

Payloads = dict[str, Callable[[Path], None]]


class TrainerPart:
    """A component a trainer is composed of. Override what applies; every hook does nothing by default.

    - :meth:`on_fresh_run`: a fresh (not resumed) run is about to start;
    - :attr:`state_key`, :meth:`state_dict`, :meth:`load_state_dict`: JSON state kept in
      ``trainer_state.json`` under ``extra[state_key]`` (None: the part keeps none);
    - :meth:`payloads`, :meth:`restore`: files kept in ``extra/<name>/`` folders of a checkpoint;
    - :meth:`gather`, :meth:`release`: on every rank around rank 0's write of a checkpoint (data parallel:
      collectives that collect what :meth:`payloads` or the optimizers' state dicts need, then free it).
    """

    state_key: str | None = None

    def on_fresh_run(self) -> None:
        """A fresh run starts (not called on resume)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` output (``{}`` when the checkpoint has none)."""

    def payloads(self) -> Payloads:
        """``{name: writer(folder)}``, each writing into its checkpoint folder ``extra/<name>/``."""
        return {}

    def restore(self, checkpoint: Path) -> None:
        """Read back what :meth:`payloads` wrote (after the weights and every JSON state)."""

    def gather(self) -> None:
        """Every rank, before rank 0 writes a checkpoint (collectives allowed)."""

    def release(self) -> None:
        """Every rank, once rank 0 has written the checkpoint (frees what :meth:`gather` collected)."""


class TrainerCore:
    """Output folder, metrics log, checkpoints, resume, ``save_model`` and progress bars of a trainer.

    Call ``TrainerCore.__init__`` first in the constructor; set :attr:`policy` (a
    :class:`~comlrl.policy.MultiAgentPolicy`) before saving anything. Override points:

    - :attr:`output_dir` (required): where checkpoints, ``save_model`` and the metrics go by default;
    - :meth:`new_metrics_logger`: the :class:`~comlrl.reporting.MetricsLogger`, built on first use;
    - :meth:`checkpoint_step`: the step a checkpoint is named after when none is given;
      :meth:`restore_checkpoint_step`: the step of the checkpoint being loaded;
    - :meth:`checkpoint_optimizers`, :meth:`checkpoint_schedulers`: named, saved and restored in place;
    - :meth:`state_extra` / :meth:`load_state_extra`: the trainer's own JSON state;
    - :meth:`checkpoint_payloads` / :meth:`restore_payloads`: the trainer's own payload folders;
    - :meth:`check_checkpoint`: refuse a checkpoint before anything is loaded from it;
    - :meth:`checkpoint_total_limit`: how many checkpoints a save keeps when the caller gives no limit;
    - :meth:`prepare_checkpoint`: every rank, before rank 0 writes (default: each part's ``gather``);
    - :meth:`save_model_files`: what :meth:`save_model` writes besides the policy (rank 0);
    - :meth:`checkpoint_log_history` / :meth:`restore_log_history`: the metrics records a checkpoint keeps,
      and what the metrics log becomes on resume;
    - :meth:`run_seed`: the seed of the global random streams at a fresh run's start (default ``args.seed``);
    - :meth:`on_fresh_run`: a fresh run starts (call super: it seeds the global streams and tells the parts).

    Attributes: :attr:`data_cursor`, any JSON value locating the next batch (saved with every checkpoint);
    :attr:`verbose`, whether progress bars show.
    """

    policy: MultiAgentPolicy
    verbose: bool = True

    def __init__(self) -> None:
        self.data_cursor: dict[str, Any] = {}
        self._parts: list[TrainerPart] = []
        self._metrics_logger = None

    # ------------------------------------------------------------------------------------ override points
    @property
    def output_dir(self) -> Path:
        raise NotImplementedError

    def new_metrics_logger(self):
        """The metrics logger (called once, on first use of :attr:`metrics_logger`)."""
        from comlrl.reporting import MetricsLogger

        return MetricsLogger(self.output_dir)

    def checkpoint_step(self) -> int:
        raise NotImplementedError

    def restore_checkpoint_step(self, step: int) -> None:
        """The loaded checkpoint's step, given before its data cursor and JSON state (for trainers that keep
        their step outside the data cursor)."""

    def checkpoint_optimizers(self) -> Mapping[str, Any]:
        return {}

    def checkpoint_schedulers(self) -> Mapping[str, Any]:
        return {}

    def state_extra(self) -> dict[str, Any]:
        """The trainer's JSON state in ``trainer_state.json`` (subclasses add theirs and call super)."""
        return {}

    def load_state_extra(self, extra: Mapping[str, Any]) -> None:
        """Restore :meth:`state_extra` output (subclasses call super)."""

    def checkpoint_payloads(self) -> Payloads:
        """``{name: writer(folder)}`` payloads of the trainer itself (subclasses add theirs and call super)."""
        return {}

    def restore_payloads(self, checkpoint: Path) -> None:
        """Read back what :meth:`checkpoint_payloads` wrote (subclasses call super)."""

    def check_checkpoint(self, path: Path, saved: TrainerState) -> None:
        """Raise when the checkpoint at ``path`` cannot continue this trainer (nothing is loaded yet)."""

    def checkpoint_total_limit(self) -> int | None:
        """The checkpoints a save keeps when its caller gives no ``total_limit`` (None: all)."""
        return None

    def prepare_checkpoint(self) -> None:
        """Every rank, before rank 0 writes a checkpoint: collect what the write needs from the other ranks
        (subclasses add theirs and call super, which tells the parts)."""
        for part in self._parts:
            part.gather()

    def save_model_files(self, directory: Path) -> None:
        """Files :meth:`save_model` writes into ``directory`` after the policy (rank 0; subclasses add theirs)."""

    def checkpoint_log_history(self) -> list[dict]:
        """The metrics records a checkpoint keeps: by default everything the metrics logger holds."""
        return self.metrics_logger.history

    def restore_log_history(self, history: list[dict]) -> None:
        """The metrics log becomes the checkpoint's history (in memory and on disk)."""
        self.metrics_logger.rewrite(history)

    def run_seed(self) -> int | None:
        """The seed a fresh run seeds the global random streams with (default: ``args.seed``, the Hugging
        Face convention, where the trainer has ``args``); None leaves them alone."""
        return getattr(getattr(self, "args", None), "seed", None)

    def on_fresh_run(self) -> None:
        """A fresh (not resumed) run is about to start: the global random streams are seeded with
        :meth:`run_seed` (a resume restores them from its checkpoint instead), then every part hears it."""
        seed = self.run_seed()
        if seed is not None:
            seed_everything(seed)
        for part in self._parts:
            part.on_fresh_run()

    # ------------------------------------------------------------------------------------ parts
    def add_part(self, part: TrainerPart) -> Any:
        """Register ``part`` (checkpointed after the trainer's own state, in registration order); returns it."""
        self._parts.append(part)
        return part

    # ------------------------------------------------------------------------------------ metrics
    @property
    def metrics_logger(self):
        """The trainer's :class:`~comlrl.reporting.MetricsLogger`, created on first use."""
        if self._metrics_logger is None:
            self._metrics_logger = self.new_metrics_logger()
        return self._metrics_logger

    # ------------------------------------------------------------------------------------ checkpoints
    def save_checkpoint(
        self,
        output_dir: str | os.PathLike | None = None,
        *,
        step: int | None = None,
        total_limit: int | None = None,
    ) -> Path:
        """Write ``checkpoint-{step}/`` (default: :meth:`checkpoint_step`) under ``output_dir`` (default:
        :attr:`output_dir`) with everything needed to continue exactly; with ``total_limit`` (default:
        :meth:`checkpoint_total_limit`) the oldest others are deleted. Data parallel: every rank calls it,
        rank 0 writes, the others wait for it."""
        directory = Path(output_dir if output_dir is not None else self.output_dir)
        step = self.checkpoint_step() if step is None else step
        total_limit = self.checkpoint_total_limit() if total_limit is None else total_limit
        self.prepare_checkpoint()
        try:
            path = self._write_checkpoint(directory, int(step), total_limit) if dist.is_main_process() else None
        finally:
            for part in self._parts:
                part.release()
        dist.barrier()
        return path if path is not None else directory / f"checkpoint-{int(step)}"

    def _write_checkpoint(self, directory: Path, step: int, total_limit: int | None) -> Path:
        parts_state = {p.state_key: p.state_dict() for p in self._parts if p.state_key is not None}
        state = TrainerState(
            step=step,
            data_cursor=dict(self.data_cursor),
            log_history=list(self.checkpoint_log_history()),
            extra={**self.state_extra(), **parts_state},
        )
        payloads = dict(self.checkpoint_payloads())
        for part in self._parts:
            payloads.update(part.payloads())
        return save_checkpoint(
            directory,
            state,
            policy=self.policy,
            optimizers=self.checkpoint_optimizers(),
            schedulers=self.checkpoint_schedulers(),
            extra=payloads,
            save_total_limit=total_limit,
        )

    def find_checkpoint(
        self, path: str | os.PathLike | bool, directory: str | os.PathLike | None = None
    ) -> Path:
        """The checkpoint ``path`` names (:func:`comlrl.checkpoint.find_checkpoint`): a ``checkpoint-N``
        folder, a folder holding them (the latest), or True (the latest in ``directory``, default
        :attr:`output_dir`)."""
        return find_checkpoint(path, output_dir=self.output_dir if directory is None else directory)

    def load_checkpoint(self, path: str | os.PathLike | bool) -> TrainerState:
        """Restore a checkpoint written by :meth:`save_checkpoint` into this trainer: weights, optimizers,
        schedulers and random streams, then the step, the data cursor and JSON state, then the payloads,
        then the metrics log. Data parallel: rank 0 first (it clears stale temporaries), then the others."""
        state = self._load_checkpoint(path) if dist.is_main_process() else None
        dist.barrier()
        return state if state is not None else self._load_checkpoint(path)

    def _load_checkpoint(self, path: str | os.PathLike | bool) -> TrainerState:
        if self.output_dir.is_dir():
            remove_stale_temporaries(self.output_dir)
        path = self.find_checkpoint(path)
        if path.parent.resolve() != self.output_dir.resolve():  # checkpoints kept outside output_dir
            remove_stale_temporaries(path.parent, max_depth=0)
        verify_checkpoint(path)
        self.check_checkpoint(path, read_trainer_state(path))
        state = load_checkpoint(
            path,
            policy=self.policy,
            optimizers=self.checkpoint_optimizers(),
            schedulers=self.checkpoint_schedulers(),
        )
        self.restore_checkpoint_step(state.step)
        self.data_cursor = dict(state.data_cursor or {})
        self.load_state_extra(state.extra)
        for part in self._parts:
            if part.state_key is not None:
                part.load_state_dict(state.extra.get(part.state_key, {}))
        self.restore_payloads(path)
        for part in self._parts:
            part.restore(path)
        self.restore_log_history(state.log_history)
        return state

    # ------------------------------------------------------------------------------------ saving, progress
    def save_model(self, output_dir: str | os.PathLike | None = None) -> Path:
        """The policy (``MultiAgentPolicy.save``: one folder per policy and the layout), then
        :meth:`save_model_files`, in ``output_dir`` (default: :attr:`output_dir`). Data parallel: every rank
        calls it, rank 0 writes, the others wait for it."""
        directory = Path(output_dir if output_dir is not None else self.output_dir)
        if dist.is_main_process():
            directory.mkdir(parents=True, exist_ok=True)
            self.policy.save(directory)
            self.save_model_files(directory)
        dist.barrier()
        return directory

    @contextmanager
    def progress_bar(
        self, total: int | None = None, desc: str = "", unit: str = "it", initial: int = 0
    ) -> Iterator[Any]:
        """A tqdm bar starting at ``initial`` (e.g. a resumed step), hidden unless :attr:`verbose`; closed on
        exit."""
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, leave=False, disable=not self.verbose)
        try:
            yield bar
        finally:
            bar.close()
