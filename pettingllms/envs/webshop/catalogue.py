"""The shop's catalogue: products generated from a seed, and the search engine the site runs over them.

A catalogue is a pure function of ``(catalogue_seed, num_products)`` (:func:`get_catalogue`, cached per
process), so the HTTP server and the environment, which regenerate it independently, see the same products.

Each product has

- an id (``B0`` + 8 letters and digits, as Amazon's ASINs that WebShop uses),
- a category and a product type (``clothing`` / ``shirt``), drawn from :data:`PRODUCT_TYPES`,
- attributes: one base attribute (a material, or what the product is made as: ``cotton``, ``organic``,
  ``wireless``) and 1 to 3 features (``long sleeve``, ``machine wash``),
- options: for each option family of its type (``size``, ``color``, ``pack``, ...) the values this
  product is offered in (a subset of the family's values, at least two where the family has them),
- a price and a title (brand, style word, base attribute, type, the first features).

Search (:func:`search`): the query and every product are lower-cased and split into word tokens
(:func:`tokens`: filler words dropped, a plural ``s`` stripped); a product's score is the sum of the inverse
document frequencies ``log(1 + N / df)`` of the distinct query tokens it contains, over its title, category,
type, attributes and option values. Products with a positive score are ranked by score, then by catalogue
order, and the first :data:`MAX_RESULTS` are the results.
"""

from __future__ import annotations

import functools
import math
import random
import re
import string
from dataclasses import dataclass

__all__ = [
    "CATEGORIES",
    "MAX_RESULTS",
    "OPTION_VALUES",
    "PRODUCT_TYPES",
    "RESULTS_PER_PAGE",
    "STOPWORDS",
    "Catalogue",
    "Product",
    "ProductType",
    "get_catalogue",
    "search",
    "tokens",
]

#: Results per results page, and the most results a search returns (10 pages).
RESULTS_PER_PAGE = 5
MAX_RESULTS = 50

_COLORS = ("black", "white", "red", "blue", "green", "grey", "navy", "beige", "pink", "yellow")

#: The value pools of the option families, in the order the site lists them; a product type names each of its
#: options with a pool (``size`` is ``clothing sizes`` for a shirt, ``shoe sizes`` for boots).
OPTION_VALUES: dict[str, tuple[str, ...]] = {
    "colors": _COLORS,
    "clothing sizes": ("xs", "s", "m", "l", "xl", "xxl"),
    "shoe sizes": ("6", "7", "8", "9", "10", "11", "12"),
    "bed sizes": ("twin", "full", "queen", "king"),
    "pillow sizes": ("standard", "queen", "king"),
    "packs": ("pack of 1", "pack of 2", "pack of 3", "pack of 6", "pack of 12"),
    "capacities": ("12 oz", "16 oz", "20 oz"),
    "tea flavors": ("green", "black", "chamomile", "peppermint", "earl grey"),
    "roasts": ("light roast", "medium roast", "dark roast", "vanilla", "hazelnut"),
    "weights": ("12 oz", "2 lb", "5 lb"),
    "bar flavors": ("chocolate", "peanut butter", "berry", "coconut"),
    "scents": ("lavender", "coconut", "citrus", "unscented", "tea tree"),
    "bottles": ("8 oz", "16 oz", "32 oz"),
    "models": ("iphone 13", "iphone 14", "iphone 15", "galaxy s23"),
    "wattages": ("20w", "30w", "65w"),
}


@dataclass(frozen=True)
class ProductType:
    """One kind of product: its category, type name, base attributes, features, options (``(name, pool)``:
    the option's name on the site and the :data:`OPTION_VALUES` pool its values come from) and price range."""

    category: str
    name: str
    bases: tuple[str, ...]
    features: tuple[str, ...]
    options: tuple[tuple[str, str], ...]
    price: tuple[int, int]


def _type(category: str, name: str, bases: str, features: str, options: str, price: tuple[int, int]) -> ProductType:
    pairs = tuple(tuple(part.split("=")) for part in options.split(","))
    return ProductType(category, name, tuple(bases.split(",")), tuple(features.split(",")), pairs, price)  # type: ignore[arg-type]


_SIZE_COLOR = "size=clothing sizes,color=colors"
_SHOE = "size=shoe sizes,color=colors"

#: The product types of the shop (every one has at least one option).
PRODUCT_TYPES: tuple[ProductType, ...] = (
    _type("clothing", "shirt", "cotton,linen,polyester,flannel",
          "long sleeve,short sleeve,slim fit,button down,machine wash,wrinkle free", _SIZE_COLOR, (12, 60)),
    _type("clothing", "t-shirt", "cotton,polyester,bamboo", "short sleeve,crew neck,v neck,moisture wicking,machine wash",
          _SIZE_COLOR, (8, 35)),
    _type("clothing", "hoodie", "cotton,fleece,polyester", "pullover,zip up,machine wash,kangaroo pocket", _SIZE_COLOR,
          (20, 70)),
    _type("clothing", "jacket", "polyester,denim,leather,wool", "water resistant,windproof,zip up,insulated",
          _SIZE_COLOR, (35, 150)),
    _type("clothing", "dress", "cotton,linen,chiffon,polyester", "sleeveless,midi length,floral print,machine wash",
          _SIZE_COLOR, (20, 90)),
    _type("shoes", "sneakers", "canvas,mesh,leather", "lightweight,non slip,memory foam,lace up", _SHOE, (25, 120)),
    _type("shoes", "boots", "leather,suede,rubber", "water resistant,non slip,ankle high,side zip", _SHOE, (40, 180)),
    _type("shoes", "sandals", "leather,rubber,foam", "open toe,adjustable strap,arch support,quick dry", _SHOE,
          (15, 70)),
    _type("home", "blanket", "fleece,cotton,microfiber,wool", "machine wash,extra soft,lightweight,all season",
          "size=bed sizes,color=colors", (20, 90)),
    _type("home", "pillow", "memory foam,bamboo,cotton,feather", "hypoallergenic,cooling,washable cover,firm support",
          "size=pillow sizes,pack=packs", (15, 70)),
    _type("home", "mug", "ceramic,glass,stainless steel", "dishwasher safe,microwave safe,insulated,with lid",
          "size=capacities,color=colors", (8, 35)),
    _type("home", "lamp", "metal,wood,ceramic,glass", "dimmable,usb charging,touch control,energy saving",
          "color=colors", (18, 110)),
    _type("grocery", "tea", "organic,decaf,caffeine free", "gluten free,non gmo,individually wrapped,kosher",
          "flavor=tea flavors,pack=packs", (4, 30)),
    _type("grocery", "coffee", "organic,decaf,fair trade", "whole bean,ground,low acid,kosher",
          "flavor=roasts,size=weights", (7, 40)),
    _type("grocery", "snack bars", "organic,vegan,keto", "gluten free,high protein,low sugar,non gmo",
          "flavor=bar flavors,pack=packs", (6, 40)),
    _type("beauty", "shampoo", "sulfate free,paraben free,organic", "for dry hair,for curly hair,color safe,cruelty free",
          "scent=scents,size=bottles", (6, 35)),
    _type("beauty", "lotion", "shea butter,aloe vera,oat", "for dry skin,non greasy,fast absorbing,cruelty free",
          "scent=scents,size=bottles", (5, 30)),
    _type("electronics", "headphones", "wireless,wired", "noise cancelling,over ear,in ear,long battery life,foldable",
          "color=colors", (15, 200)),
    _type("electronics", "phone case", "silicone,leather,clear", "shockproof,slim,magnetic,card holder",
          "model=models,color=colors", (6, 40)),
    _type("electronics", "charger", "usb c,wireless", "fast charging,foldable plug,dual port,compact",
          "wattage=wattages", (10, 60)),
)

#: The categories, in the order of :data:`PRODUCT_TYPES`.
CATEGORIES: tuple[str, ...] = tuple(dict.fromkeys(t.category for t in PRODUCT_TYPES))

_BRANDS = ("Northwind", "Bluepeak", "Evergreen", "Solstice", "Harbor", "Kestrel", "Marlow", "Quill", "Redfern",
           "Tidewater", "Umber", "Vantage", "Willow", "Zephyr", "Amberly", "Cobalt")
_STYLES = ("classic", "everyday", "premium", "essential", "modern", "vintage", "sport", "deluxe")

#: Words a query or an instruction holds that say nothing about a product (dropped before matching).
STOPWORDS = frozenset(
    "a an and the of for with in on to i me my am is are be it its that this want need looking would like find "
    "please buy get some price lower than dollars dollar under color colour size option options".split()
)
_WORD = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """The search tokens of ``text``: lower-cased runs of letters and digits, filler words (:data:`STOPWORDS`)
    dropped, a plural ``s`` stripped from words of 4 or more letters (not from ``ss``)."""
    out = []
    for word in _WORD.findall(text.lower()):
        if word in STOPWORDS:
            continue
        if len(word) >= 4 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.append(word)
    return out


@dataclass(frozen=True)
class Product:
    """One product of the catalogue (see the module docstring). ``options`` maps each option family to the
    values this product is offered in, as ``((name, (value, ...)), ...)``."""

    pid: str
    index: int
    title: str
    brand: str
    category: str
    ptype: str
    attributes: tuple[str, ...]
    options: tuple[tuple[str, tuple[str, ...]], ...]
    price: float

    def option_values(self, name: str) -> tuple[str, ...]:
        """The values this product offers for option family ``name`` (empty: not an option of it)."""
        for option, values in self.options:
            if option == name:
                return values
        return ()

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.options)

    def search_text(self) -> str:
        values = " ".join(v for _, vs in self.options for v in vs)
        return " ".join([self.title, self.category, self.ptype, *self.attributes, values])


@dataclass(frozen=True)
class Catalogue:
    """The products of one ``(seed, num_products)`` with their search index."""

    seed: int
    products: tuple[Product, ...]
    by_id: dict[str, Product]
    index: tuple[frozenset[str], ...]
    idf: dict[str, float]

    @property
    def key(self) -> str:
        """The catalogue as the site's URLs name it (the ``shop`` parameter): ``<seed>-<num_products>``."""
        return f"{self.seed}-{len(self.products)}"

    def product(self, pid: str) -> Product | None:
        return self.by_id.get(pid.upper())


def _pid(rng: random.Random, taken: set[str]) -> str:
    alphabet = string.ascii_uppercase + string.digits
    while True:
        pid = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        if pid not in taken:
            taken.add(pid)
            return pid


def _title(brand: str, style: str, kind: ProductType, base: str, features: list[str]) -> str:
    head = f"{brand} {style.title()} {base.title()} {kind.name.title()}"
    return ", ".join([head, *(f.title() for f in features[:2])])


def _product(rng: random.Random, index: int, taken: set[str]) -> Product:
    kind = PRODUCT_TYPES[rng.randrange(len(PRODUCT_TYPES))]
    brand, style = rng.choice(_BRANDS), rng.choice(_STYLES)
    base = rng.choice(kind.bases)
    features = rng.sample(kind.features, rng.randint(1, min(3, len(kind.features))))
    options = []
    for name, pool_name in kind.options:
        pool = OPTION_VALUES[pool_name]
        count = rng.randint(min(2, len(pool)), min(5, len(pool)))
        chosen = set(rng.sample(pool, count))
        options.append((name, tuple(v for v in pool if v in chosen)))
    low, high = kind.price
    price = round(rng.randint(low, high) - 0.01, 2)
    return Product(
        pid=_pid(rng, taken),
        index=index,
        title=_title(brand, style, kind, base, features),
        brand=brand,
        category=kind.category,
        ptype=kind.name,
        attributes=(base, *features),
        options=tuple(options),
        price=price,
    )


@functools.lru_cache(maxsize=8)
def get_catalogue(seed: int, num_products: int) -> Catalogue:
    """The catalogue of ``seed`` with ``num_products`` products (generated once per process)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"`catalogue_seed` must be an integer >= 0, got {seed!r}")
    if isinstance(num_products, bool) or not isinstance(num_products, int) or not 1 <= num_products <= 10_000:
        raise ValueError(f"`num_products` must be an integer in [1, 10000], got {num_products!r}")
    rng = random.Random(f"webshop-catalogue:{seed}")
    taken: set[str] = set()
    products = tuple(_product(rng, i, taken) for i in range(num_products))
    index = tuple(frozenset(tokens(p.search_text())) for p in products)
    df: dict[str, int] = {}
    for words in index:
        for word in words:
            df[word] = df.get(word, 0) + 1
    idf = {word: math.log(1.0 + num_products / count) for word, count in df.items()}
    return Catalogue(seed, products, {p.pid: p for p in products}, index, idf)


@functools.lru_cache(maxsize=2048)
def _search(seed: int, num_products: int, query_tokens: tuple[str, ...]) -> tuple[str, ...]:
    catalogue = get_catalogue(seed, num_products)
    scored = []
    for product, words in zip(catalogue.products, catalogue.index):
        score = sum(catalogue.idf[t] for t in query_tokens if t in words)
        if score > 0:
            scored.append((-score, product.index, product.pid))
    scored.sort()
    return tuple(pid for _, _, pid in scored[:MAX_RESULTS])


def search(catalogue: Catalogue, query: str) -> tuple[str, ...]:
    """The ids of the products ``query`` finds, best first (at most :data:`MAX_RESULTS`; see the module
    docstring for the ranking)."""
    distinct = tuple(sorted(set(tokens(query))))
    return _search(catalogue.seed, len(catalogue.products), distinct)
