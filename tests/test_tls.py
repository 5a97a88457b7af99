"""slackquery.tls: the one TLS context of the outgoing HTTP clients still verifies."""

import ssl

from slackquery.tls import client_context


def test_the_shared_context_verifies_certificates_and_host_names() -> None:
    context = client_context()
    assert context is client_context()  # built once, its CA bundle loaded once
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0
