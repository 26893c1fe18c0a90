"""The project spec (SPEC section 2): models, loading and validation."""

from firefeed.spec.loader import load_spec, load_spec_file, parse_spec
from firefeed.spec.model import ExportSpec, ProjectSpec, SourceSpec

__all__ = ["ExportSpec", "ProjectSpec", "SourceSpec", "load_spec", "load_spec_file", "parse_spec"]
