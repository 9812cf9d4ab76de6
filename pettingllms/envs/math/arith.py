"""Generated word problems over multi-step arithmetic whose numbers are too large to do reliably in the head.

A problem is a short story (a shop, a farm, a club's savings, a factory, ...) around one calculator
expression: a first product, then additions / subtractions of further products or single amounts, and at
level 3 an equal split (an exact division whose answer may be a fraction). Numbers are plain digits (no
thousands commas). Everything is drawn from ``random.Random(f"arith-{level}-{seed}")``, so a (seed, level)
pair always gives the same problem.

- level 1: 2 operations on 2-3 digit numbers (``a * b + c``);
- level 2: 3 operations on 3-4 digit numbers (``a * b - c * d``, ``a * b + c - d``, ...);
- level 3: 4 operations, the last an exact division (``(a * b + c * d) / e``).

The reference answer is exact (:func:`pettingllms.envs.math.calculator.format_number`: ``"12345"`` or
``"3/4"``) and ``metadata["expression"]`` is the expression that computes it; :func:`python_program` turns
that expression into a program printing the same value.

``named=True`` labels every number of the question with a letter in order of appearance ("receives
a = 6402 pallets of b = 5184 boxes each"): ``metadata["quantities"]`` maps the letters to the numbers (the
calculator and the Python tool may use them by name) and ``metadata["named_expression"]`` is the expression
over the letters. A model then need not copy the digits into its expression, only choose the operations.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass
from fractions import Fraction

from pettingllms.envs.math.data import MathProblem

__all__ = ["ARITH_LEVELS", "STORIES", "Story", "generate", "python_program"]

ARITH_LEVELS = (1, 2, 3)

# (smallest, largest) number drawn at each level: factors and single amounts, then the divisor (level 3).
_RANGES = {1: (10, 999), 2: (100, 9999), 3: (100, 9999)}
_DIVISOR = (3, 99)


@dataclass(frozen=True)
class Story:
    """The sentences of one template; ``{n}`` / ``{k}`` are the numbers (count and size of a product)."""

    name: str
    subject: str  # the opening noun phrase; later sentences say "it"
    gain: str  # a product added: {n} groups of {k}
    loss: str  # a product taken away
    gain_one: str  # a single amount {n} added
    loss_one: str  # a single amount {n} taken away
    share: str  # level 3: what is left split equally {n} ways
    question: str
    share_question: str


STORIES: tuple[Story, ...] = (
    Story("shop", "A hardware shop", "receives {n} crates holding {k} screws each", "sells {n} boxes of {k} screws each",
          "finds {n} more screws in the stockroom", "sells {n} single screws",
          "The remaining screws are split equally among {n} branch stores",
          "How many screws does the shop have now?", "How many screws does each branch store get?"),
    Story("farm", "A poultry farm", "collects {n} trays of {k} eggs each", "sells {n} cartons of {k} eggs each",
          "collects another {n} eggs from the barn", "finds {n} broken eggs and throws them away",
          "All remaining eggs are shared equally among {n} local markets",
          "How many eggs does the farm have now?", "How many eggs does each market receive?"),
    Story("travel_club", "A travel club", "saves {k} dollars a week for {n} weeks", "buys {n} train tickets at {k} dollars each",
          "receives a gift of {n} dollars", "pays a hotel deposit of {n} dollars",
          "The remaining money is divided equally among the club's {n} members",
          "How many dollars does the club have now?", "How many dollars does each member get?"),
    Story("factory", "A factory", "produces {n} batches of {k} bolts each", "ships {n} pallets of {k} bolts each",
          "produces {n} extra bolts on a night shift", "scraps {n} faulty bolts",
          "The bolts in stock are then packed equally into {n} crates",
          "How many bolts does the factory have in stock now?", "How many bolts go into each crate?"),
    Story("library", "A city library", "buys {n} boxes of {k} books each", "donates {n} boxes of {k} books each to schools",
          "receives {n} books as gifts", "removes {n} damaged books",
          "The remaining books are spread equally over {n} reading rooms",
          "How many books does the library have now?", "How many books go to each reading room?"),
    Story("bakery", "A bakery", "bakes {n} trays of {k} cookies each", "sells {n} tins of {k} cookies each",
          "bakes {n} more cookies by hand", "gives away {n} cookies as samples",
          "The remaining cookies are packed equally into {n} gift boxes",
          "How many cookies does the bakery have left?", "How many cookies go into each gift box?"),
    Story("reservoir", "A water reservoir", "takes in {k} litres per hour for {n} hours",
          "releases {k} litres per hour for {n} hours", "gains {n} litres from a rain shower",
          "loses {n} litres to evaporation", "The remaining water is shared equally among {n} villages",
          "How many litres does the reservoir hold now?", "How many litres does each village get?"),
    Story("fundraiser", "A school fundraiser", "sells {n} raffle tickets at {k} dollars each",
          "buys {n} prizes at {k} dollars each", "receives a donation of {n} dollars", "pays {n} dollars to rent a hall",
          "The money left is donated equally to {n} charities",
          "How many dollars does the fundraiser have left?", "How many dollars does each charity receive?"),
    Story("orchard", "An orchard", "picks {n} crates of {k} apples each", "sends {n} crates of {k} apples each to the juice press",
          "gathers {n} fallen apples", "throws away {n} bruised apples",
          "The remaining apples are shared equally among {n} grocery stores",
          "How many apples does the orchard have now?", "How many apples does each grocery store get?"),
    Story("bus_company", "A bus company", "buys {n} tanker loads of {k} litres of fuel each",
          "uses {k} litres of fuel a day for {n} days", "buys {n} more litres of fuel", "uses {n} litres of fuel on a charter trip",
          "The remaining fuel is split equally among its {n} buses",
          "How many litres of fuel does the company have now?", "How many litres of fuel does each bus get?"),
    Story("warehouse", "A warehouse", "receives {n} pallets of {k} boxes each", "ships {n} pallets of {k} boxes each",
          "receives {n} loose boxes", "loses {n} boxes in a flood",
          "The remaining boxes are sent equally to {n} stores",
          "How many boxes does the warehouse hold now?", "How many boxes does each store get?"),
)

# The steps after the first product: ("product" | "one", sign). Level 3 adds the equal split.
_STEPS = {
    1: ((("one", 1),), (("one", -1),)),
    2: ((("product", 1),), (("product", -1),), (("one", 1), ("one", -1)), (("one", -1), ("one", 1))),
}
_STEPS[3] = _STEPS[2]


def _draw(rng: random.Random, level: int) -> tuple[Story, list[str], str, list[str]] | None:
    """One attempt: (story, sentences, expression, worked steps), or None when a subtraction would not
    leave a positive amount (the caller draws again from the same generator)."""
    lo, hi = _RANGES[level]
    story = rng.choice(STORIES)
    n, k = rng.randint(lo, hi), rng.randint(lo, hi)
    value = Fraction(n * k)
    expression = f"{n} * {k}"
    sentences = [f"{story.subject} {story.gain.format(n=n, k=k)}."]
    worked = [f"{n} * {k} = {value}"]
    for kind, sign in rng.choice(_STEPS[level]):
        if kind == "product":
            n, k = rng.randint(lo, hi), rng.randint(lo, hi)
            amount, text, term = n * k, (story.gain if sign > 0 else story.loss).format(n=n, k=k), f"{n} * {k}"
            worked.append(f"{term} = {amount}")
        else:
            amount = rng.randint(lo, hi)
            text, term = (story.gain_one if sign > 0 else story.loss_one).format(n=amount), str(amount)
        if sign < 0 and amount >= value:
            return None
        new = value + sign * amount
        worked.append(f"{value} {'+' if sign > 0 else '-'} {amount} = {new}")
        value = new
        expression += f" {'+' if sign > 0 else '-'} {term}"
        sentences.append(f"Then it {text}.")
    if level == 3:
        divisors = [d for d in range(2, 1000) if value % d == 0]
        # Half the time an even split (an integer answer), otherwise any divisor (often a fraction).
        e = rng.choice(divisors) if divisors and rng.random() < 0.5 else rng.randint(*_DIVISOR)
        worked.append(f"{value} / {e} = {value / e}")
        expression = f"({expression}) / {e}"
        sentences.append(f"{story.share.format(n=e)}.")
        sentences.append(f"{story.share_question} Give the exact answer (a fraction if it does not divide evenly).")
    else:
        sentences.append(story.question)
    return story, sentences, expression, worked


_NUMBER = re.compile(r"\b\d+\b")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _named(question: str, expression: str) -> tuple[str, dict[str, int], str]:
    """The question with each number labelled by a letter (in order of appearance), the letters' values, and
    the expression over the letters (a number that occurs twice takes its first letter)."""
    quantities: dict[str, int] = {}

    def label(match: re.Match) -> str:
        letter = _LETTERS[len(quantities)]
        quantities[letter] = int(match.group())
        return f"{letter} = {match.group()}"

    labelled = _NUMBER.sub(label, question)
    first = {}
    for letter, value in quantities.items():
        first.setdefault(value, letter)
    return labelled, quantities, _NUMBER.sub(lambda m: first[int(m.group())], expression)


def generate(seed: int, level: int = 2, named: bool = False) -> MathProblem:
    """The problem for (``seed``, ``level``): same arguments, same problem (``named``: letters label the
    numbers, see the module docstring; the numbers, answer and expression are the same)."""
    from pettingllms.envs.math.calculator import evaluate, format_number

    if level not in ARITH_LEVELS or isinstance(level, bool):
        raise ValueError(f"arith `level` must be one of {ARITH_LEVELS}, got {level!r}")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"arith `seed` must be an int, got {seed!r}")
    rng = random.Random(f"arith-{level}-{seed}")
    drawn = None
    while drawn is None:
        drawn = _draw(rng, level)
    story, sentences, expression, worked = drawn
    question = " ".join(sentences)
    metadata = {"expression": expression, "level": level, "template": story.name}
    if named:
        question, quantities, named_expression = _named(question, expression)
        metadata.update(quantities=quantities, named_expression=named_expression)
    return MathProblem(
        problem_id=f"arith/L{level}/{seed}", dataset="arith", split="generated", question=question,
        answer=format_number(evaluate(expression)), solution="\n".join(worked), level=str(level), subject="arithmetic",
        metadata=metadata,
    )


# ------------------------------------------------------------------------------------------ the program

_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div)


class _Exact(ast.NodeTransformer):
    """Each int literal -> ``Fraction(literal)``, so that ``/`` is exact division."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        call = ast.Call(func=ast.Name(id="Fraction", ctx=ast.Load()), args=[node], keywords=[])
        return ast.copy_location(call, node)


def _check(node: ast.AST, expression: str) -> None:
    if isinstance(node, ast.Expression):
        return _check(node.body, expression)
    if isinstance(node, ast.BinOp) and isinstance(node.op, _OPERATORS):
        _check(node.left, expression)
        return _check(node.right, expression)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _check(node.operand, expression)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return None
    raise ValueError(f"python_program: only int literals, + - * / and parentheses are allowed; "
                     f"{ast.unparse(node)!r} ({type(node).__name__}) in {expression!r}")


def python_program(expression: str) -> str:
    """A Python program printing ``expression``'s exact value (``12345``, ``-7`` or ``3/4``, as
    :func:`~pettingllms.envs.math.calculator.format_number` writes it)."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as error:
        raise ValueError(f"python_program: {expression!r} is not an expression ({error.msg})") from error
    _check(tree, expression)
    exact = ast.fix_missing_locations(_Exact().visit(tree))
    # str(Fraction) is "12345" for an integer and "3/4" (lowest terms, sign in front) otherwise.
    return f"from fractions import Fraction\n\nprint({ast.unparse(exact.body)})\n"
