"""What counts as personal in a text: the patterns that screens hide (`cftools.judgments.without_emails`) and that a
release refuses (`cftools.boundary`). Below every stage and kind: it imports nothing of cftools."""

from __future__ import annotations

import re

# An email address: something@domain.tld, not inside a longer word.
EMAIL = re.compile(r"(?<![\w.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
