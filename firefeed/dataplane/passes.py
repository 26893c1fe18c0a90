"""How a run's pass tables are numbered: the plan every runner, view and export's own rules share.

A number goes into the table's name (`names.rules_tmp_table(run_id, number)`), so two parts, two
passes or two exports of one run never meet on a name, and the number alone orders a view's parts
(`views.parts_of_view`).
"""

from __future__ import annotations

#: the pass table of part h (1 ..< SEGMENT_STRIDE) of pass p is numbered p * SEGMENT_STRIDE + h (a run
#: in one part numbers it p); the view over the parts' last tables (the rules' result) is number 0, or
#: first_pass * SEGMENT_STRIDE for an export's own rules
SEGMENT_STRIDE = 100

#: an export's channel-rule pass tables are numbered from (export index + 1) * this, apart from the
#: project's passes (1, 2, ... and p * 100 + h for a run's parts), whose result they read
CHANNEL_PASS_STRIDE = 10_000_000


def part_number(pass_number: int, part: int, parts: int) -> int:
    """The pass table number of part `part` (1-based) of `parts` of pass `pass_number`."""
    return pass_number if parts == 1 else pass_number * SEGMENT_STRIDE + part


def result_view_number(first_pass: int) -> int:
    """The number of the view over a split run's parts: 0 for the project's rules, first_pass * SEGMENT_STRIDE
    for an export's own (whose first pass is `first_pass`)."""
    return 0 if first_pass == 1 else first_pass * SEGMENT_STRIDE


def channel_first_pass(index: int) -> int:
    """The first pass number of export `index`'s own rules (P29)."""
    return (index + 1) * CHANNEL_PASS_STRIDE + 1
