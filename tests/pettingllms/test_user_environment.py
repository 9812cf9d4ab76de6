"""A user's own environment, in a folder outside the project, everywhere a shipped one works: the example of
docs/pettingllms.md ("Your own environment") runs through the command line from its own folder with one
``imports:`` line (``eval --policy oracle``, ``plan``, a 2-step ``train``, ``show``, ``eval --checkpoint``), and
``--import`` or an installed ``pettingllms.envs`` entry point do the same; a module that fails to import and
every missing piece of the contract (:mod:`pettingllms.config.contract`) are one line with exit status 2 before
anything is written. The Ray backend with the same example: ``tests/pettingllms/test_ray_workers.py``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pettingllms.cli import main
from pettingllms.config import load_config
from pettingllms.config.imports import ModuleImports, split_import_flags
from pettingllms.scripts.guard import EXIT_USAGE
from tests.helpers.scripts import REPO, script_env, tail
from tests.helpers.user_environment import MODULE, doc_example, forget_user_modules, write_user_project

ENTRY_POINT = Path(sys.executable).with_name("pettingllms")  # the console script: no current folder on sys.path


@pytest.fixture
def project(tmp_path, monkeypatch):
    """The docs' example in a folder outside the project, the current folder; the registry forgets it after."""
    folder = write_user_project(tmp_path / "relay_project")
    assert REPO not in folder.parents
    monkeypatch.chdir(folder)
    with forget_user_modules():
        yield folder


def one_error_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("pettingllms: error: ") and "Traceback" not in err, err
    return err.strip()


def cli(folder: Path, model_cache: str, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(ENTRY_POINT), *args], cwd=folder, env=script_env(model_cache), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"pettingllms {' '.join(args)}: status {done.returncode}\n{tail(done.stdout)}\n{tail(done.stderr)}"
    return done


@pytest.mark.slow
def test_the_docs_example_runs_through_the_command_line_from_its_own_folder(tmp_path, model_cache):
    folder = write_user_project(tmp_path / "relay_project")
    oracle = cli(folder, model_cache, "eval", "relay.yaml", "--policy", "oracle")
    assert "success 1.000 on 10 held-out instances" in oracle.stdout
    random = cli(folder, model_cache, "eval", "relay.yaml", "--policy", "random")
    assert "success 1.000" not in random.stdout and "policy scripted:random" in random.stdout
    planned = cli(folder, model_cache, "plan", "relay.yaml")
    assert "model test-tiny" in planned.stdout and "fits" in planned.stdout

    trained = cli(folder, model_cache, "train", "relay.yaml", "--no-progress")
    assert "pipeline runs/relay: sft -> eval_before -> at_grpo -> eval" in trained.stdout
    assert "success before" in trained.stdout
    run = folder / "runs" / "relay"
    assert f"imports:\n- {MODULE}\n" in (run / "config.yaml").read_text()  # the run names the module it needs
    shown = cli(folder, model_cache, "show", "runs/relay", "--stage", "at_grpo", "--episode", "0")
    assert "posted" in shown.stdout or "no note" in shown.stdout  # the scout's feedback
    assert "secret " in shown.stdout  # the environment's render(state)
    # The run's config.yaml imports the module again: no CONFIG, no --import.
    again = cli(folder, model_cache, "eval", "--checkpoint", "runs/relay", "eval.num_instances=2")
    assert "policy runs/relay/policies" in again.stdout


def test_without_imports_the_name_is_unknown_and_import_flags_make_it_known(project, capsys):
    module, config = doc_example()
    (project / "bare.yaml").write_text(config.replace(f"imports: [{MODULE}]\n", ""), encoding="utf-8")
    assert main(["eval", "bare.yaml", "--policy", "oracle"]) == EXIT_USAGE
    assert "unknown env 'relay'" in one_error_line(capsys.readouterr().err)
    assert main(["--import", MODULE, "envs"]) == 0
    assert re.search(r"^\s+relay\s+guesser, scout$", capsys.readouterr().out, re.M)
    for flags in (["--import", MODULE], [f"--import={MODULE}"]):
        assert main(["eval", "bare.yaml", *flags, "--policy", "oracle", "--no-progress"]) == 0
        assert "success 1.000" in capsys.readouterr().out
    assert load_config("bare.yaml", imports=[MODULE])["imports"] == [MODULE]


def test_import_flags_are_taken_from_anywhere_on_the_line():
    assert split_import_flags(["--import", "a.b", "train", "x.yaml", "--import=c", "k=v"]) == (["a.b", "c"], ["train", "x.yaml", "k=v"])
    with pytest.raises(ValueError, match="`--import` needs a module name"):
        split_import_flags(["train", "--import"])
    with pytest.raises(ValueError, match="'a-b' is not a module name"):
        split_import_flags(["--import", "a-b"])


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["train", "relay.yaml", "--import", "my_team.rely"], "`--import`: module 'my_team.rely' could not be imported: ModuleNotFoundError"),
        (["train", "relay.yaml", "imports=[my_team.missing]"], "module 'my_team.missing' could not be imported"),
        (["plan", "relay.yaml", "--import", "my_team.broken"], "module 'my_team.broken' could not be imported: ZeroDivisionError: division by zero"),
        (["envs", "--import"], "`--import` needs a module name"),
    ],
)
def test_a_module_that_fails_to_import_is_one_line_before_anything_is_written(project, args, named, capsys):
    (project / "my_team" / "broken.py").write_text("1 / 0\n", encoding="utf-8")
    assert main(args) == EXIT_USAGE
    assert named in one_error_line(capsys.readouterr().err)
    assert not (project / "runs").exists()


def test_a_config_files_imports_name_the_file_when_malformed(project):
    (project / "bad.yaml").write_text("imports: my_team.relay\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"`imports` \(.*bad.yaml\) must be a list of module names"):
        load_config("bad.yaml")


def test_worker_imports_carry_the_folder_the_driver_found_the_module_in(project, monkeypatch):
    config = load_config("relay.yaml")
    imports = ModuleImports.of(config)
    assert imports == ModuleImports((MODULE,), (str(project.resolve()),))
    # A worker elsewhere, without the folder on its path and without the module: load() brings both.
    from pettingllms import registry

    monkeypatch.chdir(project.parent)
    for name in ("relay", "relay.scout", "relay.guesser"):
        (registry.ENVS if "." not in name else registry.AGENTS).unregister(name)
    for name in [m for m in sys.modules if m.startswith("my_team")]:
        del sys.modules[name]
    sys.path[:] = [p for p in sys.path if p not in ("", str(project), str(project.resolve()))]
    imports.load()
    assert "relay" in registry.list_envs() and registry.list_agents("relay") == ["relay.guesser", "relay.scout"]


# ---- the contract ----------------------------------------------------------------------------------

def _variant(project: Path, *replacements: tuple[str, str]) -> None:
    text = (project / "my_team" / "relay.py").read_text(encoding="utf-8")
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    (project / "my_team" / "relay.py").write_text(text, encoding="utf-8")


NO_OWN_POLICIES = (
    '    scripted_policies = {"oracle": "my_team.relay:Oracle", "random": "my_team.relay:Random"}\n',
    "    def oracle_answer(self, state):\n        return state.secret\n",
)


@pytest.mark.parametrize(
    ("replacements", "args", "message"),
    [
        # The case: what the docs said sft needs (oracle_answer), agents without format_response.
        ([NO_OWN_POLICIES], ["train", "relay.yaml"],
         "Scout has no `format_response(answer) -> str` (the answer as the agent's response text), which the `sft` "
         "stage needs (it plays the generic oracle policy: declare your own `scripted_policies['oracle']` instead)"),
        ([NO_OWN_POLICIES], ["eval", "relay.yaml", "--policy", "oracle"],
         "RelayEnv declares no scripted policy 'oracle' in `scripted_policies`, which `pettingllms eval --policy "
         "oracle` needs; it declares: none"),
        ([], ["eval", "relay.yaml", "--policy", "orcale"], "`--policy` 'orcale': did you mean 'oracle'?"),
        ([], ["eval", "relay.yaml", "--policy", "scripted:randon"],
         "RelayEnv declares no scripted policy 'randon' in `scripted_policies`, which `pettingllms eval --policy "
         "scripted:randon` needs; did you mean 'random'? it declares: ['oracle', 'random']"),
        ([("    def respond(self, agent, env):\n        return str(self.rng", "    def answer(self, agent, env):\n        return str(self.rng")],
         ["plan", "relay.yaml"],
         "RelayEnv.scripted_policies['random'] = 'my_team.relay:Random': Random has no `respond(agent, env) -> str`"),
        ([('"random": "my_team.relay:Random"', '"random": "my_team.relay:Rnd"')], ["plan", "relay.yaml"],
         "RelayEnv.scripted_policies['random'] = 'my_team.relay:Rnd' (which `pettingllms plan` (it plays the random "
         "policy) plays) does not load: AttributeError"),
        ([("    def is_success(self, state):\n        return state.guess == state.secret\n", "")], ["train", "relay.yaml"],
         "RelayEnv has no `is_success(state)` (an abstract method), which every stage needs"),
        ([("    async def step(self, env, env_worker=None):\n        if self.action is None:\n            self.local_reward, "
           "self.feedback = PARSE_PENALTY, f\"no guess", "    async def stop(self, env, env_worker=None):\n        if self.action "
           "is None:\n            self.local_reward, self.feedback = PARSE_PENALTY, f\"no guess")], ["train", "relay.yaml"],
         "Guesser has no `async step(env, env_worker)` (an abstract method), which every stage needs"),
        ([], ["train", "relay.yaml", "sft.late_turn_fraction=0.5", "sft.tool_candidates=2"], None),
    ],
)
def test_a_missing_piece_of_the_contract_is_one_line_before_anything_is_written(
    project, replacements, args, message, capsys, monkeypatch
):
    for old, new in replacements:
        _variant(project, (old, new))
    if message is None:  # the example meets the contract of these settings too: the check lets it through
        import pettingllms.pipeline as pipeline

        monkeypatch.setattr(pipeline.Pipeline, "run", lambda self: None)
        assert main(args) == 0
        return
    assert main(args) == EXIT_USAGE
    assert message in one_error_line(capsys.readouterr().err)
    assert not (project / "runs").exists()


# ---- the entry-point group ------------------------------------------------------------------------

def _installed(site: Path, value: str) -> Path:
    """A distribution "relay-team 0.1" in ``site`` whose ``pettingllms.envs`` entry point ``relay`` is ``value``."""
    info = site / "relay_team-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: relay-team\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[pettingllms.envs]\nrelay = {value}\n", encoding="utf-8")
    return site


@pytest.mark.parametrize("value", [MODULE, f"{MODULE}:RelayEnv"])
def test_an_installed_entry_point_registers_the_environment_with_no_config_line(project, value, monkeypatch, capsys):
    from pettingllms import registry

    module, config = doc_example()
    site = write_user_project(_installed(project.parent / "site", value))  # the package "installed" there
    monkeypatch.chdir(project.parent)  # not the package's folder: only the installed one is found
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    (project.parent / "bare.yaml").write_text(config.replace(f"imports: [{MODULE}]\n", ""), encoding="utf-8")
    assert main(["eval", "bare.yaml", "--policy", "oracle", "--no-progress"]) == 0
    assert "success 1.000" in capsys.readouterr().out


def test_an_entry_point_that_fails_to_load_is_one_line_naming_it_and_its_distribution(project, monkeypatch, capsys):
    from pettingllms import registry

    site = _installed(project.parent / "site", "my_team.gone")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_entry_points_loaded", False)
    assert main(["eval", "plan_path/L1", "env.name=nowhere", "--policy", "oracle"]) == EXIT_USAGE
    err = one_error_line(capsys.readouterr().err)
    assert "entry point 'relay' = 'my_team.gone' (group pettingllms.envs, relay-team 0.1) failed to load: ModuleNotFoundError" in err


def test_a_run_saved_before_configs_had_imports_still_resumes(tmp_path):
    from pettingllms.config import save_resolved_config
    from pettingllms.pipeline import PIPELINE_STATE_FILE, STATE_FORMAT, STATE_VERSION, Pipeline

    config = load_config("plan_path/L1", [f"run.output_dir={tmp_path}", "run.resume=true", "model.name=test-tiny"])
    save_resolved_config({k: v for k, v in config.items() if k != "imports"}, tmp_path)  # the older config.yaml
    pipeline = Pipeline(config)
    done = [{"stage": "sft", "folder": "sft", "metrics": {}}]
    (tmp_path / PIPELINE_STATE_FILE).write_text(
        json.dumps({"format": STATE_FORMAT, "version": STATE_VERSION, "plan": pipeline.plan, "completed": done})
    )
    assert pipeline._prepare() == done
