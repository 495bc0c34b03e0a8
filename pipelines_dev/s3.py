"""A small S3 client (path-style requests, AWS Signature Version 4) for the topology's object
store: creating its bucket at start and listing what Flink wrote there.

The jobs never use this: Flink reaches the store through its S3 filesystem plugin. It is the
standard library only, so that the host needs no SDK to check the store; a request signed
wrongly is refused by the store (403), which the topology's start reports.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_UNRESERVED = "-_.~"


class S3Error(Exception):
    """The store refused a request or did not answer; the message says which and why."""


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signing_key(secret_key: str, date: str, region: str) -> bytes:
    key = _hmac(("AWS4" + secret_key).encode(), date)
    for part in (region, "s3", "aws4_request"):
        key = _hmac(key, part)
    return key


@dataclass(frozen=True)
class S3:
    endpoint: str  # http://host:port
    access_key: str
    secret_key: str = field(repr=False)
    region: str = "us-east-1"
    timeout_s: float = 10.0

    def headers(
        self, method: str, path: str, query: dict[str, str], body: bytes, now: datetime.datetime
    ) -> dict[str, str]:
        """The request's headers, Authorization included (AWS Signature Version 4)."""
        host = urllib.parse.urlsplit(self.endpoint).netloc
        stamp, date = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        payload = hashlib.sha256(body).hexdigest()
        signed = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": stamp}
        names = ";".join(sorted(signed))
        canonical = "\n".join(
            [
                method,
                urllib.parse.quote(path, safe="/" + _UNRESERVED),
                "&".join(
                    f"{urllib.parse.quote(k, safe=_UNRESERVED)}="
                    f"{urllib.parse.quote(v, safe=_UNRESERVED)}"
                    for k, v in sorted(query.items())
                ),
                "".join(f"{k}:{signed[k]}\n" for k in sorted(signed)),
                names,
                payload,
            ]
        )
        scope = f"{date}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
        )
        signature = hmac.new(
            signing_key(self.secret_key, date, self.region), to_sign.encode(), hashlib.sha256
        ).hexdigest()
        return {
            "x-amz-content-sha256": payload,
            "x-amz-date": stamp,
            "Authorization": f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
            f"SignedHeaders={names}, Signature={signature}",
        }

    def request(
        self, method: str, path: str, query: dict[str, str] | None = None, body: bytes = b""
    ) -> tuple[int, bytes]:
        query = query or {}
        now = datetime.datetime.now(datetime.UTC)
        url = self.endpoint + urllib.parse.quote(path, safe="/" + _UNRESERVED)
        if query:
            url += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        request = urllib.request.Request(
            url,
            data=body if method in ("PUT", "POST") else None,
            method=method,
            headers=self.headers(method, path, query, body, now),
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError as exc:
            raise S3Error(f"{method} {self.endpoint}{path}: {exc}") from exc

    def create_bucket(self, bucket: str) -> None:
        status, body = self.request("PUT", f"/{bucket}")
        if status == 200 or (status == 409 and b"BucketAlreadyOwnedByYou" in body):
            return
        raise S3Error(f"creating bucket {bucket} at {self.endpoint}: {status} {_code(body)}")

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under `prefix` (ListObjectsV2, page by page)."""
        keys: list[str] = []
        query = {"list-type": "2", "prefix": prefix}
        while True:
            status, body = self.request("GET", f"/{bucket}", query)
            if status != 200:
                raise S3Error(f"listing s3://{bucket}/{prefix}: {status} {_code(body)}")
            root = ET.fromstring(body)
            keys += [c.findtext(f"{_NS}Key", "") for c in root.iter(f"{_NS}Contents")]
            token = root.findtext(f"{_NS}NextContinuationToken")
            if root.findtext(f"{_NS}IsTruncated") != "true" or not token:
                return keys
            query = {**query, "continuation-token": token}


def _code(body: bytes) -> str:
    """The error code of an S3 error document (e.g. SignatureDoesNotMatch), or its start."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return body[:200].decode(errors="replace")
    return " ".join(filter(None, (root.findtext("Code"), root.findtext("Message"))))
