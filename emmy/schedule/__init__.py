"""Schedules: the plan of a decided kernel (`plan.py` and one module per kind), kernel keys and the legal space."""
