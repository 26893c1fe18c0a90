"""More `firefeed` subcommands: every module here with a `register(subparsers)` function is added to the CLI.

A module registers its subparser and sets `func` to a function taking the
parsed args and returning the exit code, like the commands in firefeed/cli.py.
"""
