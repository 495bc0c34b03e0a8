"""Loaded by every Python process of the canary test (it is first on their PYTHONPATH):
keeps a copy of each function PyFlink or Beam pickles into a job graph, in $CANARY_PICKLES,
for the test to search. It records; it changes nothing that is pickled."""

import importlib.abc
import importlib.machinery
import os
import sys
import uuid

_OUT = os.environ.get("CANARY_PICKLES")
_WRAP = {"cloudpickle": "dumps", "apache_beam.internal.pickler": "dumps"}


def _keep(kind: str, data) -> None:
    if isinstance(data, str):
        data = data.encode()
    if isinstance(data, (bytes, bytearray)):
        path = os.path.join(_OUT, f"{kind}-{os.getpid()}-{uuid.uuid4().hex}.bin")
        with open(path, "wb") as out:
            out.write(bytes(data))


def _wrapped(kind: str, dumps):
    def dumps_and_keep(*args, **kwargs):
        data = dumps(*args, **kwargs)
        _keep(kind, data)
        return data

    return dumps_and_keep


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, name):
        self.inner, self.name = inner, name

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        attr = _WRAP[self.name]
        setattr(module, attr, _wrapped(self.name.rsplit(".", 1)[-1], getattr(module, attr)))


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _WRAP:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, name)
        return spec


if _OUT:
    sys.meta_path.insert(0, _Finder())
