"""Alerts (SPEC 10 C8): a signed JSON POST when a run fails, is blocked, recovers, or a delivery fails.

    spec.py     the `alerts:` entries of a project, and what only the server can judge at apply
    events.py   a run's end (or a failed delivery) becomes alerts, recorded in the outbox, never sent there
    outbox.py   the alert_deliveries table: record, claim a due alert, keep each attempt's outcome
    send.py     one signed POST through the fetcher's host rules
    sender.py   who sends: a Celery task when a broker is configured, else a bounded thread of this process

See docs/alerts.md for the body, the signature and the retry schedule.
"""
