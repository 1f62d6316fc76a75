"""Workload kinds: one module per kind in this package, found when it is imported.

A kind module (its name is the kind) defines ``Args``: a :class:`~kvlab.workloads.base.WorkloadArgs`
subclass with ``kind: Literal["<module name>"]``, the kind's own fields and checks, its prompt
generator (``generate``), its one-line ``description`` and a valid ``example``; each prompt it
generates carries the tokens it shares with the others (``Prompt.shared_prefix_tokens``), and a run's
shared-token count is :func:`~kvlab.workloads.base.shared_tokens` of them. :data:`KINDS` holds every
kind; kvlab.experiment, kvlab.runner, kvlab.schema and kvlab.guide read it, so adding a kind is adding a module.
"""

from __future__ import annotations

import importlib
import pkgutil

from kvlab.workloads.base import DEFAULT_LOW_ID, Prompt, WorkloadArgs, shared_tokens

#: Modules of this package that are not kinds.
NOT_KINDS = ("base",)


def discover(package: str = __name__) -> dict[str, type[WorkloadArgs]]:
    """Kind name -> ``Args`` class of every kind module of ``package``, in module-name order.

    TypeError naming the module when one lacks ``Args``, its ``kind`` is not its module name, or it has
    no description.
    """
    pkg = importlib.import_module(package)
    kinds: dict[str, type[WorkloadArgs]] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name in NOT_KINDS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        args = getattr(module, "Args", None)
        if not (isinstance(args, type) and issubclass(args, WorkloadArgs)):
            raise TypeError(f"{module.__name__}: a workload kind module defines Args, a WorkloadArgs subclass")
        kind = args.model_fields.get("kind")
        if kind is None or getattr(kind.annotation, "__args__", None) != (info.name,):
            raise TypeError(f"{module.__name__}: Args needs kind: Literal[{info.name!r}] (its module name)")
        if not args.description or "\n" in args.description:
            raise TypeError(f"{module.__name__}: Args.description must be one line saying what the kind sends")
        kinds[info.name] = args
    return kinds


#: Every workload kind: name -> its Args class.
KINDS = discover()

__all__ = ["DEFAULT_LOW_ID", "KINDS", "Prompt", "WorkloadArgs", "discover", "shared_tokens"]
