"""``python -m pettingllms.envs.sudoku --size 9 --count 200``: pre-generate a Sudoku bank."""

from pettingllms.envs.sudoku.generator import main

main()
