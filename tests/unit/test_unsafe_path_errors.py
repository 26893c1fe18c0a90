"""An unsafe_path error names whose path it is (a source, a lookup or an export), in its message and body."""

from __future__ import annotations

from typing import Any

import pytest

from firefeed.api.errors import error_body, status_of
from firefeed.config import Settings
from firefeed.errors import UnsafePathError
from firefeed.pipeline._netguard import resolve_local_path


def make_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"fetch_allow_private": False, "fetch_allowed_hosts": "", "local_sources_root": None}
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


def test_an_unsafe_path_names_its_source() -> None:
    with pytest.raises(UnsafePathError) as err:
        resolve_local_path("stock", "file://remote.example.com/x.csv", base_dir=None, settings=make_settings())
    assert (err.value.source, err.value.export) == ("stock", None)
    assert str(err.value).startswith("source 'stock': file URL")
    lookup = err.value.as_lookup()
    assert (lookup.source, str(lookup)) == ("stock", str(err.value).replace("source 'stock'", "lookup 'stock'", 1))


def test_an_unsafe_path_names_its_source_or_export_in_the_body() -> None:
    source = UnsafePathError("path '../x.csv' is outside the allowed folders", source="stock")
    assert error_body(source) == {
        "error": "unsafe_path",
        "message": "source 'stock': path '../x.csv' is outside the allowed folders",
        "source": "stock",
    }
    assert error_body(source.as_lookup())["message"].startswith("lookup 'stock': ")
    export = UnsafePathError("export path 'feed.xml' resolves outside the project's export folder").for_export("gmc")
    assert error_body(export) == {
        "error": "unsafe_path",
        "message": "export 'gmc': export path 'feed.xml' resolves outside the project's export folder",
        "export": "gmc",
    }
    # A path of FireFeed's own (a storage key) names neither.
    assert set(error_body(UnsafePathError("storage key '' must be a non-empty relative path"))) == {"error", "message"}


@pytest.mark.parametrize("url", ["../out.csv", "/etc/passwd", "file:///x%00.csv"])
def test_every_local_path_refusal_names_its_source(tmp_path: Any, url: str) -> None:
    with pytest.raises(UnsafePathError) as err:
        resolve_local_path("stock", url, base_dir=tmp_path, settings=make_settings())
    assert status_of(err.value) == 422 and error_body(err.value)["source"] == "stock"
