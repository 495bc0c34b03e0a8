"""Looking for a secret where it must not be: the command lines of every process on the
machine (sampled while commands run), a Flink REST API's configuration endpoints, and the
functions PyFlink and Beam pickled into a job graph (recorded by canary/sitecustomize.py
when CANARY_DIR is first on a process's PYTHONPATH and CANARY_PICKLES names a directory)."""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import io
import json
import subprocess
import tarfile
import threading
import urllib.request
import zlib
from pathlib import Path

from pipelines.running.processes import command_lines

CANARY_DIR = Path(__file__).resolve().parent / "canary"


def hits(data: bytes, secrets: dict[str, bytes]) -> list[str]:
    return [name for name, value in secrets.items() if value in data]


class Sampler(threading.Thread):
    """Reads the command line of every process on the machine, over and over, while the
    commands run; keeps each that holds a secret (name -> value bytes)."""

    def __init__(self, secrets: dict[str, bytes]):
        super().__init__(daemon=True)
        self.secrets = secrets
        self.found: dict[str, str] = {}
        self.rounds = 0
        self.stopping = threading.Event()

    def run(self):
        while not self.stopping.is_set():
            for line in command_lines().values():
                for name in hits(line.encode(), self.secrets):
                    self.found[name] = line
            self.rounds += 1
            self.stopping.wait(0.05)

    def stop(self) -> None:
        self.stopping.set()
        self.join(5)


def rest(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def rest_configs(base: str, job_id: str | None) -> dict[str, bytes]:
    """The REST endpoints that show configuration: the JobManager's, its environment, each
    TaskManager's, and the job's (its global job parameters)."""
    bodies = {
        path: rest(base + path)
        for path in ("/config", "/jobmanager/config", "/jobmanager/environment")
    }
    for tm in json.loads(rest(base + "/taskmanagers")).get("taskmanagers", []):
        bodies[f"/taskmanagers/{tm['id']}"] = rest(f"{base}/taskmanagers/{tm['id']}")
    if job_id:
        for path in (f"/jobs/{job_id}/config", f"/jobs/{job_id}/plan", f"/jobs/{job_id}"):
            bodies[path] = rest(base + path)
    return bodies


def decoded(data: bytes) -> bytes:
    """Beam's pickler hands out base64 of zlib of the pickle: undo both when they apply."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return data
    try:
        return data + zlib.decompress(raw)
    except zlib.error:
        return data + raw


def _root_layers(*images: str) -> list[list[str]]:
    """Each image's layers (diff ids: sha256 of the uncompressed layer tar), in order."""
    found = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", *images],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [json.loads(line) or [] for line in found.splitlines()]


def layers_present() -> set[str]:
    """The layers of every image the engine holds now. Taken before a build, they are
    layers that build's context never reached: a secret made for the test cannot be in
    them."""
    ids = subprocess.run(["docker", "image", "ls", "-q", "--no-trunc"], capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    return {layer for layers in _root_layers(*set(ids)) for layer in layers} if ids else set()


class ImageLayers:
    """What `image_files` did with each layer: scanned, or skipped as one present before."""

    def __init__(self) -> None:
        self.scanned: list[str] = []
        self.skipped: list[str] = []


def image_files(image: str, built_before: set[str] = frozenset(), seen: ImageLayers | None = None):
    """(name, content) of every file in `docker save`'s archive, layers unpacked. A layer
    whose digest is in `built_before` (layers_present() taken before the image was built:
    the build reused it from its cache) is hashed and not unpacked: its bytes are those of
    a layer built from an earlier context. The layers that hold the venv and Flink are 1.3
    of the deploy image's 1.8 GB, and unpacking them took most of a minute."""
    seen = seen if seen is not None else ImageLayers()
    proc = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
            for member in archive:
                if not member.isfile():
                    continue
                data = archive.extractfile(member).read()
                if data[:2] == b"\x1f\x8b":
                    data = gzip.decompress(data)
                if member.name.endswith("layer.tar") or (member.size > 1024 and is_tar(data)):
                    digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
                    if digest in built_before:
                        seen.skipped.append(digest)
                        continue
                    seen.scanned.append(digest)
                    with tarfile.open(fileobj=io.BytesIO(data)) as layer:
                        for inner in layer:
                            if inner.isfile():
                                yield f"{member.name}:{inner.name}", layer.extractfile(inner).read()
                else:
                    yield member.name, data
    finally:
        proc.stdout.close()
        assert proc.wait(120) == 0


def image_layers(image: str) -> list[str]:
    return _root_layers(image)[0]


def is_tar(data: bytes) -> bool:
    return len(data) > 262 and data[257:262] == b"ustar"
