"""What `cftools eval` states about its numbers, checked on small worlds: replies read as the harness scripts read
them, and each report saying which definition its scores follow."""

from __future__ import annotations

from cftools.evaluate.harness_readings import vlmevalkit_yes_no


def test_vlmevalkit_deletes_the_first_32_periods_those_after_digits_included():
    # VLMEvalKit's periodStrip `(?!<=\d)(\.)(?!\d)` deletes "3." 's period as well, and stops after 32: a numbered
    # list of 32 steps uses them all up, so the final "no." keeps its period and is not the word "no" (Unknown)
    steps = " ".join(f"{n}." for n in range(1, 33))
    assert vlmevalkit_yes_no(f"{steps} no.") is None  # before: read as no (periods after digits were kept)
    assert vlmevalkit_yes_no(f"{steps} no") == "no"
    assert vlmevalkit_yes_no("Step 3. no.") == "no"
