"""A loopback OpenAI-compatible server that plays both a model under evaluation and the MuCR Exp judge, run as a
real process for the eval tests:

    python tests/judge_server.py --scores 8,6,4     # prints "listening on http://127.0.0.1:PORT/v1"

- a judge prompt (it shows a Reference and a Candidate, part by part) gets {"S1": 8, "S2": 6, "S3": 4} (the
  --scores) in the judge's schema when it asks for it (`response_format`), else "S1: 8\nS2: 6\nS3: 4";
- an explain question gets a three-part explanation;
- a choice among images gets "A"; a cue question gets its first option.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llm_stub import StubServer  # noqa: E402

EXPLANATION = ("In the first image, a man runs through the rain. In the second image, the same man sits on a bench "
               "with a cold. The causal link is that the rain made him catch a cold.")


def reply_for(scores: list[str]):  # noqa: ANN201
    def reply(request: dict, text: str) -> str:
        if "Reference" in text and "Candidate" in text:
            if request.get("response_format"):  # the judge's schema (cftools.kinds.mucr.judge): reply in it
                assert request["response_format"]["json_schema"]["name"] == "mucr_judge_scores"
                return json.dumps({f"S{n}": int(s) for n, s in enumerate(scores, start=1)})
            return "\n".join(f"S{n}: {s}" for n, s in enumerate(scores, start=1))
        if "Explain" in text:
            return EXPLANATION
        options = re.search(r"Options: (.+)\.", text)
        if options:
            return options.group(1).split("; ")[0]
        return "A"
    return reply


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scores", default="8,6,4")
    args = parser.parse_args()
    server = StubServer(0, 0.0, reply=reply_for(args.scores.split(",")))
    print(f"listening on {server.base_url}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
