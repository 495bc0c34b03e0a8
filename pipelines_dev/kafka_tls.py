"""TLS material for the local secure broker (`pipelines-dev kafka up --secure`), made at start
with openssl and keytool: a CA, the broker's certificate (SAN 127.0.0.1 and localhost) in a
PKCS12 keystore, and the CA as a client truststore in every form the clients take: PKCS12
and JKS for the Java clients (Flink's KafkaSource/KafkaSink), PEM for librdkafka.

Passwords are random, written to files beside the stores (mode 0600) and handed to the tools
as files, so a config refers to them as `${file:...}` and no command line shows them.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path


class TlsError(Exception):
    """A certificate or store could not be made; the message names the tool and its error."""


@dataclass(frozen=True)
class TlsFiles:
    dir: Path

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def ca_pem(self) -> Path:
        """The CA certificate: librdkafka's `ssl.ca.location`, a PEM truststore for Java."""
        return self.dir / "ca.pem"

    @property
    def broker_keystore(self) -> Path:
        return self.dir / "broker.p12"

    @property
    def truststore_p12(self) -> Path:
        return self.dir / "truststore.p12"

    @property
    def truststore_jks(self) -> Path:
        return self.dir / "truststore.jks"

    @property
    def store_password_file(self) -> Path:
        """The password of the broker keystore and of both truststores."""
        return self.dir / "store.password"

    def store_password(self) -> str:
        return self.store_password_file.read_text().strip()

    def complete(self) -> bool:
        return all(
            p.is_file()
            for p in (
                self.ca_pem,
                self.broker_keystore,
                self.truststore_p12,
                self.truststore_jks,
                self.store_password_file,
            )
        )


def _run(*cmd: str) -> None:
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        raise TlsError(f"{cmd[0]} {cmd[1]} failed: {lines[-1] if lines else result.returncode}")


def write_secret(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(value)  # no newline: keytool's -storepass:file would take it as part


def ensure_tls(directory: Path) -> TlsFiles:
    """Make the CA, broker keystore and client truststores once; reuse them after."""
    files = TlsFiles(directory)
    if files.complete():
        return files
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    password = secrets.token_urlsafe(18)
    write_secret(files.store_password_file, password)
    key, csr, cert = directory / "broker.key", directory / "broker.csr", directory / "broker.pem"
    ext = directory / "broker.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _run(
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
        "-keyout", str(files.ca_key), "-out", str(files.ca_pem),
        "-subj", "/CN=pipelines local Kafka CA",
    )  # fmt: skip
    _run(
        "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
        "-out", str(csr), "-subj", "/CN=localhost",
    )  # fmt: skip
    _run(
        "openssl", "x509", "-req", "-in", str(csr), "-CA", str(files.ca_pem),
        "-CAkey", str(files.ca_key), "-CAcreateserial", "-days", "825",
        "-extfile", str(ext), "-out", str(cert),
    )  # fmt: skip
    _run(
        "openssl", "pkcs12", "-export", "-in", str(cert), "-inkey", str(key),
        "-certfile", str(files.ca_pem), "-name", "broker",
        "-out", str(files.broker_keystore),
        "-passout", f"file:{files.store_password_file}",
    )  # fmt: skip
    for store, kind in ((files.truststore_p12, "PKCS12"), (files.truststore_jks, "JKS")):
        store.unlink(missing_ok=True)
        _run(
            "keytool", "-importcert", "-noprompt", "-alias", "pipelines-ca",
            "-file", str(files.ca_pem), "-keystore", str(store),
            "-storetype", kind, "-storepass:file", str(files.store_password_file),
        )  # fmt: skip
    for path in (key, csr, ext):
        path.unlink(missing_ok=True)
    for path in directory.iterdir():
        path.chmod(0o600)
    return files
