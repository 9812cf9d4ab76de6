"""The generated task ``search/synthetic``: a small invented world per seed, its corpus, and a multi-hop question.

Each seed makes its own world (``random.Random(f"search-synthetic-{seed}")``): 3 countries, 6 cities, 6 people
and 4 companies, every name invented from syllables (no two sharing a word within a world), with relations among them: a
city lies in a country (each country's first city is its capital), a person is born in a city in a year and has
a profession, a company is founded by a person in a year and has its headquarters in a city other than its
founder's birthplace. The corpus is one passage per entity (19 in all, in the FlashRAG form, titled by the
entity), and no passage names what another one says: a person's passage does not mention the company they
founded, so the answer needs one retrieval per hop. The two people who founded nothing, and the cities,
countries and companies not asked about, are the distractors.

The question (template drawn from the same generator, ``hops`` fixed by the config):

- 1 hop: "Who founded C?", "In which city was P born?", "In which country is the city of X?";
- 2 hops (default): "In which city was the founder of C born?", "In which year was the founder of C born?",
  "In which country is the headquarters of C?";
- 3 hops: "In which country was the founder of C born?" (the founder's birthplace is never in the country of C's
  headquarters, so the 2-hop shortcut through the headquarters is wrong).

``metadata["supporting_titles"]`` lists the passages of the hops in order (what the oracle searches for). The
world and the question are a pure function of (seed, hops); the names come from a space of millions, so the
worlds of held-out seeds share no question with the training seeds' and next to no name (tested on a sample).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from pettingllms.envs.search.corpus import Passage
from pettingllms.envs.search.data import SearchProblem

__all__ = ["HOPS", "TEMPLATES", "SyntheticTask", "generate"]

HOPS: tuple[int, ...] = (1, 2, 3)
#: The question templates of each hop count.
TEMPLATES: dict[int, tuple[str, ...]] = {
    1: ("founder", "birth_city", "city_country"),
    2: ("founder_birth_city", "founder_birth_year", "headquarters_country"),
    3: ("founder_birth_country",),
}

_ONSETS = ("b", "br", "ch", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "sk", "t", "tr", "v", "w",
           "y", "z")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ei", "ou", "au")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "k")
_CITY_ENDS = ("vik", "mora", "stad", "holm", "ford", "ria", "grad", "wick", "dale", "port", "mere", "burg")
_COUNTRY_ENDS = ("ia", "land", "onia", "mark", "istan", "ara")
_COMPANY_KINDS = (("Systems", "software"), ("Works", "steel"), ("Labs", "biotechnology"), ("Foods", "food"),
                  ("Motors", "car"), ("Textiles", "textile"), ("Robotics", "robotics"), ("Mining", "mining"),
                  ("Airways", "airline"), ("Energy", "energy"))
_PROFESSIONS = ("chemist", "engineer", "architect", "economist", "physician", "geologist", "composer", "lawyer",
                "pilot", "botanist")
_CITY_KINDS = ("coastal", "mountain", "river", "industrial", "university", "market", "harbour", "border")


@dataclass(frozen=True)
class SyntheticTask:
    """One generated instance: the question and the corpus of its world."""

    problem: SearchProblem
    passages: tuple[Passage, ...]


class _Names:
    """Invented names, no two sharing a word (so that every entity's passage is found by its own name)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words: set[str] = set()

    def _word(self, syllables: int, end: str = "") -> str:
        while True:
            word = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
                           for _ in range(syllables)) + end
            if len(word) >= 4 and word not in self.words:
                self.words.add(word)
                return word.capitalize()

    def person(self) -> str:
        return f"{self._word(2)} {self._word(2)}"

    def city(self) -> str:
        return self._word(2, self.rng.choice(_CITY_ENDS))

    def country(self) -> str:
        return self._word(2, self.rng.choice(_COUNTRY_ENDS))

    def company(self, kind: str) -> str:
        return f"{self._word(2)} {kind}"


def _world(rng: random.Random) -> dict:
    names = _Names(rng)
    countries = [names.country() for _ in range(3)]
    cities = {}
    for i in range(6):
        cities[names.city()] = {"country": countries[i] if i < 3 else rng.choice(countries),
                                "kind": rng.choice(_CITY_KINDS)}
    city_names = list(cities)
    people = {names.person(): {"city": rng.choice(city_names), "year": rng.randint(1921, 1975),
                               "profession": rng.choice(_PROFESSIONS)} for _ in range(6)}
    founders = rng.sample(list(people), 4)
    companies = {}
    for founder, (kind, industry) in zip(founders, rng.sample(_COMPANY_KINDS, 4)):
        born = people[founder]["city"]
        # Headquarters away from the founder's birthplace, and in another country where one is left.
        abroad = [c for c in city_names if cities[c]["country"] != cities[born]["country"]]
        hq = rng.choice(abroad or [c for c in city_names if c != born])
        companies[names.company(kind)] = {"founder": founder, "industry": industry, "hq": hq,
                                          "year": people[founder]["year"] + rng.randint(24, 45)}
    return {"countries": countries, "cities": cities, "people": people, "companies": companies}


def _a(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"


def _passages(world: dict, seed: int, rng: random.Random) -> list[Passage]:
    capitals = {}
    for city, facts in world["cities"].items():
        capitals.setdefault(facts["country"], city)
    texts = [(c, f"{c} is a country whose capital is {capitals[c]}.") for c in world["countries"]]
    texts += [(city, f"{city} is {_a(f['kind'])} city in {f['country']}.") for city, f in world["cities"].items()]
    texts += [(p, f"{p} is {_a(f['profession'])} who was born in {f['city']} in {f['year']}.")
              for p, f in world["people"].items()]
    texts += [(c, f"{c} is {_a(f['industry'])} company founded in {f['year']} by {f['founder']}. Its headquarters "
                  f"are in {f['hq']}.")
              for c, f in world["companies"].items()]
    rng.shuffle(texts)
    return [Passage(id=f"synthetic-{seed}-{i}", title=title, text=text) for i, (title, text) in enumerate(texts)]


def _question(world: dict, template: str, rng: random.Random) -> tuple[str, str, list[str]]:
    """(question, answer, supporting titles in hop order)."""
    company = rng.choice(list(world["companies"]))
    facts = world["companies"][company]
    founder = facts["founder"]
    person = world["people"][founder]
    if template == "founder":
        return f"Who founded {company}?", founder, [company]
    if template == "birth_city":
        who = rng.choice(list(world["people"]))
        return f"In which city was {who} born?", world["people"][who]["city"], [who]
    if template == "city_country":
        city = rng.choice(list(world["cities"]))
        return f"In which country is the city of {city}?", world["cities"][city]["country"], [city]
    if template == "founder_birth_city":
        return f"In which city was the founder of {company} born?", person["city"], [company, founder]
    if template == "founder_birth_year":
        return f"In which year was the founder of {company} born?", str(person["year"]), [company, founder]
    if template == "headquarters_country":
        hq = facts["hq"]
        return f"In which country is the headquarters of {company}?", world["cities"][hq]["country"], [company, hq]
    if template == "founder_birth_country":
        city = person["city"]
        return (f"In which country was the founder of {company} born?", world["cities"][city]["country"],
                [company, founder, city])
    raise ValueError(f"unknown synthetic template {template!r}")


@functools.lru_cache(maxsize=1024)
def generate(seed: int, hops: int = 2) -> SyntheticTask:
    """The instance of (``seed``, ``hops``): same arguments, same world, question and corpus."""
    if isinstance(hops, bool) or hops not in HOPS:
        raise ValueError(f"synthetic `hops` must be one of {list(HOPS)}, got {hops!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"synthetic `seed` must be an integer >= 0, got {seed!r}")
    rng = random.Random(f"search-synthetic-{seed}")
    world = _world(rng)
    passages = _passages(world, seed, rng)
    template = random.Random(f"search-synthetic-{hops}-{seed}").choice(TEMPLATES[hops])
    question, answer, titles = _question(world, template, rng)
    problem = SearchProblem(problem_id=f"synthetic/h{hops}/{seed}", dataset="synthetic", split="generated",
                            question=question, answers=[answer],
                            metadata={"template": template, "hops": hops, "supporting_titles": titles})
    return SyntheticTask(problem=problem, passages=tuple(passages))
