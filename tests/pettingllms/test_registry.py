"""Registry: built-ins, lazy import, real import errors with hints, unknown names, user registrations."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from pettingllms import registry
from pettingllms.envs.plan_path import PlanPathEnv, PlanPathPlanAgent, PlanPathToolAgent
from pettingllms.registry import (
    RegistryError,
    list_agents,
    list_envs,
    list_workers,
    make_agent,
    make_agents,
    make_env,
    make_worker,
    register_agent,
    register_env,
    register_worker,
)
from pettingllms.scripted import OraclePolicy, play_episode


@pytest.fixture
def cleanup():
    """Names registered by a test, removed afterwards so tests stay independent."""
    added: list[tuple[registry.Registry, str]] = []
    yield added
    for reg, name in added:
        if name in reg:
            reg.unregister(name)


def test_builtins_are_listed():
    assert {"plan_path", "sokoban", "sudoku"} <= set(list_envs())
    assert list_agents("sokoban") == ["sokoban.plan", "sokoban.single", "sokoban.tool"]
    assert isinstance(make_env("plan_path"), PlanPathEnv)
    assert isinstance(make_agent("plan_path.tool", tools=["simulate", "python"]), PlanPathToolAgent)


def test_importing_the_registry_imports_no_environment():
    code = "import sys, pettingllms.registry; print(any(m.startswith('pettingllms.envs.') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_unknown_names_list_the_known_ones():
    with pytest.raises(RegistryError, match=r"unknown env 'mazes'; known envs: \[.*'plan_path'.*'sudoku'"):
        make_env("mazes")
    with pytest.raises(RegistryError, match="unknown agent 'sokoban.critic'.*'sokoban.plan'"):
        make_agent("sokoban.critic")
    with pytest.raises(RegistryError, match="unknown worker 'sandbox9'"):
        make_worker("sandbox9")
    with pytest.raises(RegistryError, match=r"no agent for role 'critic' of env 'sudoku'.*'sudoku.plan'"):
        make_agents("sudoku", ["tool", "critic"])


def test_missing_optional_dependency_breaks_only_its_entry(cleanup):
    register_env("ghost", "ghost_pkg_not_installed.envs:GhostEnv", install_hint="pip install coopllm[ghost]")
    cleanup.append((registry.ENVS, "ghost"))
    assert "ghost" in list_envs()
    assert isinstance(make_env("sokoban"), object)  # the others still work
    with pytest.raises(ModuleNotFoundError) as info:
        make_env("ghost")
    message = str(info.value)
    assert "env 'ghost'" in message and "ghost_pkg_not_installed" in message
    assert "pip install coopllm[ghost]" in message
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    assert info.value.name == "ghost_pkg_not_installed"


def test_import_error_inside_the_module_is_the_real_one(cleanup, tmp_path, monkeypatch):
    (tmp_path / "broken_env_mod.py").write_text("import numpy.this_does_not_exist\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    register_env("broken", "broken_env_mod:Env", install_hint="pip install broken-extra")
    cleanup.append((registry.ENVS, "broken"))
    with pytest.raises(ImportError, match="numpy.this_does_not_exist.*pip install broken-extra") as info:
        make_env("broken")
    assert info.value.name == "numpy.this_does_not_exist"


def test_lazy_entries_are_imported_on_first_use_and_missing_attributes_are_named(cleanup, tmp_path, monkeypatch):
    (tmp_path / "lazy_user_env.py").write_text(textwrap.dedent("""
        from pettingllms.envs.plan_path import PlanPathEnv

        class LazyEnv(PlanPathEnv):
            name = "lazy"
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    register_env("lazy", "lazy_user_env:LazyEnv")
    register_env("lazy_typo", "lazy_user_env:LazyEvn")
    cleanup.extend([(registry.ENVS, "lazy"), (registry.ENVS, "lazy_typo")])
    assert "lazy_user_env" not in sys.modules
    assert make_env("lazy").name == "lazy" and "lazy_user_env" in sys.modules
    with pytest.raises(ImportError, match="has no attribute 'LazyEvn'"):
        make_env("lazy_typo")
    with pytest.raises(ValueError, match="package.module:Attribute"):
        register_env("bad_path", "lazy_user_env.LazyEnv")


def test_duplicates_need_overwrite(cleanup):
    register_env("dup", PlanPathEnv)
    cleanup.append((registry.ENVS, "dup"))
    register_env("dup", PlanPathEnv)  # same target: allowed
    with pytest.raises(RegistryError, match="'dup' is already registered.*overwrite=True"):
        register_env("dup", "pettingllms.envs.sokoban.env:SokobanEnv")
    register_env("dup", "pettingllms.envs.sokoban.env:SokobanEnv", overwrite=True)
    assert make_env("dup").name == "sokoban"
    with pytest.raises(ValueError, match="env name must be a non-empty string"):
        register_env("  ", PlanPathEnv)


def test_user_environment_and_agents_by_decorator(cleanup):
    @register_env("tiny_maze")
    class TinyMazeEnv(PlanPathEnv):
        name = "tiny_maze"

    @register_agent("tiny_maze.plan")
    class TinyMazePlan(PlanPathPlanAgent):
        pass

    register_agent("tiny_maze.tool", "pettingllms.envs.plan_path.agents:PlanPathToolAgent")
    cleanup.extend([(registry.ENVS, "tiny_maze"), (registry.AGENTS, "tiny_maze.plan"), (registry.AGENTS, "tiny_maze.tool")])
    assert TinyMazeEnv.__name__ == "TinyMazeEnv"  # the decorator returns the class
    env = make_env("tiny_maze", {"rows": 4, "cols": 4, "wall_density": 0.1, "turn_order": ["tool", "plan"]})
    agents = make_agents("tiny_maze", env.config.turn_order, {"tool": {"max_tool_calls": 2}})
    assert [type(a) for a in agents] == [PlanPathToolAgent, TinyMazePlan] and agents[0].max_tool_calls == 2
    result = asyncio.run(play_episode(env, agents, OraclePolicy(), seed=5))
    assert result.success


def test_make_agents_validates_options():
    with pytest.raises(ValueError, match=r"`agent_options` names role\(s\) \['critic'\]"):
        make_agents("sokoban", ["tool", "plan"], {"critic": {}})
    with pytest.raises(TypeError, match="unexpected keyword argument 'tools'"):
        make_agents("sokoban", ["plan"], {"plan": {"tools": ["simulate"]}})
    agents = make_agents("sokoban", ["tool", "plan", "tool"])
    assert [a.role for a in agents] == ["tool", "plan", "tool"] and agents[0] is not agents[2]


def test_workers(cleanup):
    class EchoWorker:
        def __init__(self, prefix: str = "") -> None:
            self.prefix = prefix

    register_worker("echo", EchoWorker)
    cleanup.append((registry.WORKERS, "echo"))
    assert "echo" in list_workers()
    assert make_worker("echo", prefix=">").prefix == ">"


def test_registry_error_message_is_plain():
    err = RegistryError("unknown env 'x'")
    assert str(err) == "unknown env 'x'" and isinstance(err, LookupError)


def test_docstring_example_runs(cleanup):
    """The README-ready example in the registry docstring runs as written."""
    doc = registry.__doc__
    start = doc.index("this example runs as written)::")
    block = doc[start:doc.index("An entry whose module")].split("::", 1)[1]
    code = textwrap.dedent(block)
    cleanup.extend([(registry.ENVS, "guess"), (registry.AGENTS, "guess.guesser")])
    exec(compile(code, "registry-docstring-example", "exec", dont_inherit=True), {"__name__": "registry_example"})
    assert "guess" in list_envs() and list_agents("guess") == ["guess.guesser"]


def test_sandbox_worker_is_registered_lazily():
    assert "sandbox" in list_workers()
