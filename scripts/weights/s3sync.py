"""The S3 weight cache: the same layout under a prefix (SageMaker's ModelDataSource S3Prefix).

Each object carries its sha256 in its metadata, so ``push`` skips what is already there; manifest.json
is uploaded last and read first, so a half-pushed prefix is never taken for a complete one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from kokoro_tts.weights.layout import MANIFEST, TORCH, LayoutError, Manifest, WeightLayout

from .sources import SourceError
from .transfer import LayoutWriter, progress_bar

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

SHA256_KEY = "sha256"  # object metadata: x-amz-meta-sha256


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # "" or ending in "/"

    @classmethod
    def parse(cls, url: str) -> S3Location:
        if not url.startswith("s3://"):
            raise ValueError(f"not an S3 URL: {url!r}")
        bucket, _, prefix = url[len("s3://") :].partition("/")
        if not bucket:
            raise ValueError(f"no bucket in {url!r}")
        prefix = prefix.strip("/")
        return cls(bucket, f"{prefix}/" if prefix else "")

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def key(self, rel: str) -> str:
        return self.prefix + rel


def s3_client() -> S3Client:
    """A client from the usual AWS configuration (AWS_ENDPOINT_URL_S3 and friends), with short timeouts."""
    config = Config(connect_timeout=10, read_timeout=60, retries={"max_attempts": 3, "mode": "standard"})
    return boto3.client("s3", config=config)


def _describe(e: Exception, loc: S3Location) -> str:
    if isinstance(e, ClientError):
        code = e.response.get("Error", {}).get("Code", "")
        if code == "NoSuchBucket":
            return f"bucket {loc.bucket} does not exist"
        if code in {"NoSuchKey", "404"}:
            return f"no {MANIFEST} under {loc.url}"
        if code in {"AccessDenied", "403"}:
            return f"access denied to {loc.url}"
    return f"{type(e).__name__}: {e}"


def _read_manifest(client: S3Client, loc: S3Location) -> bytes:
    body = client.get_object(Bucket=loc.bucket, Key=loc.key(MANIFEST))["Body"]
    data: bytes = body.read()
    return data


class S3Source:
    def __init__(self, url: str, client: S3Client | None = None) -> None:
        self.location = S3Location.parse(url)
        self._client = client

    @property
    def name(self) -> str:
        return self.location.url

    def fetch(self, writer: LayoutWriter, with_torch: bool) -> None:
        loc = self.location
        try:
            client = self._client or s3_client()
            manifest = Manifest.from_json(_read_manifest(client, loc), f"{loc.url}{MANIFEST}")
            if with_torch and TORCH not in manifest.files:
                raise SourceError(f"has no {TORCH}")
            files = manifest.required(with_torch)
            writer.expect(sum(e.bytes for e in files.values()))
            for rel, entry in sorted(files.items()):
                if writer.reuse(rel, entry):
                    continue
                body = client.get_object(Bucket=loc.bucket, Key=loc.key(rel))["Body"]
                writer.write(rel, body.iter_chunks(1 << 20), entry)
        except (ClientError, BotoCoreError) as e:
            raise SourceError(_describe(e, loc)) from None
        except LayoutError as e:
            raise SourceError(str(e)) from None


@dataclass
class PushResult:
    location: S3Location
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


class PushError(Exception):
    pass


def push(root: Path, url: str, client: S3Client | None = None, quiet: bool = False) -> PushResult:
    """Upload a verified layout to an S3 prefix: changed files first, manifest.json last."""
    loc = S3Location.parse(url)
    layout = WeightLayout(root)
    with progress_bar("verify", quiet) as bar:
        manifest = layout.verify(full=True, progress=bar.update)
    result = PushResult(loc)
    try:
        client = client or s3_client()
        todo = {}
        for rel, entry in sorted(manifest.files.items()):
            if _same_object(client, loc, rel, entry.sha256, entry.bytes):
                result.skipped.append(rel)
            else:
                todo[rel] = entry
        with progress_bar(f"push {loc.url}", quiet, sum(e.bytes for e in todo.values())) as bar:
            for rel, entry in todo.items():
                extra: Any = {"Metadata": {SHA256_KEY: entry.sha256}}
                key = loc.key(rel)
                client.upload_file(str(root / rel), loc.bucket, key, ExtraArgs=extra, Callback=bar.update)
                result.uploaded.append(rel)
        data = manifest.to_json()
        try:
            remote: bytes | None = _read_manifest(client, loc)
        except ClientError:
            remote = None
        if remote == data and not result.uploaded:
            result.skipped.append(MANIFEST)
        else:
            key = loc.key(MANIFEST)
            client.put_object(Bucket=loc.bucket, Key=key, Body=data, ContentType="application/json")
            result.uploaded.append(MANIFEST)
    except (ClientError, BotoCoreError) as e:
        raise PushError(f"push to {loc.url} failed: {_describe(e, loc)}") from None
    return result


def _same_object(client: S3Client, loc: S3Location, rel: str, sha256: str, size: int) -> bool:
    try:
        head = client.head_object(Bucket=loc.bucket, Key=loc.key(rel))
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in {"404", "NoSuchKey", "NotFound"}:
            return False
        raise
    return head.get("ContentLength") == size and head.get("Metadata", {}).get(SHA256_KEY) == sha256
