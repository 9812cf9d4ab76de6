"""The episode viewer (``pettingllms show``) on real runs' transcripts: Plan-Path, code and search episodes
written by ``pettingllms eval --policy ...`` with ``eval.transcripts_rate``, an AT-GRPO-style tree rollout,
and the pipeline's eval stage with a model. Each rendering, text and HTML, holds every prompt, response,
action, feedback, state and reward part of the episode's records; HTML escapes what the model wrote; old
transcripts without states still render; the state size limit cuts, marks and counts."""

from __future__ import annotations

import html
import json
import logging
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pettingllms.cli import main
from pettingllms.config import ConfigError, load_config, validate_config
from pettingllms.execution import EngineConfig, RolloutEngine
from pettingllms.execution.state_snapshots import cut_marker, limit_snapshot, snapshot_size
from pettingllms.execution.transcripts import TRANSCRIPT_FILE, episode_sampled
from pettingllms.stages.context import workflow_env
from pettingllms.stages.eval import eval_settings, scripted_router
from pettingllms.viewer import episode_html, episode_text, find_transcripts, group_episodes, read_records
from pettingllms.viewer.content import action_text, prompt_messages

EVAL_FLAGS = ["eval.transcripts_rate=1.0", "--no-progress"]


def eval_run(root: Path, config: str, policy: str, instances: int, *extra: str) -> Path:
    """``pettingllms eval CONFIG --policy POLICY`` into ``root``; the folder holding its transcripts."""
    code = main(["eval", config, "--policy", policy, f"eval.num_instances={instances}",
                 f"run.output_dir={root}", *EVAL_FLAGS, *extra])
    assert code == 0
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One evaluation per environment, every episode transcribed: Plan-Path with the random policy (several
    turns, blocked moves), HumanEval with the random coder / tester (oracle and wrong programs, judged in
    the sandbox), search with the oracle (two hops through the built-in BM25 retriever)."""
    root = tmp_path_factory.mktemp("viewer-runs")
    return {
        "plan_path": eval_run(root / "plan_path", "plan_path/L1", "random", 3),
        "code": eval_run(root / "code", "code/humaneval", "random", 2),
        "search": eval_run(root / "search", "search/L1", "oracle", 2),
    }


def fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def assert_renders_every_part(records: list[dict], text: str, page: str) -> None:
    """Every decision's prompt, response, action, feedback, state and reward parts are in the text and
    (escaped) in the page."""
    for record in records:
        parts = [content for _, content in prompt_messages(record["prompt"])]
        parts += [record["response"], record["feedback"]]
        if record["action"] is None:  # a response that did not parse: the parser's message
            assert record["parse_error"] and f"none (parse error: {record['parse_error']})" in text
            parts.append(record["parse_error"])
        else:
            parts.append(action_text(record))
        state = record["state"]
        assert state is not None and state["truncated_chars"] == 0
        if state["text"] is not None:
            parts.append(state["text"])
        parts += [value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                  for value in state["fields"].values()]
        for part in filter(None, parts):
            for line in part.splitlines():
                assert line.strip() in text, (record["turn"], record["role"], line)
            assert html.escape(part, quote=True) in page, (record["turn"], record["role"], part[:80])
        rewards = (f"global {fmt(record['global_reward'])} x alpha {fmt(record['alpha'])} + local "
                   f"{fmt(record['local_reward'])} = reward {fmt(record['reward'])}")
        assert rewards in text
        cells = "".join(f"<td>{fmt(record[k])}</td>" for k in ("global_reward", "alpha", "local_reward", "reward"))
        assert cells in page


@pytest.mark.parametrize("env", ["plan_path", "code", "search"])
def test_an_eval_episode_renders_prompts_responses_actions_states_and_rewards(runs, env):
    found = find_transcripts(runs[env])
    assert list(found) == ["eval_results"]  # pettingllms eval writes beside its report
    records = read_records(found["eval_results"])
    episodes = group_episodes(records, "eval_results", str(found["eval_results"]))
    assert len(episodes) == {"plan_path": 3, "code": 2, "search": 2}[env]
    for episode in episodes:
        assert episode.env == env and episode.mode == "independent" and episode.trajectory == 0
        mine = [d.record for d in episode.decisions]
        assert all(r["problem_id"] == episode.problem_id for r in mine)
        text, page = episode_text(episode), episode_html(episode)
        assert_renders_every_part(mine, text, page)
        assert episode.outcome() in text and html.escape(episode.outcome()) in page
        for decision in episode.decisions:
            assert f"Turn {decision.turn + 1} · {decision.role}" in text
    if env == "plan_path":  # the random policy plays the whole turn budget: several turns, later states differ
        assert max(e.turns for e in episodes) > 1
        assert "unchanged: " in episode_text(episodes[0])
    if env == "search":
        assert all(e.success for e in episodes)
        assert any("retrievals" in d.record["state"]["fields"] for d in episodes[0].decisions)


def test_the_show_command_prints_the_episode_and_writes_the_page(runs, tmp_path, capsys):
    assert main(["show", str(runs["search"]), "--episode", "-1"]) == 0
    out = capsys.readouterr().out
    last = group_episodes(read_records(find_transcripts(runs["search"])["eval_results"]))[-1]
    assert f"Episode {last.index} of stage eval_results: {last.label()}" in out
    assert last.decisions[-1].record["response"] in out
    page = tmp_path / "pages" / "search.html"
    assert main(["show", str(runs["search"]), "--episode", "0", "--html", str(page)]) == 0
    assert str(page) in capsys.readouterr().out
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in text
    assert page.stat().st_mode & 0o777 == 0o644  # readable by others: a page to share or serve
    # Self-contained: no script, no link, nothing fetched (the CSP forbids it too).
    assert "<script" not in text.lower() and "<link" not in text.lower() and "src=" not in text.lower()
    assert "http://" not in text and "https://" not in text


def test_ambiguous_or_missing_choices_list_what_there_is_and_name_the_argument(runs, tmp_path, capsys):
    run_dir = runs["plan_path"]
    assert main(["show", str(run_dir)]) == 2
    captured = capsys.readouterr()
    assert "`--episode` is needed" in captured.err and "3 episodes" in captured.err
    assert "stage eval_results: 3 episodes" in captured.out
    assert sum(line.strip().startswith(("0 ", "1 ", "2 ")) for line in captured.out.splitlines()) == 3
    assert main(["show", str(run_dir), "--episode", "3"]) == 2
    captured = capsys.readouterr()
    assert "`--episode` 3 is out of range" in captured.err and "0..2" in captured.err
    assert "problem 1000002" in captured.out
    assert main(["show", str(run_dir), "--stage", "at_grpo", "--episode", "0"]) == 2
    captured = capsys.readouterr()
    assert "`--stage` 'at_grpo'" in captured.err and "eval_results" in captured.err
    # Two stages: the run order of the pipeline state, and --stage is needed.
    two = tmp_path / "run"
    shutil.copytree(run_dir / "eval_results", two / "eval")
    shutil.copytree(run_dir / "eval_results", two / "eval_before")
    (two / "pipeline_state.json").write_text(json.dumps({"plan": [["eval", "eval_before"], ["eval", "eval"]]}))
    assert list(find_transcripts(two)) == ["eval_before", "eval"]
    assert main(["show", str(two), "--episode", "0"]) == 2
    captured = capsys.readouterr()
    assert "`--stage` is needed" in captured.err and "stage eval_before: 3 episodes" in captured.out
    assert main(["show", str(two), "--stage", "eval", "--episode", "1"]) == 0
    assert "problem 1000001" in capsys.readouterr().out
    # One level further: an eval stage's benchmarks and the evaluations inside training, in natural order.
    for nested in ("eval/humaneval", "at_grpo/eval-10", "at_grpo/eval-2"):
        shutil.copytree(run_dir / "eval_results", two / nested)
    (two / "pipeline_state.json").write_text(json.dumps({"plan": [["at_grpo", "at_grpo"], ["eval", "eval"]]}))
    assert list(find_transcripts(two)) == ["at_grpo/eval-2", "at_grpo/eval-10", "eval", "eval/humaneval", "eval_before"]
    assert main(["show", str(two), "--stage", "eval/humaneval", "--episode", "2"]) == 0
    assert "problem 1000002" in capsys.readouterr().out
    # A stage folder and the file itself work too, the stage named after its folder.
    assert main(["show", str(two / "eval" / TRANSCRIPT_FILE), "--episode", "2"]) == 0
    assert "Episode 2 of stage eval: step 0, problem 1000002" in capsys.readouterr().out
    assert main(["show", str(two / "eval_before"), "--stage", "eval_before", "--episode", "0"]) == 0
    assert "Episode 0 of stage eval_before: step 0, problem 1000000" in capsys.readouterr().out
    assert main(["show", str(tmp_path / "nowhere")]) == 2
    assert "`RUN_DIR`" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["show", str(tmp_path / "empty")]) == 2
    assert "holds no transcripts" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / TRANSCRIPT_FILE).write_text('{"step": 0}\n')
    assert main(["show", str(tmp_path / "bad")]) == 2
    assert "not a transcript record" in capsys.readouterr().err


def test_the_viewer_reads_the_files_the_run_writes():
    from pettingllms.pipeline import PIPELINE_STATE_FILE
    from pettingllms.viewer import episodes

    assert (episodes.TRANSCRIPT_FILE, episodes.PIPELINE_STATE_FILE) == (TRANSCRIPT_FILE, PIPELINE_STATE_FILE)


def test_html_escapes_what_the_model_wrote(runs):
    records = read_records(find_transcripts(runs["plan_path"])["eval_results"])
    episode = group_episodes(records)[0]
    record = episode.decisions[0].record
    record["response"] = "<script>alert('owned')</script> & </pre><b>bold</b>"
    record["feedback"] = '"><img src=x onerror=alert(1)>'
    record["role"] = "<i>tool</i>"
    record["state"]["text"] = "<style>body{display:none}</style>"
    page = episode_html(episode)
    assert "<script" not in page.lower() and "<img" not in page and "<i>tool" not in page and "<b>bold" not in page
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt; &amp; &lt;/pre&gt;&lt;b&gt;bold&lt;/b&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert page.count("<style>") == 1 and "&lt;style&gt;body{display:none}&lt;/style&gt;" in page
    assert "<script>alert('owned')</script>" in episode_text(episode)  # the terminal shows it as written


def test_transcripts_written_before_states_render_state_not_recorded(runs):
    records = read_records(find_transcripts(runs["code"])["eval_results"])
    for record in records:
        del record["state"]
    episode = group_episodes(records)[0]
    text, page = episode_text(episode), episode_html(episode)
    assert text.count("state after the step: state not recorded") == len(episode.decisions)
    assert page.count("state not recorded") == len(episode.decisions)
    assert "environment (not recorded)" in text
    assert episode.decisions[0].record["response"].splitlines()[0] in text


def tree_engine(tmp_path: Path, **settings) -> RolloutEngine:
    """AT-GRPO's tree sampling on Plan-Path with the random scripted policy (3 candidates a decision),
    every episode transcribed."""
    config = load_config("plan_path/L1", ["env.max_turns=2"])
    name, fields, options = workflow_env(config, purpose="train")
    return RolloutEngine.from_registry(
        name, fields, scripted_router(config, "random"),
        EngineConfig(num_generations=3, output_dir=str(tmp_path), seed=7, **settings), agent_options=options,
    )


def test_a_tree_rollout_shows_the_branch_that_continued_and_its_siblings(tmp_path):
    engine = tree_engine(tmp_path, transcript_rate=1.0)
    engine.rollout([11, 12], step=3)
    records = read_records(tmp_path / TRANSCRIPT_FILE)
    episodes = group_episodes(records, "at_grpo", str(tmp_path / TRANSCRIPT_FILE))
    assert [(e.step, e.problem_id, e.mode, e.trajectory) for e in episodes] == [(3, 11, "tree", None), (3, 12, "tree", None)]
    for episode in episodes:
        for decision in episode.decisions:
            assert decision.record["selected"] and len(decision.siblings) == 2
            assert not any(s["selected"] for s in decision.siblings)
            assert all(s["state"] is not None for s in decision.siblings)  # every candidate's own state
        # The selected branch continues: each decision's prompt shows the state the previous one left.
        for before, after in zip(episode.decisions, episode.decisions[1:]):
            assert before.record["state"]["text"].splitlines()[0] in prompt_messages(after.record["prompt"])[-1][1]
        text, page = episode_text(episode), episode_html(episode)
        assert_renders_every_part([d.record for d in episode.decisions], text, page)
        assert text.count("other candidates at this decision point (2):") == len(episode.decisions)
        assert page.count("2 other candidates at this decision point") == len(episode.decisions)
        for sibling in (s for d in episode.decisions for s in d.siblings):
            assert html.escape(sibling["response"], quote=True) in page


def test_the_state_limit_cuts_marks_and_counts(tmp_path, caplog):
    engine = tree_engine(tmp_path, transcript_rate=1.0, transcript_state_max_chars=150)
    with caplog.at_level(logging.WARNING, logger="pettingllms.execution"):
        engine.rollout([5], step=0)
    records = read_records(tmp_path / TRANSCRIPT_FILE)
    assert all(snapshot_size(r["state"]) <= 150 and r["state"]["truncated_chars"] > 0 for r in records)
    assert engine.transcripts.truncated_states == len(records)
    assert f"{len(records)} state snapshot(s) cut to 150 characters" in caplog.text
    episode = group_episodes(records)[0]
    assert "chars dropped by the size limit" in episode_text(episode)
    assert "characters dropped by the size limit" in episode_html(episode)
    with pytest.raises(ValueError, match="`transcript_state_max_chars` must be null"):
        EngineConfig(transcript_state_max_chars=10)


def test_training_and_evaluation_without_transcripts_take_no_snapshots(tmp_path):
    engine = tree_engine(tmp_path, transcript_rate=0.0)
    assert all(s.state is None for s in engine.rollout([1], step=0).samples)
    result = tree_engine(tmp_path, transcript_rate=1.0).evaluate([1, 2], num_samples=2)
    assert all(s.state is None for s in result.samples)  # evaluate writes nothing unless given a writer
    assert not (tmp_path / TRANSCRIPT_FILE).exists()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=40,
)


@given(
    text=st.none() | st.text(max_size=400),
    fields=st.dictionaries(st.text(min_size=1, max_size=10), json_values, max_size=8),
    max_chars=st.integers(100, 1500),
)
def test_limit_snapshot_fits_the_limit_and_counts_what_it_dropped(text, fields, max_chars):
    snapshot = {"env": "e", "text": text, "fields": fields, "truncated_chars": 0}
    before = json.dumps(snapshot)
    limited = limit_snapshot(snapshot, max_chars)
    assert json.dumps(snapshot) == before  # the input is left alone
    assert snapshot_size(limited) <= max_chars
    if snapshot_size(snapshot) <= max_chars:
        assert limited == snapshot
    else:
        assert limited["truncated_chars"] > 0
        assert "more chars]" in json.dumps(limited, ensure_ascii=False) or limited["fields"] == ""
    assert limit_snapshot(snapshot, None) == snapshot


def test_limit_snapshot_keeps_the_structure_when_cutting_strings_is_enough():
    snapshot = {"env": "code", "text": None, "fields": {"program": "x" * 1000, "passed": [True, False]}, "truncated_chars": 0}
    limited = limit_snapshot(snapshot, 300)
    assert limited["fields"]["passed"] == [True, False]
    program = limited["fields"]["program"]
    dropped = 1000 - program.index("…")
    assert program.endswith(cut_marker(dropped)) and limited["truncated_chars"] == dropped


def test_eval_transcripts_rate_draws_the_episodes_it_says_and_defaults_to_none(tmp_path, capsys):
    eval_run(tmp_path / "none", "plan_path/L1", "oracle", 3, "eval.transcripts_rate=0.0")
    assert not (tmp_path / "none" / "eval_results").exists()
    eval_run(tmp_path / "half", "plan_path/L1", "oracle", 12, "eval.transcripts_rate=0.5", "run.seed=3")
    assert "| transcripts " in capsys.readouterr().out
    report = json.loads((tmp_path / "half" / "eval_results.json").read_text())
    assert report["transcripts"] == str(tmp_path / "half" / "eval_results" / TRANSCRIPT_FILE)
    problems = {r["problem_id"] for r in read_records(report["transcripts"])}
    expected = {p for p in range(1_000_000, 1_000_012) if episode_sampled(3, 0, p, 0.5)}
    assert problems == expected and 0 < len(problems) < 12
    # A repeated evaluation replaces the file (no episode twice).
    eval_run(tmp_path / "half", "plan_path/L1", "oracle", 12, "eval.transcripts_rate=0.5", "run.seed=3")
    assert len(group_episodes(read_records(report["transcripts"]))) == len(expected)


def test_the_new_keys_are_checked_naming_them():
    with pytest.raises(ConfigError, match=r"`eval.transcripts_rate` must be in \[0, 1\], got 1.5"):
        eval_settings("eval", load_config("plan_path/L1", ["eval.transcripts_rate=1.5"]))
    with pytest.raises(ConfigError, match="`rollout.transcript_state_max_chars` must be null"):
        validate_config(load_config("plan_path/L1", ["rollout.transcript_state_max_chars=10"]))
    with pytest.raises(ConfigError, match="`rollout.transcript_state_max_chars` must be null"):
        validate_config(load_config("plan_path/L1", ["rollout.transcript_state_max_chars='big'"]))
    config = load_config("plan_path/L1", ["rollout.transcript_state_max_chars=2000"])
    validate_config(config)
    from pettingllms.stages.at_grpo import at_grpo_config, rollout_config
    from pettingllms.trainer.at_grpo_setup import engine_config_for

    engine = engine_config_for(at_grpo_config("at_grpo", config, "/tmp/unused"), rollout_config(config))
    assert engine.transcript_state_max_chars == 2000


def test_the_eval_stage_of_a_pipeline_writes_transcripts_show_reads(tiny_model_path, tmp_path, capsys):
    """A model's episodes (parse errors and all), written by the pipeline's eval stage into eval/."""
    run_dir = tmp_path / "run"
    code = main(["train", "plan_path/L1", "pipeline=[eval]", f"model.name={tiny_model_path}",
                 f"run.output_dir={run_dir}", "env.max_turns=1", "rollout.max_completion_length=8",
                 "eval.num_instances=2", "eval.transcripts_rate=1.0", "--no-progress"])
    assert code == 0
    capsys.readouterr()
    assert list(find_transcripts(run_dir)) == ["eval"]
    records = read_records(run_dir / "eval" / TRANSCRIPT_FILE)
    assert {r["policy"] for r in records} == {"shared"} and all(r["state"] for r in records)
    assert any(r["parse_error"] for r in records)  # an untrained model: its malformed answers show as such
    assert main(["show", str(run_dir), "--episode", "1"]) == 0
    out = capsys.readouterr().out
    episode = group_episodes(records)[1]
    assert_renders_every_part([d.record for d in episode.decisions], out, episode_html(episode))
