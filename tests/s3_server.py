"""A real S3 API server on 127.0.0.1 (moto's), with credentials and endpoint in the standard AWS variables:
what the object-store tests run against."""

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


@contextmanager
def s3_server(bucket: str) -> Iterator[str]:
    """Serve S3 with `bucket` created; yields the endpoint URL (skips the test where moto or s3fs is absent)."""
    moto_server = pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_ACCESS_KEY_ID", "gpumeter-test")
            env.setenv("AWS_SECRET_ACCESS_KEY", "gpumeter-test-secret")
            env.setenv("AWS_REGION", "us-east-1")
            env.setenv("AWS_ENDPOINT_URL", endpoint)
            s3fs.S3FileSystem.clear_instance_cache()
            s3fs.S3FileSystem(endpoint_url=endpoint).mkdir(bucket)
            yield endpoint
            s3fs.S3FileSystem.clear_instance_cache()
    finally:
        server.stop()
