"""A throwaway certificate authority and server certificate, made with the ``openssl`` command.

The cold-start mode measures ``https://`` first calls against a local server; both the raw
client and qa_min trust the throwaway CA through ``SSL_CERT_FILE``, so each does the same
handshake with the same trust store. The standard library can use certificates but not make
them, hence the ``openssl`` command line (OpenSSL 1.1.1+ or LibreSSL).

The CA and the server certificate carry the extensions that Python 3.13's strict verification
(``VERIFY_X509_STRICT``) requires: a critical ``basicConstraints``, ``keyUsage``, and key
identifiers; the server certificate names ``127.0.0.1`` and ``localhost``.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple

CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = placeholder
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
"""


class Certificates(NamedTuple):
    """Files: the CA certificate (what clients trust), the server's certificate and its key."""

    ca: str
    cert: str
    key: str


class CertificateError(Exception):
    """``openssl`` is missing or failed."""


def openssl() -> str:
    """The ``openssl`` command's path.

    Raises:
        CertificateError: There is none on ``PATH``.
    """
    found = shutil.which("openssl")
    if found is None:
        raise CertificateError("the openssl command is not installed")
    return found


def make_certificates(directory: Path) -> Certificates:
    """Write a new CA and a server certificate for 127.0.0.1/localhost into ``directory``.

    Raises:
        CertificateError: ``openssl`` is missing or failed (its message is included).
    """
    tool = openssl()
    config = directory / "openssl.cnf"
    config.write_text(CONFIG)
    names = ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem")
    files = {name: str(directory / name) for name in names}
    cnf = str(config)
    days = "2"  # throwaway: made for one run
    serial = "0x" + secrets.token_hex(8)
    steps = [
        ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", files["ca.key"]],
        ["req", "-x509", "-new", "-key", files["ca.key"], "-config", cnf, "-extensions", "ca", "-days", days,
         "-subj", "/CN=qa_min benchmarks throwaway CA", "-sha256", "-out", files["ca.pem"]],
        ["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", files["server.key"]],
        ["req", "-new", "-key", files["server.key"], "-config", cnf, "-subj", "/CN=localhost",
         "-out", files["server.csr"]],
        ["x509", "-req", "-in", files["server.csr"], "-CA", files["ca.pem"], "-CAkey", files["ca.key"],
         "-set_serial", serial, "-days", days, "-sha256", "-extfile", cnf, "-extensions", "leaf",
         "-out", files["server.pem"]],
    ]  # fmt: skip
    for step in steps:
        proc = subprocess.run([tool, *step], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise CertificateError(f"openssl {step[0]} failed: {proc.stderr.strip()}")
    return Certificates(files["ca.pem"], files["server.pem"], files["server.key"])
