"""Pure parts of the channel-grade checks (#49): the GS1 check digit and the fetcher's table spelled for SQL."""

from __future__ import annotations

import ipaddress

import pytest

from firefeed.export.channel_checks import gtin_is_valid
from firefeed.pipeline._netguard import special_networks_sql, special_range


@pytest.mark.parametrize(
    ("gtin", "valid"),
    [("96385074", True), ("96385073", False), ("036000291452", True), ("036000291450", False),
     ("4006381333931", True), ("4006381333930", False), ("10012345678902", True), ("10012345678900", False),
     ("4006381333", False), ("４００６３８１３３３９３１", False), ("", False)],
)  # fmt: skip
def test_a_gtin_is_valid_only_with_a_gs1_length_and_check_digit(gtin: str, valid: bool) -> None:
    assert gtin_is_valid(gtin) is valid


def test_the_sql_table_is_the_fetchers_table_and_its_wrapped_images_are_judged_alike() -> None:
    nets = special_networks_sql()
    for key in ("v4", "v6", "wrapped"):
        for text in nets[key]:
            net = ipaddress.ip_network(text)
            # both ends of every range are refused by the fetcher's own judge
            assert special_range(net.network_address) is not None, text
            assert special_range(net.broadcast_address) is not None, text
    assert len(nets["wrapped"]) == 3 * len(nets["v4"])
    public = ipaddress.ip_address("93.184.216.34")
    for wrapper in nets["wrappers"]:
        image = ipaddress.ip_network(wrapper)
        shift = 80 if image.prefixlen == 16 else 0
        inside = ipaddress.ip_address(int(image.network_address) + (int(public) << shift))
        assert special_range(inside) is None, wrapper  # a wrapped public address is public, as the fetcher says
        assert not any(inside in ipaddress.ip_network(n) for n in nets["wrapped"])
