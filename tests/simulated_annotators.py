"""Scripted annotators: pure behaviour, no server. Each is a person with a seeded `random.Random` who, given a task's
truth, its proposed answer and the options, returns their judgment: whether the proposed answer is correct, and if
not, their corrected answer. The tests drive the real Label Studio API with them; bench/bench_annotators.py
simulates whole queues with them.

    careful(accuracy=0.9)    right with probability ACCURACY; a slip misses a wrong proposed answer, or "corrects"
                             a right one to another option
    hurried(accuracy=0.75)   the same, less often right
    random_clicker()         yes or no at random, and a random other option as the correction
    always_agrees()          confirms every proposed answer
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional, Sequence


@dataclass(frozen=True)
class SimulatedJudgment:
    answer_correct: bool  # the proposed answer is right
    corrected_answer: Optional[str] = None  # their answer when it is not

    def verdict(self, proposed: str) -> str:
        """The answer this judgment releases."""
        return proposed if self.answer_correct else (self.corrected_answer or "")


@dataclass
class SimulatedAnnotator:
    name: str
    accuracy: Optional[float]  # None: not a fixed accuracy (random clicker, always agrees)
    style: str  # careful | hurried | random | agrees
    seed: int = 0
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.name}:{self.seed}")

    def judge(self, truth: str, proposed: str, options: Sequence[str]) -> SimulatedJudgment:
        """Their judgment of a task whose right answer is TRUTH, showing PROPOSED, with these OPTIONS."""
        others = [o for o in options if o != proposed]
        if self.style == "agrees":
            return SimulatedJudgment(True)
        if self.style == "random":
            if self.rng.random() < 0.5 or not others:
                return SimulatedJudgment(True)
            return SimulatedJudgment(False, self.rng.choice(others))
        if self.rng.random() < self.accuracy:  # right
            return SimulatedJudgment(True) if proposed == truth else SimulatedJudgment(False, truth)
        if proposed != truth:  # a slip: the wrong proposed answer passes
            return SimulatedJudgment(True)
        wrong = [o for o in options if o != truth]
        return SimulatedJudgment(False, self.rng.choice(wrong)) if wrong else SimulatedJudgment(True)


def careful(accuracy: float = 0.9, name: str = "careful", seed: int = 0) -> SimulatedAnnotator:
    return SimulatedAnnotator(name, accuracy, "careful", seed)


def hurried(accuracy: float = 0.75, name: str = "hurried", seed: int = 0) -> SimulatedAnnotator:
    return SimulatedAnnotator(name, accuracy, "hurried", seed)


def random_clicker(name: str = "random clicker", seed: int = 0) -> SimulatedAnnotator:
    return SimulatedAnnotator(name, None, "random", seed)


def always_agrees(name: str = "always agrees", seed: int = 0) -> SimulatedAnnotator:
    return SimulatedAnnotator(name, None, "agrees", seed)
