"""WebShop: a searcher and a buyer shop on a generated web shop served over HTTP on 127.0.0.1.

The catalogue and instructions (:mod:`~pettingllms.envs.webshop.catalogue`,
:mod:`~pettingllms.envs.webshop.generator`), the stateless site (:mod:`~pettingllms.envs.webshop.site`) and
its HTTP server (:mod:`~pettingllms.envs.webshop.server`), the HTML -> text observation
(:mod:`~pettingllms.envs.webshop.page`), WebShop's action grammar (:mod:`~pettingllms.envs.webshop.parsers`),
the rewards (:mod:`~pettingllms.envs.webshop.rewards`), the environment (:class:`WebShopEnv`), its agents and
its scripted policies. See docs/webshop.md.
"""

from pettingllms.envs.webshop.agents import BuyerAgent, SearcherAgent, WebShopSingleAgent
from pettingllms.envs.webshop.catalogue import Catalogue, Product, get_catalogue, search
from pettingllms.envs.webshop.env import WebShopConfig, WebShopEnv, WebShopState
from pettingllms.envs.webshop.generator import HELD_OUT_SEED_START, Goal, make_goal
from pettingllms.envs.webshop.page import Page, parse_page
from pettingllms.envs.webshop.parsers import Action, format_actions, parse_actions
from pettingllms.envs.webshop.scripted import RandomWebShopPolicy, WebShopOraclePolicy, WrongWebShopPolicy

__all__ = [
    "HELD_OUT_SEED_START",
    "Action",
    "BuyerAgent",
    "Catalogue",
    "Goal",
    "Page",
    "Product",
    "RandomWebShopPolicy",
    "SearcherAgent",
    "WebShopConfig",
    "WebShopEnv",
    "WebShopOraclePolicy",
    "WebShopSingleAgent",
    "WebShopState",
    "WrongWebShopPolicy",
    "format_actions",
    "get_catalogue",
    "make_goal",
    "parse_actions",
    "parse_page",
    "search",
]
