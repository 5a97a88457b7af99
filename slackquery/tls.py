"""The TLS context of the project's outgoing HTTP clients (the Slack Web API, embedding
endpoints): httpx's default verification, built once per process."""

import ssl
from functools import cache

import httpx


@cache
def client_context() -> ssl.SSLContext:
    """httpx's default context: certificates and host names verified against certifi's CA
    bundle, or `SSL_CERT_FILE` / `SSL_CERT_DIR` as set at the first call.

    Loading the bundle costs about 50 ms, and without a context of their own httpx clients
    each load it again: a sync run makes one client, and so does each embedding endpoint.
    """
    return httpx.create_ssl_context()
