"""Sync of an export's items to a channel's API (SPEC 10 C9-C10): a ledger per export, sent as jobs."""
