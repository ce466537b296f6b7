"""Checks of a MuCR pair's contextual descriptions, each flag with a reason a person can read.

- `context_missing`: no contextual descriptions yet (`cftools generate context`).
- `context_inconsistent`: a person, garment, colour or place named in the cause description is missing from the
  effect description, or a garment has another colour there (the two images would show different subjects); a
  change of colour is the change itself, not drift, when the effect caption names a colour.
- `context_missing_change`: the effect description does not carry the effect caption's event (fewer than half of
  the caption's content words appear in it).
- `prompt_truncated`: a description is longer than the image model's text encoder takes (77 CLIP tokens for
  SD-family pipelines), counted with the pipeline's own tokenizer when `[images] model` names a pipeline folder,
  else estimated (a word or punctuation mark per token, plus the start and end tokens).
- `no_candidates`: no candidate images yet (`cftools generate images`).
- `identical_images`: a pair whose cause and effect images are the same file (same SHA-256) or look the same
  (64-bit perceptual hashes, imagehash's pHash, at most `IDENTICAL_DISTANCE` bits apart, and 16x16 colour
  thumbnails at most `IDENTICAL_COLOUR` grey levels apart on average: pHash alone ignores colour, so two flat
  fills of different colours would pass for one picture): no change to explain.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Optional

from cftools.findings import Flag, Note

CLIP_MAX_TOKENS = 77
PERSONS = ("man", "woman", "boy", "girl", "child", "kid", "baby", "person", "old man", "old woman", "teenager",
           "farmer", "student", "chef", "driver", "dog", "cat", "bird", "horse", "cow", "puppy", "kitten")
GARMENTS = ("shirt", "t-shirt", "jacket", "coat", "hoodie", "sweater", "dress", "skirt", "jeans", "trousers",
            "pants", "shorts", "hat", "cap", "scarf", "boots", "shoes", "sneakers", "uniform", "suit", "apron",
            "gloves", "raincoat", "tie", "glasses", "helmet", "blouse", "overalls")
COLOURS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white", "grey",
           "gray", "beige", "navy", "teal", "violet", "golden", "silver")
PLACES = ("park", "kitchen", "street", "road", "office", "classroom", "garden", "forest", "beach", "bedroom",
          "living room", "bathroom", "field", "farm", "city", "village", "shop", "store", "restaurant", "cafe",
          "hospital", "school", "library", "highway", "river", "lake", "mountain", "desert", "yard", "balcony")
STOPWORDS = frozenset("""a an the and or but of to in on at by for with from into onto over under his her their its
he she it they them him is are was were be been being has have had does do did this that these those there
then than so very some any all one two as after before while when where who which what because up down out off
again still just also not no""".split())
WORD = re.compile(r"[a-z]+(?:-[a-z]+)?")
CLIP_PIECE = re.compile(r"[A-Za-z]+|\d|[^\sA-Za-z\d]")


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def named(text: str, vocabulary: tuple[str, ...]) -> set[str]:
    """The vocabulary's entries that TEXT names (multi-word entries too; plurals by a trailing s)."""
    padded = " " + " ".join(words(text)) + " "
    return {v for v in vocabulary if f" {v} " in padded or f" {v}s " in padded or f" {v}es " in padded}


def garment_colours(text: str) -> dict[str, str]:
    """Garment -> the colour written just before it ("a red jacket")."""
    tokens = words(text)
    found = {}
    for i, token in enumerate(tokens):
        base = token.rstrip("s") if token.rstrip("s") in GARMENTS else token
        if base in GARMENTS:
            for back in tokens[max(0, i - 3):i][::-1]:
                if back in COLOURS:
                    found[base] = back
                    break
    return found


def stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[:-len(suffix)]
    return word


def context_of(item: Any) -> Optional[dict]:
    context = (item.data or {}).get("context")
    return context if isinstance(context, dict) and context.get("effect_description") else None


def check_context_missing(item: Any) -> Optional[Flag]:
    if context_of(item) is None:
        return Flag("context_missing", "no contextual descriptions yet: run `cftools generate context`")
    return None


def check_context_inconsistent(item: Any) -> Optional[Flag]:
    context = context_of(item)
    if context is None:
        return None
    cause, effect = context["cause_description"], context["effect_description"]
    # a colour the effect caption names is the change itself (tomatoes turning red), not drift
    changed = named((item.data or {}).get("effect_caption") or "", COLOURS)
    problems = []
    for what, vocabulary in (("person", PERSONS), ("garment", GARMENTS), ("colour", COLOURS), ("place", PLACES)):
        if what == "colour" and changed:
            continue
        missing = sorted(named(cause, vocabulary) - named(effect, vocabulary))
        if missing:
            problems.append(f"{what} {', '.join(missing)} named for the cause is missing in the effect")
    cause_colours, effect_colours = garment_colours(cause), garment_colours(effect)
    for garment, colour in sorted(cause_colours.items()):
        if garment in effect_colours and effect_colours[garment] != colour  and not changed:
            problems.append(f"the {garment} is {colour} for the cause but {effect_colours[garment]} for the effect")
    return Flag("context_inconsistent", "; ".join(problems)) if problems else None


def check_context_missing_change(item: Any) -> Optional[Flag]:
    context = context_of(item)
    caption = (item.data or {}).get("effect_caption") or ""
    if context is None or not caption:
        return None
    wanted = {stem(w) for w in words(caption) if w not in STOPWORDS}
    present = {stem(w) for w in words(context["effect_description"])}
    missing = sorted(wanted - present)
    if wanted and len(missing) * 2 > len(wanted):
        return Flag("context_missing_change", f"the effect description does not carry the effect caption "
                                              f"{caption!r} (missing: {', '.join(missing)})")
    return None


def estimated_clip_tokens(text: str) -> int:
    return len(CLIP_PIECE.findall(text)) + 2


class PromptLength:
    """Counts a description's text-encoder tokens: the configured pipeline's tokenizer, else an estimate."""

    def __init__(self) -> None:
        self.count: Callable[[str], int] = estimated_clip_tokens
        self.how = "estimated: a word or mark per token"
        self.limit = CLIP_MAX_TOKENS

    def configure(self, config: dict[str, Any]) -> None:
        self.__init__()
        model = (config.get("images") or {}).get("model")
        folder = Path(str(model)) if model else None
        if folder is None or not (folder / "tokenizer").is_dir():
            return
        from transformers import CLIPTokenizer

        tokenizer = CLIPTokenizer.from_pretrained(str(folder / "tokenizer"), local_files_only=True)
        self.count = lambda text: len(tokenizer(text, truncation=False)["input_ids"])
        self.limit = int(getattr(tokenizer, "model_max_length", CLIP_MAX_TOKENS) or CLIP_MAX_TOKENS)
        self.how = f"counted with the tokenizer of {folder}"

    def __call__(self, item: Any) -> Optional[Flag]:
        context = context_of(item)
        if context is None:
            return None
        long = [(side, n) for side in ("cause", "effect")
                if (n := self.count(context[f"{side}_description"])) > self.limit]
        if not long:
            return None
        text = ", ".join(f"the {side} description has {n} tokens" for side, n in long)
        return Flag("prompt_truncated", f"{text}; the text encoder takes {self.limit} ({self.how}), the rest is cut")


def check_no_candidates(item: Any) -> Optional[Flag]:
    if context_of(item) is not None and not (item.data or {}).get("candidates"):
        return Flag("no_candidates", "no candidate images yet: run `cftools generate images`")
    return None


# ---------------------------------------------------------------- cues and explanations of a selected pair
# A selected pair is an item with its two images (`PAIR@style`); a caption pair has candidates instead.


def is_caption_pair(item: Any) -> bool:
    return not (item.data or {}).get("cause_image")


def has_cues(item: Any) -> bool:
    data = item.data or {}
    return bool(data.get("cause_image") and (data.get("cue") or data.get("explanation_draft")))


def normal_phrase(text: Any) -> str:
    return " ".join(words(str(text or "")))


def check_cue_in_false_cues(item: Any) -> Optional[Flag]:
    data = item.data or {}
    cue = normal_phrase(data.get("cue"))
    same = [c for c in data.get("false_cues") or [] if cue and normal_phrase(c) == cue]
    if same:
        return Flag("cue_in_false_cues", f"the cue {data.get('cue')!r} is also a false cue ({same[0]!r})")
    return None


def check_false_cue_duplicate(item: Any) -> Optional[Flag]:
    seen: dict[str, str] = {}
    for cue in (item.data or {}).get("false_cues") or []:
        key = normal_phrase(cue)
        if key in seen:
            return Flag("false_cue_duplicate", f"false cues {seen[key]!r} and {cue!r} are the same")
        seen[key] = str(cue)
    count = len((item.data or {}).get("false_cues") or [])
    if count != 3:
        return Flag("false_cue_duplicate", f"{count} false cues, MuCR asks for 3 different ones")
    return None


def check_cue_not_visible(item: Any) -> Optional[Flag]:
    """The cue names nothing in either description (or caption): nothing of it can be seen in the images."""
    data = item.data or {}
    context = data.get("context") or {}
    cue_words = {stem(w) for w in words(str(data.get("cue") or "")) if w not in STOPWORDS}
    if not cue_words:
        return None
    text = " ".join(str(t or "") for t in (context.get("cause_description"), context.get("effect_description"),
                                           data.get("cause_caption"), data.get("effect_caption")))
    present = {stem(w) for w in words(text)}
    if not cue_words & present:
        return Flag("cue_not_visible", f"the cue {data.get('cue')!r} names nothing in either description")
    return None


def check_explanation_form(item: Any) -> Optional[Flag]:
    """An explanation (the draft, or a reference) lacks a part of "In the first image … In the second image …
    The causal link is …"."""
    from cftools.kinds.mucr.explanations import PART_NAMES, missing_parts

    data = item.data or {}
    texts = [("the draft", data.get("explanation_draft"))] + [
        (f"explanation {n}", text) for n, text in enumerate(data.get("explanations") or [], start=1)]
    problems = []
    for name, text in texts:
        if not text:
            continue
        missing = missing_parts(str(text))
        if missing:
            problems.append(f"{name} lacks the {', '.join(PART_NAMES[p] for p in missing)} part")
    return Flag("explanation_form", "; ".join(problems)) if problems else None


# bits of a 64-bit pHash: re-encodes and small shifts of one picture stay under it (the candidate checks' duplicate
# distance); a cause and its effect, drawn as a change of one scene, sit well above it
IDENTICAL_DISTANCE = 5
IDENTICAL_COLOUR = 8.0  # mean absolute difference of the 16x16 RGB thumbnails, 0-255
IMAGE_REF = re.compile(r"^sha256:([0-9a-f]{64})$")


def has_pair_images(item: Any) -> bool:
    data = item.data or {}
    return bool(data.get("cause_image")) and bool(data.get("effect_image"))


class IdenticalImages:
    """Flags a pair whose two images are the same: by SHA-256 first, then by perceptual hash (the stored files,
    found through the store the check run hands over with `use_store`)."""

    def __init__(self) -> None:
        self.paths: Callable[[list[str]], dict[str, str]] = lambda shas: {}

    def use_store(self, store: Any) -> None:
        from sqlalchemy import select

        from cftools.models import Image

        def paths(shas: list[str]) -> dict[str, str]:
            with store.session() as session:
                return dict(session.execute(select(Image.sha256, Image.path).where(Image.sha256.in_(shas))).all())

        self.paths = paths

    def __call__(self, item: Any) -> Any:
        data = item.data or {}
        cause, effect = str(data.get("cause_image")), str(data.get("effect_image"))
        if cause == effect:
            return Flag("identical_images", f"the cause and effect images are the same file ({cause[:19]}…)")
        refs = [IMAGE_REF.match(cause), IMAGE_REF.match(effect)]
        if not all(refs):
            return None  # images named by path (an ingested release): compared by name only
        shas = [m.group(1) for m in refs]
        found = self.paths(shas)
        if len(found) < 2:
            return Note("identical_images", "an image of the pair is not in the store: not compared")
        try:
            import imagehash
            import PIL.Image
        except ImportError:
            return Note("identical_images", "perceptual hashes need imagehash (pip install 'cftools[images]')")
        import numpy as np

        try:
            images = [PIL.Image.open(found[sha]).convert("RGB") for sha in shas]
        except OSError as exc:
            return Note("identical_images", f"an image of the pair could not be read: {exc}")
        distance = imagehash.phash(images[0]) - imagehash.phash(images[1])
        thumbs = [np.asarray(image.resize((16, 16)), dtype=np.float32) for image in images]
        if distance <= IDENTICAL_DISTANCE and float(np.abs(thumbs[0] - thumbs[1]).mean()) <= IDENTICAL_COLOUR:
            return Flag("identical_images", f"the cause and effect images look the same (perceptual hashes "
                                            f"{distance} bits apart, at most {IDENTICAL_DISTANCE} counts as the same)")
        return None
