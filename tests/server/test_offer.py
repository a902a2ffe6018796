"""The fix's lifecycle (``server/offer.py``) as plain Python: no server, no LSP types."""

from __future__ import annotations

from types import SimpleNamespace

from frognano.repair.patch import FileEdit, Patch
from frognano.server.offer import Offer, ReadyFix

BEFORE, AFTER = "return age > 18\n", "return age >= 18\n"
PATCH = Patch((FileEdit("calc/stats.py", BEFORE, AFTER),))


def offer_for(state: int = 3) -> Offer:
    fix = SimpleNamespace(patch=PATCH)
    return Offer(ready=ReadyFix(fix, state, "FrogNano: `>` -> `>=`"))  # type: ignore[arg-type]


def texts(text: str | None):
    return lambda rel: text if rel == "calc/stats.py" else None


def test_a_fix_is_offered_only_for_its_state_and_texts():
    offer = offer_for(state=3)
    assert offer.valid(3, texts(BEFORE)) is offer.ready
    assert offer.valid(4, texts(BEFORE)) is None  # another state of the files: stale
    assert offer.valid(3, texts(BEFORE + "# edited\n")) is None
    offer.drop()
    assert offer.valid(3, texts(BEFORE)) is None and offer.patches() == []


def test_a_rerun_before_the_edit_waits_for_it_then_the_edit_is_recorded_once_saved():
    offer = offer_for()
    assert offer.rerun_requested({"other.py"}, texts(BEFORE)) is None
    assert offer.rerun_requested({"calc/stats.py"}, texts(BEFORE)) == "waiting"
    assert offer.arrived(texts(BEFORE)) is None and offer.awaiting is PATCH  # not yet
    assert offer.arrived(texts(AFTER)) is PATCH and offer.awaiting is None
    assert offer.applied is PATCH
    assert offer.to_record(texts(BEFORE)) is None and offer.unrecorded is PATCH  # not saved yet
    assert offer.to_record(texts(AFTER)) is PATCH and offer.to_record(texts(AFTER)) is None


def test_text_that_is_neither_the_fix_nor_its_original_ends_the_wait():
    offer = offer_for()
    offer.rerun_requested({"calc/stats.py"}, texts(BEFORE))
    assert offer.arrived(texts("something else\n")) is None and offer.awaiting is None
    offer.mark_applied(PATCH)
    assert offer.to_record(texts("mine\n")) is None and offer.unrecorded is None


def test_a_rerun_after_the_edit_marks_it_applied():
    offer = offer_for()
    assert offer.rerun_requested({"calc/stats.py"}, texts(AFTER)) == "applied"
    assert offer.awaiting is None and offer.unrecorded is PATCH


def test_the_background_search_starts_only_when_it_can_help():
    offer = offer_for(state=3)
    assert not offer.should_search("suggest", True, False, 3, texts(BEFORE))  # already verified here
    assert offer.should_search("suggest", True, False, 4, texts(BEFORE))
    assert not offer.should_search("off", True, False, 4, texts(BEFORE))
    assert not offer.should_search("apply", False, False, 4, texts(BEFORE))  # nothing fails
    assert not offer.should_search("apply", True, True, 4, texts(BEFORE))  # a collection error
