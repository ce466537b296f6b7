"""Benchmark shapes as first-class parts: one module per kind behind `cftools.kinds.base.Kind`."""

from cftools.kinds.base import Check, EvalContext, ExportFormat, Generator, ItemData, ItemDataError, Kind, ReportTable
from cftools.kinds.registry import all_kinds, get_kind, kind_names, register, unregister

__all__ = ["Check", "EvalContext", "ExportFormat", "Generator", "ItemData", "ItemDataError", "Kind", "ReportTable",
           "all_kinds", "get_kind", "kind_names", "register", "unregister"]
