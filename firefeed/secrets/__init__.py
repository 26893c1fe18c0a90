"""Per-company secrets: `${secret:NAME}` in a source's headers and URL, encrypted at rest.

`crypto` encrypts with the operator's FIREFEED_SECRETS_KEY, `store` keeps the
ciphertext in the control plane, `references` parses and expands `${secret:NAME}`
and `${VAR}` and hides the expanded values again in every message.
"""
