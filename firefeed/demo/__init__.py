"""`firefeed demo`: the shipped sample project, run end to end."""

from firefeed.demo.runner import run_demo

__all__ = ["run_demo"]
