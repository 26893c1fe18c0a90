"""Rule preview: what a spec's rules do to a sample of its items, without touching the project (issue #9)."""

from firefeed.preview.models import Preview
from firefeed.preview.service import DEFAULT_ITEMS, MAX_ITEMS, preview_spec

__all__ = ["DEFAULT_ITEMS", "MAX_ITEMS", "Preview", "preview_spec"]
