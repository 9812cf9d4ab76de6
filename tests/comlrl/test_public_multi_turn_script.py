"""Scripts written for the public CoMLRL 1.4.3 multi-turn API (MAGRPO, IAC, MAAC: the default ``num_turns=2``,
an ``external_transition`` that writes each agent's next prompt from the last turn, ``train()``,
``evaluate()``, ``save_model()``) run unchanged here, one script per trainer.

Each script reads only the model path and its output folder from the environment and checks, as a user
would: both agents' weights changed, the transition got the documented keywords (``prompt``,
``agent_completions``, ``num_agents``, ``prompt_history_per_agent``, ``response_history_per_agent``) with the
histories of the branch so far, the prompt it returned reached the next turn's formatter (as ``item["prompt"]``),
the documented metrics were logged (per turn, and the critics'), evaluation reports every turn, and the saved
agents load.
"""

from __future__ import annotations

import runpy
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json
    import os

    import torch
    from transformers import AutoModelForCausalLM

    from comlrl.trainers.{module} import {config}, {trainer}

    MODEL, OUT = os.environ["MT_SCRIPT_MODEL"], os.environ["MT_SCRIPT_OUT"]
    train = [{{"prompt": "Write a haiku about rain."}}, {{"prompt": "Write a haiku about snow."}}]
    calls = []


    def external_transition(prompt, agent_completions, num_agents, prompt_history_per_agent=None,
                            response_history_per_agent=None, **kwargs):
        calls.append((prompt, list(agent_completions), num_agents,
                      [len(h) for h in prompt_history_per_agent], [len(h) for h in response_history_per_agent]))
        return [f"{{prompt}} Your last try was: {{text[:20]}}. Improve it." for text in agent_completions]


    seen_prompts = []


    def formatter(item):  # the public rule: a transition's prompt replaces item["prompt"] before this runs
        seen_prompts.append(item["prompt"])
        return item["prompt"]


    def reward_func(completions1, completions2, batch_items=None):
        return [min(len(completions1[0]), 30) / 30.0 - min(len(completions2[0]), 30) / 60.0]


    def eval_logger(agent_completions_turns, batch_items=None, prompts=None, **kwargs):
        return [{{"chars": float(sum(len(t) for t in turns))}} for turns in agent_completions_turns[0]]


    def eval_aggregator(metrics, num_turns=1):
        return {{f"turn_{{num_turns}}/chars": sum(m["chars"] for m in metrics) / len(metrics)}}


    config = {config}({args}
        output_dir=OUT, max_new_tokens=6, temperature=1.0, top_p=1.0, agent_learning_rate=1e-2,
        num_train_epochs=1, rollout_buffer_size=2, logging_steps=1, eval_interval=0, eval_num_samples=2,
        early_termination_threshold=None,
    )
    assert config.num_turns == 2  # the public default: multi-turn
    trainer = {trainer}({model_keyword}=MODEL, reward_func=reward_func, train_dataset=train, eval_dataset=train,
                         external_transition=external_transition, eval_logger=eval_logger,
                         eval_aggregator=eval_aggregator, formatters=formatter, args=config{extra})
    before = [[p.detach().clone() for p in agent.parameters()] for agent in trainer.agents]
    trainer.train()
    for agent, old in zip(trainer.agents, before):
        assert any(not torch.equal(a, b) for a, b in zip(agent.parameters(), old)), "an agent did not train"
    assert calls, "the transition was never called"
    for prompt, completions, num_agents, prompts_seen, responses_seen in calls:
        assert prompt in [item["prompt"] for item in train] and num_agents == 2 and len(completions) == 2
        assert prompts_seen == [1, 1] and responses_seen == [1, 1]
    # turn 2 was prompted with what the transition returned
    assert any(p.endswith("Improve it.") and "Your last try was: " in p for p in seen_prompts), seen_prompts
    metrics = trainer.evaluate()
    for key in ("eval/turn_1/reward_mean", "eval/turn_2/reward_mean", "eval/turn_2/expected_return", "eval/turn_2/chars"):
        assert key in metrics, (key, sorted(metrics))
    logged = [json.loads(line) for line in open(os.path.join(OUT, "metrics.jsonl"))]
    documented = ["loss", "turn_1/reward_mean", "turn_2/reward_mean", "turn_1/expected_return",
                  "turn_2/expected_return", "completions/mean_length", "learning_rate"]
    documented += {critic_metrics}
    for key in documented:
        assert any(key in record for record in logged), (key, logged)
    trainer.save_model(os.path.join(OUT, "final"))
    for i in range(2):
        AutoModelForCausalLM.from_pretrained(os.path.join(OUT, "final", f"agent_{{i}}"))
    print("OK")
    """
)

CASES = {
    "magrpo": dict(module="reinforce", config="MAGRPOConfig", trainer="MAGRPOTrainer", model_keyword="agent_model",
                   args="num_generations=2,", extra=", num_agents=2", critic_metrics="[]"),
    "iac": dict(module="actor_critic", config="IACConfig", trainer="IACTrainer", model_keyword="agent_model",
                args="num_agents=2, critic_learning_rate=1e-2, critic_model_name=MODEL,", extra="",
                critic_metrics='["value_loss", "value_mean"]'),
    "maac": dict(module="actor_critic", config="MAACConfig", trainer="MAACTrainer", model_keyword="agent_model",
                 args="num_agents=2, critic_learning_rate=1e-2, critic_model_name=MODEL,", extra="",
                critic_metrics='["value_loss", "value_mean"]'),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_public_multi_turn_script_runs_unchanged(name, tiny_model_path, tmp_path, monkeypatch, capsys):
    script = tmp_path / f"{name}_script.py"
    script.write_text(SCRIPT.format(**CASES[name]))
    monkeypatch.setenv("MT_SCRIPT_MODEL", tiny_model_path)
    monkeypatch.setenv("MT_SCRIPT_OUT", str(tmp_path / "out"))
    runpy.run_path(str(script), run_name="__main__")
    assert capsys.readouterr().out.strip().endswith("OK")
