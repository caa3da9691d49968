"""Regenerates the botocore-derived vectors pinned in aws_sigv4_test.cc.

botocore (installed with moto) is AWS's own Python signer; these vectors check our SigV4
where the published test suite does not reach: S3 requests with Range, a session token,
requester pays and ListObjectsV2 queries with characters that need encoding.
Run: .venv/bin/python cpp/src/insitubatch/io/aws/aws_sigv4_vectors.py
"""

from __future__ import annotations

import datetime
from unittest import mock

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

DATE = datetime.datetime(2024, 3, 5, 7, 8, 9, tzinfo=datetime.timezone.utc)
EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

CASES = [
    # name, url, extra headers, session token
    ("range_get", "https://bucket-1.s3.eu-west-2.amazonaws.com/data/t2m/c/0/1/2",
     {"Range": "bytes=100-199"}, None),
    ("session_token_payer", "http://127.0.0.1:9000/bucket-1/a%20b/zarr.json",
     {"x-amz-request-payer": "requester"}, "FQoGZXIvYXdzEXAMPLETOKEN//+=="),
    ("list_v2", "https://s3.us-east-1.amazonaws.com/bucket-1?list-type=2&prefix=a%2Fb%20c%2F"
     "&continuation-token=1%2Fx%2By%3D%3D", {}, None),
]


def main() -> None:
    creds_base = ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    for name, url, headers, token in CASES:
        region = "eu-west-2" if "eu-west-2" in url else "us-east-1"
        request = AWSRequest(method="GET", url=url, headers=dict(headers))
        request.headers["x-amz-content-sha256"] = EMPTY
        auth = S3SigV4Auth(Credentials(*creds_base, token), "s3", region)
        with mock.patch("botocore.auth.get_current_datetime",
                        return_value=DATE.replace(tzinfo=None)):
            auth.add_auth(request)
        print(f"// {name}: {url}")
        print(f"//   headers {sorted(request.headers.items())}")
        print(f"//   {request.headers['Authorization']}")


if __name__ == "__main__":
    main()
