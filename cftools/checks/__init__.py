"""Automatic checks on draft items: each problem becomes a flag with a stable code and a reason.

Codes: arithmetic, not_flipped, no_presupposition, answer_type, leakage, two_questions, duplicate,
unchanged_answer. `run_checks` is what `cftools check` runs; `check_item` checks one item without
touching the store.
"""

from cftools.checks.items import DIRECT_GROUPS, ItemView
from cftools.checks.rules import ITEM_CHECKS, Flag, Note
from cftools.checks.runner import CODES, SCOPES, CheckReport, ItemResult, Progress, check_item, run_checks

__all__ = ["CODES", "DIRECT_GROUPS", "ITEM_CHECKS", "SCOPES", "CheckReport", "Flag", "ItemResult", "ItemView", "Note",
           "Progress", "check_item", "run_checks"]
