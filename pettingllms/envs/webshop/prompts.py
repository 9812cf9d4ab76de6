"""Prompt text of the web shop agents (short: small models read it).

Every prompt holds the turn, what the latest step did, and the current page as text (its first line is the
instruction, its last the clickable labels); the system message says what the role answers with, exactly what
its parser reads.
"""

from __future__ import annotations

__all__ = ["buyer_system", "searcher_system", "single_system", "state_lines"]


def searcher_system() -> str:
    return ("You are the searcher of a shopping team on a web shop: you write the search query, then a buyer "
            "clicks through the results and buys. Answer with one line: search[your query], the words of the "
            "product the instruction asks for.")


def buyer_system(max_actions: int) -> str:
    return ("You are the buyer of a shopping team on a web shop: the searcher has searched; you open a result "
            "that fits the instruction, choose the options it asks for and buy. Answer with 1 to "
            f"{max_actions} lines, each click[label] for a [label] on the page, played in order; "
            "click[buy now] buys.")


def single_system(max_actions: int) -> str:
    return ("You shop on a web shop for what the instruction asks. Answer with 1 to "
            f"{max_actions} actions, one per line, played in order: search[query] (where the page has a "
            "[search box]) or click[label] for a [label] on the page; click[buy now] buys.")


def state_lines(turn_idx: int, max_turns: int, last_report: str, observation: str) -> list[str]:
    lines = [f"Turn {turn_idx + 1} of {max_turns}."]
    if last_report:
        lines.append(f"Last step: {last_report}")
    lines += ["Page:", observation]
    return lines
