"""Celery tasks: thin wrappers that parse arguments and call the plain pipeline functions."""
