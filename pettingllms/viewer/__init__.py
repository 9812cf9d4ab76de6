"""The episode viewer: transcripts of a run rendered turn by turn (``pettingllms show``).

- :mod:`~pettingllms.viewer.episodes`: episodes out of transcript records (:func:`group_episodes`), and the
  transcript files of a run by stage (:func:`find_transcripts`);
- :mod:`~pettingllms.viewer.text`: an episode as plain text (:func:`episode_text`);
- :mod:`~pettingllms.viewer.html`: an episode as one self-contained HTML page (:func:`episode_html`);
- :mod:`~pettingllms.viewer.browser`: a page loaded in headless Chromium, its console errors and a screenshot.

>>> from pettingllms.viewer import episode_text, group_episodes, read_records
>>> episodes = group_episodes(read_records("runs/quickstart/eval/rollouts.jsonl"))  # doctest: +SKIP
>>> print(episode_text(episodes[0]))  # doctest: +SKIP
"""

from pettingllms.viewer.episodes import Decision, Episode, find_transcripts, group_episodes, read_records
from pettingllms.viewer.html import episode_html
from pettingllms.viewer.text import episode_text, listing_text

__all__ = [
    "Decision",
    "Episode",
    "episode_html",
    "episode_text",
    "find_transcripts",
    "group_episodes",
    "listing_text",
    "read_records",
]
