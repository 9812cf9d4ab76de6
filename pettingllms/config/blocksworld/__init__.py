"""Shipped blocksworld configs (a package only so that its YAML files install with pettingllms)."""
