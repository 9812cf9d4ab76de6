"""Shipped search configs (a package only so that its YAML files install with pettingllms)."""
