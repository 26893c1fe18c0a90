"""More `firefeed` subcommands: every module here with a `register(subparsers)` function is added to the CLI.

A module registers its subparser and sets `func` to a function taking the
parsed args and returning the exit code, like the commands in firefeed/cli.py.
"""

#: `--accept-invalid` of `run` and `trigger` (SPEC 10 C3)
ACCEPT_INVALID_HELP = (
    "publish even when more of an export's items have channel errors than its max_invalid allows "
    "(fail_on: error included)"
)

#: `--full` of `run` and `trigger` (SPEC 11 I2)
FULL_HELP = "recompute every item, even when no source, lookup or the spec changed since the last succeeded run"
