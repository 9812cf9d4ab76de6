"""pettingllms show RUN_DIR [--stage NAME] [--episode N] [--html PATH]

Render one episode of a run's transcripts turn by turn: each agent's prompt, response and parsed action,
the environment's feedback, the state after its step (the environment's rendering and the fields the step
changed) and the reward parts (global x alpha + local = reward; in tree sampling the other candidates of
each decision point too). Plain text in the terminal, or with --html PATH one self-contained HTML page
(inline CSS, no script, nothing loaded from outside it).

RUN_DIR is a run folder (the rollouts.jsonl of its stage folders: at_grpo/, grpo/, eval/, eval_before/,
and eval_results/ where pettingllms eval wrote into it), a stage folder, or a rollouts.jsonl file. When it
holds transcripts of several stages, --stage NAME picks one; when the stage holds several episodes,
--episode N picks one (0 is the first, -1 the last). Without them, or with a stage or episode that is not
there, the command lists what there is and exits with status 2 naming the argument.

Transcripts are written by training (rollout.transcripts_rate: the share of episodes, default 0.05) and by
evaluation (eval.transcripts_rate, default 0; 1.0 writes every episode), each step with the state it left
(rollout.transcript_state_max_chars limits its size; a cut state is marked). Files written before states
were recorded still render, with "state not recorded".

Examples:
  pettingllms eval plan_path/L1 --policy oracle eval.num_instances=5 eval.transcripts_rate=1.0
  pettingllms show runs/plan_path_L1 --stage eval_results --episode 0
  pettingllms show runs/quickstart --stage at_grpo --episode -1 --html episode.html
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from pettingllms.scripts.guard import UsageError

__all__ = ["ChoiceError", "add_arguments", "main", "run", "select_episode"]


class ChoiceError(UsageError):
    """A stage or episode choice that is ambiguous or not there; ``listing`` holds what there is to choose
    from (printed before the error line)."""

    def __init__(self, message: str, listing: str) -> None:
        super().__init__(message)
        self.listing = listing


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run folder, a stage folder or a rollouts.jsonl file")
    parser.add_argument("--stage", default=None, metavar="NAME", help="the stage folder whose transcripts to show (e.g. at_grpo, eval)")
    parser.add_argument("--episode", type=int, default=None, metavar="N", help="the episode, 0 for the first, -1 for the last")
    parser.add_argument("--html", type=Path, default=None, metavar="PATH", help="write one self-contained HTML page instead of text")


def select_episode(run_dir: str | Path, stage: str | None = None, episode: int | None = None):
    """The :class:`~pettingllms.viewer.Episode` that ``RUN_DIR`` / ``--stage`` / ``--episode`` name.

    A choice that is ambiguous or not there is a :class:`ChoiceError` naming the argument, with the stages
    or episodes to choose from; any other bad input a :class:`UsageError`."""
    from pettingllms.viewer import find_transcripts, group_episodes, listing_text, read_records

    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise UsageError(f"`RUN_DIR` {run_dir} does not exist")
    found = find_transcripts(run_dir)
    if not found:
        raise UsageError(
            f"`RUN_DIR` {run_dir} holds no transcripts (rollouts.jsonl in it or in its stage folders); training "
            "writes them with rollout.transcripts_rate > 0, evaluation with eval.transcripts_rate > 0"
        )

    def episodes_of(name: str):
        try:
            return group_episodes(read_records(found[name]), stage=name, source=str(found[name]))
        except ValueError as error:
            raise UsageError(str(error)) from error

    if stage is None:
        if len(found) > 1:
            raise ChoiceError(
                f"`--stage` is needed: {run_dir} holds transcripts of {len(found)} stages ({', '.join(found)}), listed above",
                listing_text({name: episodes_of(name) for name in found}, episodes=False),
            )
        stage = next(iter(found))
    elif stage not in found:
        raise ChoiceError(
            f"`--stage` {stage!r} has no transcripts in {run_dir}; stages with transcripts: {', '.join(found)}",
            listing_text({name: episodes_of(name) for name in found}, episodes=False),
        )
    episodes = episodes_of(stage)
    if not episodes:
        raise UsageError(f"`--stage` {stage}: {found[stage]} holds no transcript records")
    if episode is None:
        if len(episodes) > 1:
            raise ChoiceError(
                f"`--episode` is needed: stage {stage} holds {len(episodes)} episodes (0..{len(episodes) - 1}), listed above",
                listing_text({stage: episodes}),
            )
        episode = 0
    if not -len(episodes) <= episode < len(episodes):
        raise ChoiceError(
            f"`--episode` {episode} is out of range: stage {stage} holds episodes 0..{len(episodes) - 1} "
            f"(or -{len(episodes)}..-1 from the end), listed above",
            listing_text({stage: episodes}),
        )
    return episodes[episode]


def run(args: argparse.Namespace) -> int:
    from comlrl.atomic_io import atomic_write_text
    from pettingllms.viewer import episode_html, episode_text
    from pettingllms.viewer.browser import SHARED_FILE_MODE

    try:
        chosen = select_episode(args.run_dir, args.stage, args.episode)
    except ChoiceError as error:
        print(error.listing, end="")
        raise
    if args.html is None:
        print(episode_text(chosen), end="")
        return 0
    if args.html.is_dir():
        raise UsageError(f"`--html` {args.html} is a folder; give the page's file name, e.g. {args.html / 'episode.html'}")
    args.html.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.html, episode_html(chosen))
    args.html.chmod(SHARED_FILE_MODE)  # a page to share or serve: readable by others, as `cp` would make it
    print(f"episode {chosen.index} of stage {chosen.stage} ({chosen.label()}: {chosen.outcome()}) -> {args.html}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from pettingllms.scripts.guard import script_main

    return script_main(argv, module="pettingllms.scripts.show", doc=__doc__, add_arguments=add_arguments, run=run)


if __name__ == "__main__":
    raise SystemExit(main())
