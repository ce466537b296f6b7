"""Which automatic checks C-VQA items get (the checks themselves are the shared ones in `cftools.checks.rules`)."""

from __future__ import annotations

from cftools.kinds.base import Check
from cftools.kinds.cvqa.model import BOOLEAN, DIRECT_GROUPS

def _is_count(item) -> bool:  # noqa: ANN001
    return item.answer_style in ("count", "choice")


def declared_checks() -> tuple[Check, ...]:
    from cftools.checks import rules

    return (
        Check("arithmetic", rules.check_arithmetic, lambda i: i.group in DIRECT_GROUPS,
              "numerical-direct, abs_counting_2, abs_counting_4"),
        Check("not_flipped", rules.check_not_flipped, lambda i: i.group == BOOLEAN, "boolean"),
        Check("no_presupposition", rules.check_no_presupposition, lambda i: True, "all C-VQA items"),
        Check("answer_type", rules.check_answer_type, lambda i: i.answer_style is not None,
              "numerical (digits), boolean (yes/no), multiple choice (an offered option)"),
        Check("leakage", rules.check_leakage, _is_count, "numerical and multiple-choice counts"),
        Check("two_questions", rules.check_two_questions, lambda i: True, "all C-VQA items"),
        Check("unchanged_answer", rules.check_unchanged_answer, _is_count, "numerical and multiple-choice counts"),
        Check("answer_disputed", rules.check_answer_disputed, rules.rederived, rules.REDERIVED_SCOPE),
    )


