"""EXPORT: write a project's channel feeds (csv, tsv, json, jsonl, google-xml) from its items.

`resolve_export_path` says where a feed goes (and refuses paths that escape the
project's folder); `write_export` writes it atomically and reports rows, bytes
and SHA-256.
"""

from firefeed.export.paths import resolve_export_path
from firefeed.export.writer import ExportResult, reads_rows, view_reads_in_order, write_export

__all__ = ["ExportResult", "reads_rows", "resolve_export_path", "view_reads_in_order", "write_export"]
