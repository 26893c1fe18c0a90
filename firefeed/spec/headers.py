"""What a request header may be (RFC 9110): checked in the spec, and again once references are expanded.

The spec refuses a bad name or a literal line break at once, naming
`sources[i].headers`; the fetch checks the value again after `${secret:…}` and
`${VAR}` are expanded, since a secret may hold what the spec could not show.
"""

from __future__ import annotations

import re

#: a field name is an RFC 9110 token
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: visible ASCII, space and tab: no line break (header injection), nothing httpx would encode its own way
HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")
