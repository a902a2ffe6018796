"""Operator search: try catalogue edits at the most suspicious statements until one is verified.

Order of work, cheapest first: candidates come by ``location score x operator prior`` (the
prior is the operator's smoothed fix frequency learned from data, ``prior.py``; ties by the
catalogue's order below, location rank, edit size).  Filters that need no test run (does it
compile, is it a duplicate up to meaning, ``dedupe.py``) come before validation; validation
runs the failing tests first.  Once a fix is verified, a small extra budget looks for
alternatives at the top locations, and the verified ones are ranked: smaller change, higher
prior, more suspicious location.  When no single edit fixes everything, edits are combined in
pairs (two-location bugs) within a budget, using what the singles showed: partial fixes first,
and edits that changed nothing or made things worse are not paired.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from ..operators import Mutation, OperatorError, mutations, prepare
from ..operators.ingredients import handler_lines
from ..progress import Progress, Silent
from ..sandbox.workspace import Workspace
from .dedupe import SemanticKeys
from .localize import Location
from .patch import EditNote, FileEdit, Fix, Patch, Verification
from .prior import operator_weights
from .verify import CandidateResult, Verifier

log = logging.getLogger(__name__)

# Ties of score x prior (an empty prior makes every operator equal): most common one-edit bugs
# first (operator mistakes and bounds dominate real single-token bugs).
OPERATOR_PRIORITY = [
    "compare", "bound", "off_by_one", "arith", "boolop", "wrong_name", "add_not", "remove_not",
    "constant", "return_value", "swap_args", "invert_if_else", "default_arg", "remove_call",
    "drop_operand", "remove_condition", "remove_return", "remove_statement", "swap_statements",
    # Replacements from the file and tables, ± 1 and wrappers on values: after the one-token
    # edits, which they outnumber at a line, so those stay as quick to reach as before.
    "add_one", "swap_callee", "swap_literal", "swap_exception", "wrap", "clamp", "drop_one", "unclamp",
    # Insertions last: targeted (a missing return, a guard) before the copied statements.
    "insert_return", "slice", "loop_condition", "add_operand", "drop_return", "insert_statement",
    "insert_if", "remove_if",
]
_PRIORITY = {name: i for i, name in enumerate(OPERATOR_PRIORITY)}
_LISTED = 200  # candidates generated even beyond the validation budget: a model may apply them
# After a verified fix: more single edits validated, at the top locations, for alternatives
# (a fix that only satisfies the visible tests is often beaten by a smaller or likelier one).
ALT_CANDIDATES = 24
ALT_SECONDS = 10.0
ALT_LOCATIONS = 3
MAX_ALTERNATIVES = 3  # verified alternatives offered beside the fix
# Operators whose fix is the same at every place with the same text: an attribute the tests
# found missing raises wherever it is read, so a fix that mends one read leaves the same bug at
# the others the tests did not reach (boltons ec1ff9f: `issupserset` at two places).
SIBLING_OPERATORS = frozenset({"fix_attribute"})
# Seconds past the search's budget at which a candidate's run in flight is killed (its verdict
# then is no fix): enough for a run that was almost done, far less than a test may hang.
HARD_GRACE = 3.0


@dataclass(frozen=True)
class Candidate:
    mutations: tuple[Mutation, ...]
    patch: Patch
    rank: int  # generation order: location rank first

    @property
    def size(self) -> int:
        return sum(m.size for m in self.mutations)

    @property
    def notes(self) -> list[EditNote]:
        return [EditNote(m.path, m.line, m.description) for m in self.mutations]

    def describe(self) -> str:
        return " + ".join(str(n) for n in self.notes)


@dataclass
class Tried:
    candidate: Candidate
    result: CandidateResult


# Fewer candidates than this are not worth starting a second lane (a shadow copy and a warm
# session that collects the suite) for; the first this many single edits are validated on one
# lane, so a fix found among them never pays for the second.
_PARALLEL_FROM = 8
# From this many tests in the baseline, the other lanes are opened and their warm sessions
# collected while the candidates are listed, instead of when the ninth candidate needs them: a
# collection then costs seconds (more-itertools, 664 tests: 4 s, during which one lane did the
# work of two), and listing the candidates takes one CPU while the others wait.  Under it
# (the bundled examples: tens of tests) a fix among the first few candidates is likely and a
# lane is cheap to open when needed.
_AHEAD_FROM_TESTS = 200


def _confirm_on(lanes: list[Verifier], patches: list[Patch]) -> list[Verification | None]:
    """``lanes[i].confirm(patches[i])`` for each patch, the first on this thread and the others
    on a thread each; an interrupt or error here ends the others' runs at once."""
    out: list[Verification | None] = [None] * len(patches)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            out[i] = lanes[i].confirm(patches[i])
        except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,), name=f"frognano-confirm-{i}", daemon=True)
               for i in range(1, len(patches))]
    for thread in threads:
        thread.start()
    try:
        out[0] = lanes[0].confirm(patches[0])
    except BaseException:
        for lane in lanes[1:]:
            lane.runner.deadline = time.monotonic()
        raise
    finally:
        for thread in threads:
            thread.join()
        for lane in lanes[1:]:
            lane.runner.deadline = None
    if errors:
        raise errors[0]
    return out


class _Lanes:
    """Validates candidates in order, one per lane at a time; ``results`` yields them in the
    order given, as they finish.  One lane: on the calling thread, one after the other.

    Each lane takes the next candidate as soon as it is free (a lane still starting its warm
    session takes fewer); once a fix is known (``keep``), candidates it rules out are no longer
    validated, as one at a time they would not be.
    """

    def __init__(self, lanes: list[Verifier], candidates: list[Candidate], deadline: float | None = None) -> None:
        self.lanes = lanes
        self.deadline = deadline  # time.monotonic() past which no lane's run goes on
        self.candidates = candidates
        self.keep: Callable[[Candidate], bool] | None = None  # once set: which are still validated
        self._done: dict[int, CandidateResult | BaseException | None] = {}
        self._next = 0
        self._stop = False
        self._cond = threading.Condition()
        self._threads = [threading.Thread(target=self._work, args=(lane,), name=f"frognano-lane-{i}", daemon=True)
                         for i, lane in enumerate(lanes)] if len(lanes) > 1 else []

    def __enter__(self) -> _Lanes:
        self._bound(self.deadline)
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        with self._cond:
            self._stop = True
        if exc_type is not None:
            # An interrupt (Ctrl-C, SIGTERM) or an error: the runs in flight are killed now, not
            # finished first (one candidate's run can take as long as a test may hang).
            self._bound(time.monotonic())
        for thread in self._threads:
            thread.join()
        self._bound(None)

    def _bound(self, deadline: float | None) -> None:
        for lane in self.lanes:
            lane.runner.deadline = deadline

    def results(self) -> Iterator[tuple[Candidate, CandidateResult | None]]:
        for i, cand in enumerate(self.candidates):
            if not self._threads:
                yield cand, (self.lanes[0].check(cand.patch) if self._wanted(cand) else None)
                continue
            with self._cond:
                while i not in self._done:
                    self._cond.wait()
                outcome = self._done.pop(i)
            if isinstance(outcome, BaseException):
                raise outcome  # as the check would have raised, one at a time
            yield cand, outcome

    def _wanted(self, cand: Candidate) -> bool:
        return self.keep is None or self.keep(cand)

    def _work(self, lane: Verifier) -> None:
        while True:
            with self._cond:
                if self._stop or self._next >= len(self.candidates):
                    return
                i, self._next = self._next, self._next + 1
                cand = self.candidates[i]
                wanted = self._wanted(cand)
            try:
                outcome: CandidateResult | BaseException | None = lane.check(cand.patch) if wanted else None
            except BaseException as exc:  # noqa: BLE001 - raised where the results are read
                outcome = exc
            with self._cond:
                self._done[i] = outcome
                self._cond.notify_all()


# Why a search ended without a fix: every candidate tried, the pair budget spent, out of time,
# or cancelled by the face.
Stopped = Literal["exhausted", "budget", "time", "cancelled"]


@dataclass
class SearchResult:
    fix: Fix | None = None
    tried: int = 0
    pairs_tried: int = 0
    generated: int = 0
    seconds: float = 0.0
    budget: float | None = None  # the seconds it was given (fix_seconds can leave less than search_seconds)
    stopped: Stopped | None = None  # None: it found a fix
    best: list[Tried] = field(default_factory=list)  # best partial fixes, for the report
    candidates: list[Candidate] = field(default_factory=list)  # the single edits, in search order
    history: list[Tried] = field(default_factory=list)  # every single edit validated
    duplicates: int = 0  # candidates not validated: the same code, up to meaning, as an earlier one
    pairs_pruned: int = 0  # single edits left out of pairs: they changed nothing, or made things worse
    alternatives: list[Fix] = field(default_factory=list)  # other verified fixes, best first


_QUOTED = re.compile(r"'([^'\\\n]{1,30})'" + r'|"([^"\\\n]{1,30})"')
MAX_HEARD = 8  # distinct strings taken from the failing tests' messages


def quoted_strings(messages: list[str]) -> tuple[str, ...]:
    """The short strings the failing tests' messages quote (``KeyError: 'last'``, ``assert 'x'
    == 'y'``), first seen first: ``swap_literal`` may put one in place of a string literal, the
    fix of a wrong key or label the file itself never spells."""
    seen: dict[str, None] = {}
    for message in messages:
        for match in _QUOTED.finditer(message or ""):
            seen.setdefault(match.group(1) if match.group(1) is not None else match.group(2), None)
            if len(seen) >= MAX_HEARD:
                return tuple(seen)
    return tuple(seen)


# Operators whose sites are themselves evidence, not guesses: `fix_attribute` only where a
# failing test's AttributeError names the attribute, `use_parameter` only where the function
# never reads a parameter whose default it spells out.  The prior's data never saw them (it
# would give them its smallest weight, so boltons' `.issupserset` fix came 122nd); they weigh
# twice the likeliest operator: first at their line, and before guesses at lines up to twice
# as suspicious.
EVIDENCE_OPERATORS = frozenset({"fix_attribute", "use_parameter"})
EVIDENCE_WEIGHT = 2.0

# ``ValueError: ...`` / ``E   pkg.errors.ParseError: ...``: a class the failing tests raised.
_RAISED = re.compile(r"(?:^|[\s(])((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt|Iteration))"
                     r"(?::|$)", re.M)
MAX_RAISED = 4


def raised_classes(messages: list[str]) -> tuple[str, ...]:
    """The exception classes the failing tests' messages name as raised, first seen first:
    ``extend_except`` and ``wrap_try`` catch them (a fix often handles what the test hit)."""
    seen: dict[str, None] = {}
    for message in messages:
        for match in _RAISED.finditer(message or ""):
            if match.group(1) not in ("AssertionError",):  # an assertion is the test's, not the code's
                seen.setdefault(match.group(1), None)
            if len(seen) >= MAX_RAISED:
                return tuple(seen)
    return tuple(seen)


class Search:
    def __init__(self, ws: Workspace, verifier: Verifier, *, max_locations: int = 10,
                 max_candidates: int = 400, max_pairs: int = 150, seconds: float = 300.0,
                 progress: Progress | None = None, cancel: threading.Event | None = None,
                 lanes: Callable[[], list[Verifier]] | None = None,
                 prior: dict[str, float] | None = None, deadline: float | None = None) -> None:
        self.ws = ws
        # When the whole fix must end (time.monotonic(); fix_seconds): alternatives are not
        # confirmed past it (each is a fresh run of the selected tests), the offered fix is.
        self.deadline = deadline
        self.prior = operator_weights() if prior is None else prior
        self._keys = SemanticKeys()
        self.duplicates = 0
        self.pruned = 0
        self.verifier = verifier
        self.heard = quoted_strings(getattr(verifier, "messages", []))
        self.raised = raised_classes(getattr(verifier, "messages", []))
        # More verifiers on their own shadow copies, asked for once there are enough candidates
        # to be worth a second warm session: candidates are then validated that many at a time.
        self._lanes = lanes
        self._opened: list[Verifier] | None = None
        self._opening: threading.Thread | None = None  # the lanes opened ahead (``_open_ahead``)
        self._warming: list[threading.Thread] = []  # the runners' warm-ups (``TestRunner.warm_up``)
        self.max_locations = max_locations
        self.max_candidates = max_candidates
        self.max_pairs = max_pairs
        self.seconds = seconds
        self._hard: float | None = None  # set by run()
        self.progress = progress or Silent()
        self.cancel = cancel or threading.Event()
        self._sources: dict[str, str | None] = {}
        # Each module parsed once, with its position metadata, for all its suspicious lines:
        # resolving libcst's metadata anew per location was most of listing the candidates.
        self._prepared: dict[str, object] = {}

    # -- candidates -----------------------------------------------------------------------
    def source(self, path: str) -> str | None:
        if path not in self._sources:
            # Test code is the specification: the search never mutates it (opted in or not).
            why = self.verifier.spec.reason(path)
            if why:
                log.info("not searching %s: %s", path, why)
                self._sources[path] = None
                return None
            try:
                self.ws.check_editable(path)
                self._sources[path] = self.ws.read(path)
            except Exception as exc:  # noqa: BLE001 - unreadable or not editable: not searched
                log.info("not searching %s: %s", path, exc)
                self._sources[path] = None
        return self._sources[path]

    def _mutations_near(self, locations: list[Location]) -> list[list[Mutation]]:
        """The mutations at each of ``locations`` (in their order), each location's once.

        One ``mutations`` call per file for all its suspicious lines: a call walks every
        operator's sites over the whole of each function it touches, and the top locations
        mostly lie in one function (more-itertools' windowed bug: ten lines of one function,
        1.2 s called per location, 0.3 s at once)."""
        out: list[list[Mutation]] = [[] for _ in locations]
        for path in dict.fromkeys(loc.path for loc in locations):
            source = self.source(path)
            if source is None:
                continue
            mine = [(i, loc) for i, loc in enumerate(locations) if loc.path == path]
            try:
                prepared = self._prepare(path, source)
                found = mutations(source, path, lines={ln for _, loc in mine for ln in loc.lines},
                                  ingredients=self.heard, raised=self.raised, prepared=prepared, per_line=True)
            except OperatorError as exc:
                log.info("no candidates in %s: %s", path, exc)
                continue
            for i, loc in mine:
                lines, seen = set(loc.lines), set()
                for m in found:
                    if m.line in lines and (m.start, m.old, m.new) not in seen:
                        seen.add((m.start, m.old, m.new))
                        out[i].append(m)
                # The `except` clauses guarding these lines: one that did not match ran no line
                # the spectra could rank, yet its class may be the bug.
                guards = handler_lines(source, loc.lines)
                if guards:
                    try:
                        out[i] += mutations(source, path, lines=guards, operators=["swap_exception", "extend_except"],
                                            raised=self.raised, prepared=prepared)
                    except OperatorError:
                        pass
        return out

    def _header_mutations(self, loc: Location) -> list[Mutation]:
        """Default arguments of the suspicious function: run at import time, so never ranked."""
        source = self.source(loc.path)
        if source is None or loc.function is None:
            return []
        try:
            return mutations(source, loc.path, functions={loc.function}, operators={"default_arg"},
                             prepared=self._prepare(loc.path, source))
        except OperatorError:
            return []

    def _function_mutations(self, path: str, function: str) -> list[Mutation]:
        """The evidence operators' mutations anywhere in ``function`` of ``path``."""
        source = self.source(path)
        if source is None:
            return []
        try:
            return mutations(source, path, functions={function}, operators=sorted(EVIDENCE_OPERATORS),
                             ingredients=self.heard, prepared=self._prepare(path, source))
        except OperatorError:
            return []

    def _prepare(self, path: str, source: str):
        """``source`` parsed once (``operators.prepare``); OperatorError when it does not parse."""
        if path not in self._prepared:
            self._prepared[path] = prepare(source)
        return self._prepared[path]

    def singles(self, locations: list[Location]) -> list[Candidate]:
        """Single-edit candidates, most promising first.

        Spectra often tie (every line only the failing tests run scores the same), so within
        a score the common bug kinds at all tied lines come before the rarer kinds at any.
        """
        top = locations[: self.max_locations]
        keyed: list[tuple[tuple, int, Mutation]] = []
        for rank, (loc, found) in enumerate(zip(top, self._mutations_near(top))):
            for m in found:
                keyed.append(((-round(loc.score * self.weight(m.operator), 4), _PRIORITY.get(m.operator, 99),
                               rank, m.size), rank, m))
        for rank, loc in enumerate(top[:3]):
            for m in self._header_mutations(loc):
                keyed.append(((1, -self.weight(m.operator), _PRIORITY.get(m.operator, 99), rank, m.size), rank, m))
        # The evidence operators over the whole of each suspicious function: a parameter never
        # read is a fact about the function, not a line (boltons' args2cmd spells its `sep`
        # default on a line that ranked 14th, below the top locations).
        functions: dict[tuple[str, str], int] = {}
        for rank, loc in enumerate(locations[: 2 * self.max_locations]):
            if loc.function is not None:
                functions.setdefault((loc.path, loc.function), rank)
        for (path, function), rank in functions.items():
            score = next(loc.score for loc in locations if loc.path == path and loc.function == function)
            for m in self._function_mutations(path, function):
                keyed.append(((-round(score * self.weight(m.operator), 4), 0, rank, m.size), rank, m))
        keyed.sort(key=lambda item: item[0])
        seen: set[tuple] = set()
        out: list[Candidate] = []
        for _, rank, m in keyed:
            cand = self._candidate((m,), rank, seen)
            if cand is not None:
                out.append(cand)
            if len(out) >= max(self.max_candidates, _LISTED):
                break
        return out

    def weight(self, operator: str) -> float:
        """The operator's prior (unseen by the prior's data: the smallest weight it has); an
        operator that only offers what the run itself points at weighs more than the likeliest."""
        if operator in EVIDENCE_OPERATORS:
            return EVIDENCE_WEIGHT * max(self.prior.values(), default=1.0)
        return self.prior.get(operator, min(self.prior.values(), default=1.0))

    def _candidate(self, muts: tuple[Mutation, ...], rank: int,
                   seen: set[tuple]) -> Candidate | None:
        by_file: dict[str, list[Mutation]] = {}
        for m in muts:
            by_file.setdefault(m.path, []).append(m)
        edits = []
        for path, group in by_file.items():
            before = self.source(path)
            if before is None:
                return None
            group.sort(key=lambda m: m.start, reverse=True)
            if any(a.start < b.end for a, b in zip(group, group[1:])):
                return None  # overlapping edits
            after = before
            try:
                for m in group:  # from the end of the file backwards, so offsets stay valid
                    after = m.apply(after)
            except (OperatorError, ValueError):
                return None
            edits.append(FileEdit(path, before, after))
        try:  # the key compiles the changed function (dedupe): an edit that does not compile is dropped
            key = tuple(sorted(self._keys.key(e.path, e.before, e.after) for e in edits))
        except (SyntaxError, ValueError):
            return None
        if key in seen:
            self.duplicates += 1
            return None
        seen.add(key)
        return Candidate(muts, Patch(tuple(edits)), rank)

    # -- the search -----------------------------------------------------------------------
    def run(self, locations: list[Location]) -> SearchResult:
        started = time.monotonic()
        # Candidate runs are killed this long after the budget ends: the search checks its time
        # only between candidates, and one run (a test that hangs, a fresh interpreter after the
        # warm server was lost) could otherwise outlive it by minutes.
        self._hard = started + self.seconds + HARD_GRACE
        # The first candidate's run needs the warm session (a collection of the suite): started
        # while the candidates are listed (libcst work in this process), not after; the run
        # waits for it.
        self._warming = [self.verifier.runner.warm_up()]
        self._open_ahead(after=self._warming[0])
        try:
            return self._run(started, self.singles(locations))
        finally:
            self._settle()
            # Every warm-up ends with the search: whoever uses a lane next (a recheck syncing
            # its shadow) must not race a collection.  By now they are long done: a fix's
            # confirmation, a whole run, takes longer than a collection.
            for thread in self._warming:
                thread.join()

    def _run(self, started: float, singles: list[Candidate]) -> SearchResult:
        result = SearchResult()
        result.generated = len(singles)
        result.candidates = singles
        tried: list[Tried] = []
        winners: list[Tried] = []
        total = min(len(singles), self.max_candidates) + self.max_pairs
        todo = singles[: self.max_candidates]
        found_at, extra = 0.0, 0  # when the first fix was verified; candidates validated since
        keep: Callable[[Candidate], bool] | None = None
        # The first few on one lane: a fix found among them never pays for a second lane's
        # shadow copy and warm session (seconds, more than a few candidates cost).
        for first, chunk in ((True, todo[:_PARALLEL_FROM]), (False, todo[_PARALLEL_FROM:])):
            if not chunk or result.stopped is not None or (winners and extra >= ALT_CANDIDATES):
                break
            # Alternatives alone are not worth opening a lane for either.
            one = first or (bool(winners) and self._opened is None)
            with _Lanes([self.verifier] if one else self._open_lanes(len(todo)), chunk, self._hard) as lanes:
                lanes.keep = keep
                for cand, outcome in lanes.results():
                    if winners:  # a fix is verified: a bounded look for alternatives at the top locations
                        if extra >= ALT_CANDIDATES or time.monotonic() - found_at > ALT_SECONDS:
                            extra = ALT_CANDIDATES
                            break
                        if keep is not None and not keep(cand):
                            continue
                    # A fix validated while the budget ran out still counts (a candidate whose
                    # test hangs can take the rest of the budget); anything else ends here.
                    if self._stop(started, result) and not (outcome is not None and outcome.verified):
                        break
                    if outcome is None:  # a lane skipped it (a fix elsewhere was known)
                        continue
                    extra += bool(winners)
                    result.tried += 1
                    tried.append(Tried(cand, outcome))
                    self.progress.update(result.tried, total, self._note(cand, tried))
                    if outcome.verified:
                        winners.append(tried[-1])
                        if keep is None:
                            found_at, top = time.monotonic(), max(cand.rank, ALT_LOCATIONS - 1)
                            keep = lanes.keep = lambda c, top=top: c.rank <= top
        fix, result.alternatives = self._confirm(winners)
        if fix is not None:
            fix, result.alternatives = self._complete(fix, result.alternatives, winners)
        if fix is None and result.stopped is None:
            fix = self._pairs(singles, tried, started, result, total)
        result.fix = fix
        result.duplicates = self.duplicates
        result.history = tried
        result.best = sorted((t for t in tried if t.result.fixed),
                             key=lambda t: (-len(t.result.fixed), len(t.result.broken), t.candidate.size))[:3]
        if fix is None and result.stopped is None:
            result.stopped = "exhausted"
        elif fix is not None:
            result.stopped = None  # found, if only as the budget ran out
        result.seconds = time.monotonic() - started
        return result

    def _open_ahead(self, after: threading.Thread) -> None:
        """On a suite of ``_AHEAD_FROM_TESTS`` tests or more, open the other lanes on a thread
        now, while this one lists the candidates, and collect their warm sessions (each lane's
        first run waits for its own), one after the other from ``after`` (the first lane's
        warm-up): on 2 CPUs, listing and one collection at a time (two at once slowed the
        listing by a second); the opening is joined (``_settle``) before they are used."""
        if self._lanes is None or self._opened is not None or self._opening is not None:
            return
        if len(self.verifier.failing) + len(self.verifier.passing) < _AHEAD_FROM_TESTS:
            return

        def work() -> None:
            previous = after
            for lane in self._open_now()[1:]:
                previous.join()
                previous = lane.runner.warm_up()  # a failure is the lane's first run's to report
                self._warming.append(previous)

        self._opening = threading.Thread(target=work, name="frognano-lanes", daemon=True)
        self._opening.start()

    def _settle(self) -> None:
        if self._opening is not None:
            self._opening.join()
            self._opening = None

    def _open_lanes(self, candidates: int) -> list[Verifier]:
        """The lanes for ``candidates`` candidates: opened once, when first worth it."""
        self._settle()
        if self._opened is None and self._lanes is not None and candidates >= _PARALLEL_FROM:
            self._open_now()
        return self._opened or [self.verifier]

    def _open_now(self) -> list[Verifier]:
        assert self._lanes is not None
        if self._opened is None:
            try:
                self._opened = self._lanes() or [self.verifier]
            except Exception as exc:  # noqa: BLE001 - no second lane (no free shadow, no memory): one lane
                log.info("validating one candidate at a time: %s", exc)
                self._opened = [self.verifier]
        return self._opened

    def _note(self, cand: Candidate, tried: list[Tried]) -> str:
        """The progress note: the latest candidate, then the best partial fix so far, so a
        face can show whether the search is getting anywhere."""
        best = max((t for t in tried if t.result.fixed), default=None,
                   key=lambda t: (len(t.result.fixed), -len(t.result.broken), -t.candidate.size))
        if best is None:
            return cand.describe()
        broken = len(best.result.broken)
        return (f"{cand.describe()} · best so far: {best.candidate.describe()} fixes "
                f"{len(best.result.fixed)} of {len(self.verifier.failing)}"
                + (f", breaks {broken}" if broken else ""))

    def _stop(self, started: float, result: SearchResult) -> bool:
        if self.cancel.is_set():
            result.stopped = "cancelled"
        elif time.monotonic() - started > self.seconds:
            result.stopped = "time"
        return result.stopped is not None

    def rank_key(self, t: Tried) -> tuple:
        """How verified candidates are ranked: tests fixed, then the smaller change, the higher
        operator prior, the more suspicious location (its own statement before a neighbour's)."""
        ops = [m.operator for m in t.candidate.mutations]
        prior = min(self.weight(op) for op in ops)
        return (-len(t.result.fixed), t.candidate.size, -prior, t.candidate.rank,
                max(_PRIORITY.get(op, 99) for op in ops))  # then search order: the sort is stable

    def _confirm(self, winners: list[Tried]) -> tuple[Fix | None, list[Fix]]:
        """The best verified candidate that also passes the whole suite, and up to
        ``MAX_ALTERNATIVES`` more that do, in rank order (alternatives within ``ALT_SECONDS``).

        With the lanes open, the confirmations run one per lane at once: a fresh run of the
        suite is one process, so on 2 CPUs the fix's and the first alternative's take the time
        of one (more-itertools: 13.3 s -> 5.4 s).  The verdicts are read in rank order, so the
        outcome is what one lane would give."""
        self._settle()
        lanes = self._opened if self._opened is not None and len(self._opened) > 1 else [self.verifier]
        ordered = sorted(winners, key=self.rank_key)
        fixes: list[Fix] = []
        since, each = 0.0, 0.0  # when the fix was confirmed; what its confirmation took
        at = 0
        while at < len(ordered):
            # An alternative's confirmation costs what the fix's did: one that would end past
            # ALT_SECONDS is not started (on a suite 16 times more-itertools', 40 s each).
            if len(fixes) > MAX_ALTERNATIVES or (fixes and time.monotonic() - since + each > ALT_SECONDS):
                break
            if fixes and self.deadline is not None and time.monotonic() > self.deadline:
                break
            batch = ordered[at:at + len(lanes)]
            at += len(batch)
            started = time.monotonic()
            for t, verification in zip(batch, _confirm_on(lanes, [t.candidate.patch for t in batch])):
                if verification is not None:
                    if not fixes:
                        since, each = time.monotonic(), time.monotonic() - started
                    fixes.append(Fix(t.candidate.patch, verification, "search", t.candidate.notes))
        fixes = fixes[:MAX_ALTERNATIVES + 1]
        return (fixes[0], fixes[1:]) if fixes else (None, [])

    def _complete(self, fix: Fix, alternatives: list[Fix], winners: list[Tried]) -> tuple[Fix, list[Fix]]:
        """``fix`` made at every place of its file with the same mistake, when its operator's
        fix is the same wherever the text is (``SIBLING_OPERATORS``) and that verifies too: then
        it is the fix, and the single edit the first alternative."""
        won = next((t for t in winners if t.candidate.patch is fix.patch), None)
        if won is None or len(won.candidate.mutations) != 1 or self.cancel.is_set():
            return fix, alternatives
        m = won.candidate.mutations[0]
        source = self.source(m.path)
        if m.operator not in SIBLING_OPERATORS or source is None:
            return fix, alternatives
        if self.deadline is not None and time.monotonic() > self.deadline:
            return fix, alternatives
        try:
            same = [x for x in mutations(source, m.path, operators=[m.operator], ingredients=self.heard,
                                         prepared=self._prepare(m.path, source))
                    if x.description == m.description and x.start != m.start]
        except OperatorError:
            return fix, alternatives
        cand = self._candidate((m, *same), won.candidate.rank, set()) if same else None
        if cand is None or not self.verifier.check(cand.patch).verified:
            return fix, alternatives
        verification = self.verifier.confirm(cand.patch)
        if verification is None:
            return fix, alternatives
        log.info("the same fix at %d more place%s of %s verifies too", len(same), "s" * (len(same) > 1), m.path)
        return Fix(cand.patch, verification, "search", cand.notes), [fix, *alternatives][:MAX_ALTERNATIVES]

    def _pair_order(self, singles: list[Candidate], tried: list[Tried]) -> Iterator[tuple[Candidate, Candidate]]:
        """Pairs in the order worth trying, reusing what each single edit showed alone.

        Left out: an edit that was refused or made things worse (the module no longer imports, a
        test now hangs), and one that ran every failing test and moved none of them (its
        partner would have to do all the work).  Then partial fixes are completed first, by
        edits that moved a failing test before those not seen to."""
        outcome = {id(t.candidate): t.result for t in tried}

        def idle(r: CandidateResult) -> bool:
            return bool(r.refused or r.worse) or not (r.fixed or r.changed or r.unseen)

        usable = [c for c in singles if id(c) not in outcome or not idle(outcome[id(c)])]
        self.pruned = len(singles) - len(usable)
        moved = {id(c) for c in usable if id(c) in outcome and (outcome[id(c)].fixed or outcome[id(c)].changed)}
        ordered = [c for c in usable if id(c) in moved] + [c for c in usable if id(c) not in moved]
        partial = sorted((t for t in tried if t.result.fixed and not t.result.worse),
                         key=lambda t: (-len(t.result.fixed), len(t.result.broken), t.candidate.size))
        firsts = [t.candidate for t in partial[:10]]
        # Pairs that complete a partial fix come first, then pairs of the most suspicious edits
        # (two bugs that each hide the other's effect fix no test on their own).
        for a in firsts:
            for b in ordered:
                if b is not a and b.rank != a.rank:
                    yield a, b
        pool = ordered[:20]
        for i, a in enumerate(pool):
            for b in pool[i + 1:]:
                if b.rank != a.rank:
                    yield a, b

    def _pairs(self, singles: list[Candidate], tried: list[Tried], started: float,
               result: SearchResult, total: int) -> Fix | None:
        pairs, more = self._pair_candidates(singles, tried)
        result.pairs_pruned, result.duplicates = self.pruned, self.duplicates
        while pairs:
            verified: Tried | None = None
            with _Lanes(self._open_lanes(len(pairs)), pairs, self._hard) as lanes:
                for i, (cand, outcome) in enumerate(lanes.results()):
                    if self._stop(started, result) and not (outcome is not None and outcome.verified):
                        return None
                    result.pairs_tried += 1
                    self.progress.update(result.tried + result.pairs_tried, total, self._note(cand, tried))
                    if outcome is not None and outcome.verified:
                        verified, pairs = Tried(cand, outcome), pairs[i + 1:]
                        break
                else:
                    pairs = []
            if verified is not None:  # confirmed once the lanes stopped: lane 0 is free again
                fix, _ = self._confirm([verified])
                if fix is not None:
                    return fix
        if more and result.stopped is None:
            result.stopped = "budget"
        return None

    def _pair_candidates(self, singles: list[Candidate], tried: list[Tried]) -> tuple[list[Candidate], bool]:
        """The two-edit candidates to try, in order, at most ``max_pairs``; and whether more
        would have followed (the budget, not the pairs, ran out)."""
        seen: set[tuple] = set()
        done: set[frozenset[int]] = set()
        pairs: list[Candidate] = []
        for a, b in self._pair_order(singles, tried):
            key = frozenset((id(a), id(b)))
            if key in done:
                continue
            done.add(key)
            cand = self._candidate(a.mutations + b.mutations, min(a.rank, b.rank), seen)
            if cand is None:
                continue
            if len(pairs) >= self.max_pairs:
                return pairs, True
            pairs.append(cand)
        return pairs, False
