"""The HTTP API (FastAPI) and the run timeline page: `firefeed api` serves `create_app()`."""
