"""Sokoban answers: a move list (format in :mod:`pettingllms.envs.game_parsers`)."""

from __future__ import annotations

from pettingllms.envs.game_parsers import MoveSpec, format_moves, parse_move_answer

parse_answer = parse_move_answer
format_answer = format_moves

__all__ = ["MoveSpec", "format_answer", "parse_answer"]
