"""What an annotator reads in a task, beside what each kind shows (`AnnotateHooks.task_data`)."""

from __future__ import annotations

import json
from typing import Optional


def details_text(data: Optional[dict]) -> str:
    """An item's further fields as `name: value` lines an annotator can read (never one JSON blob)."""
    if not data:
        return "none"
    return "\n".join(f"{key}: {value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)}"
                     for key, value in sorted(data.items()))
