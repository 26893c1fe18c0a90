"""A local S3 server for the storage tests: moto's `moto_server`, a real process on a free localhost port.

A process rather than an in-process mock, so `firefeed worker` processes reach the same
buckets over HTTP exactly as they would reach S3 or MinIO.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.ports import free_ports

MOTO_SERVER = str(Path(sys.executable).with_name("moto_server"))

#: moto accepts any credentials; botocore only needs some, and a region.
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "firefeed-test",
    "AWS_SECRET_ACCESS_KEY": "firefeed-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextmanager
def moto_s3_server(log: Path | None = None) -> Iterator[str]:
    """Start `moto_server` on 127.0.0.1, yield its endpoint URL, stop it at the end."""
    port = free_ports()
    out = log.open("wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen([MOTO_SERVER, "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{endpoint}/moto-api/data.json", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto_server did not answer on {endpoint}")
            time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            out.close()  # type: ignore[union-attr]


def _client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=S3_ENV["AWS_DEFAULT_REGION"],
        aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
    )


def new_bucket(endpoint: str) -> str:
    """A fresh, empty bucket on the server (one per test keeps tests apart)."""
    name = f"ff-{uuid.uuid4().hex[:12]}"
    client = _client(endpoint)
    client.create_bucket(Bucket=name)
    return name


def bucket_objects(endpoint: str, bucket: str) -> dict[str, bytes]:
    """Every object in the bucket, key -> bytes, read straight from the server (not through FireFeed)."""
    client = _client(endpoint)
    objects: dict[str, bytes] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            objects[item["Key"]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
    return objects
