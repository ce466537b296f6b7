"""Automatic checks on draft items: each problem becomes a flag with a stable code and a reason.

The codes are declared by the kinds (`cftools kinds`), plus `duplicate` for every item with an image.
`run_checks` is what `cftools check` runs; `check_item` checks one item without touching the store.
"""

from cftools.item_view import ItemView
from cftools.findings import Flag, Note
from cftools.checks.runner import (CheckOptions, CheckReport, ItemResult, Progress, check_codes, check_item,
                                   check_scopes, run_checks)

__all__ = ["CheckOptions", "CheckReport", "Flag", "ItemResult", "ItemView", "Note", "Progress", "check_codes",
           "check_item", "check_scopes", "run_checks"]
