"""A script written for the public CoMLRL 1.4.3 preference API (its documented constructor keywords, config
fields, train()/evaluate()/save_model() calls and trainer attributes) runs unchanged here.

The script below only reads the model path from the environment; everything else is the public API as
its documentation and tests use it.
"""

from __future__ import annotations

import runpy
import textwrap

PUBLIC_SCRIPT = textwrap.dedent(
    """
    import os

    from datasets import Dataset
    from transformers import AutoTokenizer

    from comlrl.trainers import MADPOConfig, MADPOTrainer
    from comlrl.trainers.preference import MADPOIterConfig, MADPOIterTrainer

    MODEL = os.environ["PUBLIC_SCRIPT_MODEL"]
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    train = Dataset.from_list([{"prompt": "Plan a trip to Rome.", "id": 0},
                               {"prompt": "Plan a picnic.", "id": 1}])
    evaluation = Dataset.from_list([{"prompt": "Plan a party.", "id": 2}])


    def planner_formatter(item):
        return "Planner: " + item["prompt"]


    def critic_formatter(item):
        return "Critic: " + item["prompt"]


    def reward_func(completions1, completions2, batch_items=None):
        # one joint reward per call: longer plans, shorter critiques
        return [min(len(completions1[0]), 40) / 40.0 - min(len(completions2[0]), 40) / 80.0]


    def eval_logger(agent_completions_turns, batch_items=None, prompts=None, **kwargs):
        return [{"plan_chars": float(len(turns[-1]))} for turns in agent_completions_turns[0]]


    def eval_aggregator(metrics, num_turns=1):
        return {"turn_1/plan_chars": sum(m["plan_chars"] for m in metrics) / len(metrics)}


    config = MADPOConfig(
        num_agents=2,
        num_turns=1,
        joint_mode="aligned",
        num_train_epochs=2,
        agent_learning_rate=1e-3,
        logging_steps=1,
        agent_devices="cpu",
        parallel_training="none",
        max_new_tokens=8,
        temperature=0.9,
        top_p=0.95,
        top_k=None,
        preference_num_candidates=4,
        preference_pairs_per_sample=2,
        pair_selection="reward_gap",
        dpo_beta=0.1,
        rollout_buffer_size=2,
        eval_interval=2,
        eval_num_samples=1,
        eval_batch_size=1,
        use_environment_step=True,
        environment_steps_per_pair=2,
        reference_kl_coef=0.1,
    )
    trainer = MADPOTrainer(
        agent_model=MODEL,
        num_agents=2,
        tokenizer=tokenizer,
        model_config={"torch_dtype": "float32"},
        train_dataset=train,
        eval_dataset=evaluation,
        reward_func=reward_func,
        reward_processor=lambda r: 2.0 * r,
        formatters=[planner_formatter, critic_formatter],
        external_transition=None,
        wandb_config=None,
        eval_logger=eval_logger,
        eval_aggregator=eval_aggregator,
        args=config,
    )
    trainer.verbose = False
    trainer.train()
    metrics = trainer.evaluate(num_eval_samples=1)
    assert "eval/turn_1/reward_mean" in metrics and "eval/turn_1/plan_chars" in metrics
    assert len(trainer.agents) == len(trainer.optimizers) == 2 and trainer.env_step > 0
    trainer.save_model("saved_madpo")

    iter_config = MADPOIterConfig(
        num_agents=2,
        num_iterations=2,
        num_train_epochs=1,
        agent_devices="cpu",
        max_new_tokens=8,
        temperature=1.0,
        top_p=1.0,
        preference_num_candidates=3,
        comparator_num_candidates=2,
        preference_pairs_per_sample=2,
        pair_selection="comparator_reward",
        comparator_policy="history",
        comparator_history_k=1,
        preference_replay_mode="lambda_decay",
        preference_replay_lambda=0.8,
        preference_replay_sample_size=4,
        preference_replay_dir="replay",
        policy_checkpoint_dir="policies",
        eval_interval=0,
        logging_steps=1,
    )
    iter_trainer = MADPOIterTrainer(
        agent_model=MODEL,
        num_agents=2,
        train_dataset=train,
        reward_func=reward_func,
        formatters=planner_formatter,
        args=iter_config,
    )
    iter_trainer.verbose = False
    iter_trainer.train(checkpoint_dir="checkpoints", checkpoint_interval=1, checkpoint_total_limit=1)
    iter_trainer.save_model("saved_iter")
    """
)


def test_public_library_script_runs_unchanged(tiny_model_path, tmp_path, monkeypatch):
    script = tmp_path / "public_script.py"
    script.write_text(PUBLIC_SCRIPT)
    monkeypatch.setenv("PUBLIC_SCRIPT_MODEL", tiny_model_path)
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    for folder in ("saved_madpo", "saved_iter"):
        assert (tmp_path / folder / "agent_0" / "config.json").is_file()
        assert (tmp_path / folder / "agent_1" / "config.json").is_file()
    assert (tmp_path / "replay" / "iteration_0002.json").is_file()
    assert (tmp_path / "policies" / "iteration_0002" / "policy_layout.json").is_file()
    assert [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith("checkpoint-")] == [
        "checkpoint-2"
    ]
    # Outputs the script did not place go under the config's output_dir, relative to the working directory.
    assert (tmp_path / "outputs" / "madpo" / "metrics.jsonl").is_file()
