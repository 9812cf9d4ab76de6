"""The agent protocol: how one role reads the shared state, is prompted, parses and acts.

One decision of one agent, as the engine drives it::

    prompt = agent.update_from_env(turn_idx, env)   # read env.state, build the prompt
    text = policy(prompt)                            # a model (or a scripted policy) answers
    agent.update_from_model(text)                    # parse into agent.action, or set agent.parse_error
    result = await env.step_agent(agent, worker)     # agent.step(env, worker) under the step timeout,
                                                     # then the local / global reward parts

Agents never talk to each other: everything one agent leaves for another goes through ``env.state``.
An agent keeps no conversation memory; every prompt is rebuilt from the state, so deep-copying the
environment captures the whole episode. An agent object holds the fields of its latest decision, so it
serves one environment instance at a time: to step K copies concurrently, use K agents
(``copy.deepcopy(agent)``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from pettingllms.agents.failures import ParseError

ChatMessages = list[dict[str, str]]
Prompt = str | ChatMessages

PROMPT_STYLES: tuple[str, ...] = ("chat", "text")


def build_prompt(system: str, user: str, style: str) -> Prompt:
    """Chat messages (system + user) or one plain text block, from the same two parts."""
    if style == "chat":
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
    if style == "text":
        return f"{system}\n\n{user}\n"
    raise ValueError(f"`prompt_style` must be one of {list(PROMPT_STYLES)}, got {style!r}")


class Agent(ABC):
    """Base class of every agent.

    Fields (reset by :meth:`reset`, rewritten every decision):

    * ``role``: the agent's name in ``turn_order``.
    * ``prompt``: the last prompt built by :meth:`update_from_env` (text or chat messages).
    * ``response``: the last raw model response given to :meth:`update_from_model`.
    * ``action``: the parsed action, ``None`` when the response did not parse.
    * ``parse_error``: why the last response did not parse, else ``None``.
    * ``failure``: the model failure of the last step (see :data:`~pettingllms.agents.failures.MODEL_FAILURES`), else ``None``.
    * ``feedback``: what the last step reported (tool output or the effect of the action), for transcripts.
    * ``local_reward``: the reward of the last step from the agent's own reward function.
    * ``done`` / ``success``: the episode's status right after the agent's last step.

    Subclasses implement :meth:`update_from_env`, :meth:`parse` (raise
    :class:`~pettingllms.agents.failures.ParseError` on malformed text, never ``eval``) and :meth:`step`.
    """

    #: Role used when the constructor is not given one.
    default_role: str = "agent"

    def __init__(self, *, role: str | None = None, prompt_style: str = "chat") -> None:
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"`prompt_style` must be one of {list(PROMPT_STYLES)}, got {prompt_style!r}")
        self.role = role if role is not None else self.default_role
        if not isinstance(self.role, str) or not self.role:
            raise ValueError(f"`role` must be a non-empty string, got {self.role!r}")
        self.prompt_style = prompt_style
        self.reset()

    def reset(self) -> None:
        self.prompt: Prompt | None = None
        self.response: str | None = None
        self.action: Any = None
        self.parse_error: str | None = None
        self.failure: str | None = None
        self.feedback: str = ""
        self.local_reward: float = 0.0
        self.done: bool = False
        self.success: bool = False

    @abstractmethod
    def update_from_env(self, turn_idx: int, env_data: Any) -> Prompt:
        """Read ``env_data.state`` and build (and store in ``self.prompt``) this decision's prompt."""

    @abstractmethod
    def parse(self, response: str) -> Any:
        """Turn a response into an action; raise ``ParseError`` with the reason when it is malformed."""

    def update_from_model(self, response: str) -> Any:
        """Parse ``response`` into ``self.action``; a malformed one sets ``parse_error`` and never raises."""
        if not isinstance(response, str):
            raise TypeError(f"`response` must be a str, got {type(response).__name__}")
        self.response = response
        try:
            self.action = self.parse(response)
            self.parse_error = None
        except ParseError as exc:
            self.action = None
            self.parse_error = str(exc) or "malformed response"
        return self.action

    @abstractmethod
    async def step(self, env_data: Any, env_worker: Any = None) -> None:
        """Execute ``self.action`` against ``env_data`` (updating its state) and set ``local_reward``."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(role={self.role!r})"
