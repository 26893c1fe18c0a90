"""The pipeline steps: fetch, parse, merge, rules, export (no Celery here)."""
