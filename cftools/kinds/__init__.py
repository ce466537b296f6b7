"""Benchmark shapes as first-class parts: one module per kind behind `cftools.kinds.base.Kind`, which gives each
stage one hooks object (`IngestHooks`, `GenerateHooks`, `CheckHooks`, `AnnotateHooks`, `ReleaseHooks`,
`EvaluateHooks`)."""

from cftools.kinds.base import (AnnotateHooks, Check, CheckHooks, EvalContext, EvaluateHooks, ExportFormat,
                                GenerateHooks, Generator, IngestHooks, ItemData, ItemDataError, Kind, ReleaseHooks,
                                ReportTable)
from cftools.kinds.registry import all_kinds, get_kind, kind_names, register, unregister

__all__ = ["AnnotateHooks", "Check", "CheckHooks", "EvalContext", "EvaluateHooks", "ExportFormat", "GenerateHooks",
           "Generator", "IngestHooks", "ItemData", "ItemDataError", "Kind", "ReleaseHooks", "ReportTable",
           "all_kinds", "get_kind", "kind_names", "register", "unregister"]
