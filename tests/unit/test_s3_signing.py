"""The topology's S3 client signs as AWS documents it: the "GET Bucket (List Objects)"
example of the Signature Version 4 reference (Authenticating Requests: Using the
Authorization Header), whose signature is published with it."""

from __future__ import annotations

import datetime

import pytest

from pipelines_dev.s3 import S3

pytestmark = pytest.mark.unit


def test_the_published_list_objects_example_signs_to_its_published_signature():
    client = S3(
        "https://examplebucket.s3.amazonaws.com",
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    )
    when = datetime.datetime(2013, 5, 24, tzinfo=datetime.UTC)
    headers = client.headers("GET", "/", {"max-keys": "2", "prefix": "J"}, b"", when)
    assert headers["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
        "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
    )
    assert headers["x-amz-date"] == "20130524T000000Z"


def test_the_secret_key_is_not_in_the_client_printout():
    assert "SECRET" not in repr(S3("http://127.0.0.1:1", "ak", "SECRET"))
