"""The test suite's security switch: ``HEADWATER_TEST_TLS=1`` runs tests over TLS (mTLS).

With the switch on, :func:`configure` (called by tests/conftest.py at start-up) creates one CA
for the session, makes every :class:`headwater.dev.cluster.LocalCluster` that does not say
otherwise a TLS cluster signed by it (``LocalCluster.default_tls`` / ``default_ca_dir``), and
sets the process-default client security (CA + a ``CN=client`` certificate) so every client the
tests create without ``security=`` (producers, consumers, admin clients, the launcher's health
checks, :func:`headwater.dev.cluster.sync_channel`) speaks TLS to those clusters; the same
client files go to ``$HEADWATER_SECURITY_CONFIG`` so client subprocesses (CLI, child
consumers) do too.

``HEADWATER_TEST_SECURITY=1`` is TLS as above **plus** authentication and the authorizer:
every LocalCluster that does not say otherwise runs with ``--authorizer`` and one admin
password for the session, and the default client security also logs in with SCRAM as that
``admin`` (a super user; bearer token over mTLS), so the tests' clients are authenticated
super users. Raw channels that carry no token (:func:`headwater.dev.cluster.sync_channel`)
are the mTLS principal of the client certificate, which is made a super user too.
:func:`unconfigure` removes the CA folder. Off by default: plaintext.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path

ENV = "HEADWATER_TEST_TLS"
SECURITY_ENV = "HEADWATER_TEST_SECURITY"
_state: dict[str, Path] = {}


def security_on() -> bool:
    """TLS + SCRAM logins + authorizer (implies :func:`tls_on`)."""
    return os.environ.get(SECURITY_ENV, "") == "1"


def tls_on() -> bool:
    return os.environ.get(ENV, "") == "1" or security_on()


def configure() -> None:
    if not tls_on():
        return
    from headwater.client.security import (
        SECURITY_CONFIG_ENV,
        ClientSecurity,
        set_default_security,
    )
    from headwater.dev.cluster import LocalCluster
    from headwater.dev.tls import CertificateAuthority

    ca_dir = Path(tempfile.mkdtemp(prefix="headwater-test-tls-"))
    _state["ca_dir"] = ca_dir
    client = CertificateAuthority(ca_dir).issued("client")
    LocalCluster.default_tls = True
    LocalCluster.default_ca_dir = ca_dir
    files = {"ca_file": str(client.ca), "cert_file": str(client.cert), "key_file": str(client.key)}
    if security_on():
        from headwater.platform.principal import subject_dn

        password = secrets.token_hex(12)
        LocalCluster.default_authorizer = True
        LocalCluster.default_admin_password = password
        LocalCluster.default_super_users = (f"User:{subject_dn(client.cert.read_bytes())}",)
        files |= {"username": "admin", "password": password}
    config = ca_dir / "client.json"
    config.write_text(json.dumps(files))
    os.environ[SECURITY_CONFIG_ENV] = str(config)
    set_default_security(ClientSecurity(**files))


def unconfigure() -> None:
    os.environ.pop("HEADWATER_SECURITY_CONFIG", None)
    ca_dir = _state.pop("ca_dir", None)
    if ca_dir is not None:
        shutil.rmtree(ca_dir, ignore_errors=True)
