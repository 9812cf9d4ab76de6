"""Environments: the base class and shared state, the game workflow, and one package per environment.

Importing this package does not import any environment; use :mod:`pettingllms.registry` (or import
``pettingllms.envs.<name>`` directly).
"""
