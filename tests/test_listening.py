"""Where the HTTP servers listen: what counts as loopback, how an address is spelled."""

from slackquery.listening import bracketed, is_loopback


def test_loopback_is_any_address_of_it() -> None:
    loopback = ["127.0.0.1", "127.0.0.2", "::1", "::1%lo", "::ffff:127.0.0.1", "localhost"]
    assert all(map(is_loopback, loopback))
    elsewhere = ["0.0.0.0", "::", "192.168.1.4", "fe80::1%eth0", "example.com"]
    assert not any(map(is_loopback, elsewhere))


def test_an_ipv6_address_is_bracketed_before_its_port() -> None:
    assert [bracketed(host) for host in ("::1", "127.0.0.1", "localhost")] == [
        "[::1]",
        "127.0.0.1",
        "localhost",
    ]
