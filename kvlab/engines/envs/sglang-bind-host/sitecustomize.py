"""kvlab's fix for SGLang's data-parallel port placeholders: they bind the host kvlab serves on, not every interface.

Active where kvlab puts this folder first on an SGLang server's PYTHONPATH with ``KVLAB_SGLANG_BIND_HOST`` set
(``kvlab.engines.sglang.SGLangAdapter.bind_env``: data parallelism on, a host that is an address of this machine);
Python then runs this file at the start of the server and of every process SGLang spawns. Nothing is installed or
edited in the environment.

What it replaces, and why: with ``--dp-size`` > 1, SGLang 0.5.23's data-parallel controller holds each replica's
NCCL port while it sets the replicas up (``sglang/srt/managers/data_parallel_controller.py``,
``sockets.append(bind_port(tmp_port_args.nccl_port))``), through ``sglang.srt.utils.network.bind_port``, which
calls ``try_bind_socket(port=port, listen=True)`` with no host: a listening socket on every interface (0.0.0.0 / ::),
closed before the replicas start. SGLang has no option or variable for that host. Here ``bind_port`` binds
``KVLAB_SGLANG_BIND_HOST`` instead, patched as ``sglang.srt.utils.network`` is first executed, so the controller's
``from sglang.srt.utils.network import bind_port`` takes the patched one. ``tests/test_sglang.py`` checks, in the
SGLang environment, the function the controller calls and that without this folder it binds every interface.

Python imports only the first sitecustomize on its path: the next one (SGLang's CPU fix, envs/sglang-cpu-compat,
where the experiment puts it on the path) is run too.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

HOST_ENV = "KVLAB_SGLANG_BIND_HOST"
MODULE = "sglang.srt.utils.network"


def _patch(module) -> None:
    host, try_bind_socket = os.environ[HOST_ENV], module.try_bind_socket

    def bind_port(port):
        """SGLang's bind_port on kvlab's host (``KVLAB_SGLANG_BIND_HOST``), not every interface."""
        return try_bind_socket(host, port, listen=True)

    bind_port.__wrapped_by_kvlab__ = True
    module.bind_port = bind_port


class _PatchNetwork(importlib.abc.MetaPathFinder):
    """Finds ``sglang.srt.utils.network`` as usual and patches it right after it is executed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        inner = spec.loader

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return inner.create_module(spec)

            def exec_module(self, module):
                inner.exec_module(module)
                _patch(module)

        spec.loader = Loader()
        return spec


if os.environ.get(HOST_ENV) and not any(isinstance(f, _PatchNetwork) for f in sys.meta_path):
    sys.meta_path.insert(0, _PatchNetwork())

_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    _next = os.path.join(os.path.abspath(_entry or "."), "sitecustomize.py")
    if os.path.dirname(_next) != _here and os.path.isfile(_next):
        _spec = importlib.util.spec_from_file_location("_kvlab_next_sitecustomize", _next)
        _module = importlib.util.module_from_spec(_spec)
        sys.modules[_spec.name] = _module
        _spec.loader.exec_module(_module)
        break
