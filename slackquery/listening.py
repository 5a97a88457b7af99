"""Listening sockets for the HTTP servers (`serve`, `embed-server`), bound before uvicorn
starts so that an address that cannot be used is one line naming it; and the one rule of
what counts as loopback, which decides what each server guards."""

import ipaddress
import socket

from slackquery.errors import SlackqueryError


def is_loopback(host: str) -> bool:
    """Whether `host` (a bind address, or `localhost`) is this machine's loopback; an IPv6
    address may carry its zone (`%lo`), an IPv4 one may be mapped (`::ffff:127.0.0.1`)."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.split("%")[0])
    except ValueError:  # another host name
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def bracketed(host: str) -> str:
    """`host` as a URL or `Host` header spells it before `:port`: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def listen_on(host: str, port: int) -> list[socket.socket]:
    """Sockets listening on every address `host` resolves to, as asyncio's `create_server`
    binds them, or a one-line error naming HOST:PORT: uvicorn, left to bind, logs a
    failure between its own lines without the address it tried and exits with 3."""
    sockets: list[socket.socket] = []
    try:
        resolved = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, protocol, _, address in dict.fromkeys(resolved):
            sock = socket.socket(family, kind, protocol)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio does: a dual-stack `::` takes `0.0.0.0`
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(socket.SOMAXCONN)  # connections queue from the start line on
    except (OSError, OverflowError, UnicodeError) as error:
        for sock in sockets:
            sock.close()
        if isinstance(error, UnicodeError):  # the codec's words for a label over 63 characters
            reason = "not a host name"
        else:
            reason = getattr(error, "strerror", None) or str(error)
        raise SlackqueryError(
            f"cannot listen on {bracketed(host)}:{port}: {reason[:1].lower() + reason[1:]}"
        ) from None
    return sockets
