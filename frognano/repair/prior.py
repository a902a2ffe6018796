"""A prior over fix operators, learned from data: how often each operator's edit was the fix.

The search orders candidates by ``localisation score x prior(operator)``, where the prior is the
operator's Laplace-smoothed fix frequency, ``(count + 1) / (total + K)`` over the K search
operators of the catalogue (an operator never seen keeps a nonzero prior).  The counts live in
``frognano/operators/prior.json``, generated, never hand-edited, from two sources:

- the real-bug corpus (``benchmarks/realbugs/*/``): for each case, the operator whose mutation
  of the buggy file at the bug line gives exactly the correct file (cases no single mutation
  repairs count for nothing);
- synthesised tasks (``frognano synth`` JSONL): the inverse of each injected operator, the edit
  that repairs it.

Rebuild it with::

    python -m frognano.repair.prior --corpus benchmarks/realbugs [--tasks TASKS.jsonl ...]

The shipped file is fitted on the corpus and on ``benchmarks/prior/synth-examples.jsonl``: 60
tasks ``frognano synth -n 20 --seed 7`` validated on repaired copies of the bundled examples
(those of ``frognano train --preset tiny``'s ``RUN/repos``).

The corpus cases are stored by case id, so the corpus prior can be measured honestly: a
benchmark over the corpus must fit the prior without the case it runs, by setting
``FROGNANO_PRIOR_EXCLUDE=case-id[,case-id...]`` (or passing ``exclude=`` to ``load_prior``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import tomllib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..operators import CATALOGUE, OperatorError, mutations

log = logging.getLogger(__name__)

DATA = Path(__file__).resolve().parents[1] / "operators" / "prior.json"
EXCLUDE_ENV = "FROGNANO_PRIOR_EXCLUDE"
COMMAND = "python -m frognano.repair.prior --corpus benchmarks/realbugs"


def search_operators() -> list[str]:
    """The operators the search enumerates: the K of the smoothing."""
    return sorted(name for name, op in CATALOGUE.items() if op.enumerable)


@dataclass
class Prior:
    corpus: dict[str, str] = field(default_factory=dict)  # case id -> fixing operator
    synth: dict[str, int] = field(default_factory=dict)  # fixing operator -> tasks
    exclude: frozenset[str] = frozenset()  # corpus cases left out (leave-one-out)

    def counts(self) -> Counter[str]:
        counts = Counter({op: n for op, n in self.synth.items()})
        counts.update(op for case, op in self.corpus.items() if case not in self.exclude)
        return counts

    def weights(self) -> dict[str, float]:
        """Smoothed fix frequency of every search operator (they sum to 1 over the catalogue)."""
        counts = self.counts()
        names = set(search_operators()) | set(counts)
        total = sum(counts.values()) + len(names)
        return {name: (counts.get(name, 0) + 1) / total for name in names}

    def weight(self, operator: str) -> float:
        weights = self.weights()
        return weights.get(operator, 1 / (sum(self.counts().values()) + len(weights) + 1))

    def to_json(self, command: str = COMMAND) -> dict:
        return {"generated_by": command, "smoothing": "laplace (+1 per operator)",
                "corpus": dict(sorted(self.corpus.items())), "synth": dict(sorted(self.synth.items()))}


def load_prior(path: Path = DATA, exclude: Iterable[str] | None = None) -> Prior:
    """The prior in ``path``, less the corpus cases in ``exclude`` (default: the environment's
    ``FROGNANO_PRIOR_EXCLUDE``).  A missing or unreadable file is the uniform prior."""
    if exclude is None:
        exclude = [c for c in os.environ.get(EXCLUDE_ENV, "").split(",") if c.strip()]
    try:
        data = json.loads(path.read_text())
        prior = Prior({str(k): str(v) for k, v in data.get("corpus", {}).items()},
                      {str(k): int(v) for k, v in data.get("synth", {}).items()})
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        log.info("operator prior %s not used (%s): every operator weighs the same", path, exc)
        prior = Prior()
    prior.exclude = frozenset(c.strip() for c in exclude)
    return prior


@lru_cache(maxsize=8)
def _cached(exclude: str) -> dict[str, float]:
    return load_prior(exclude=[c for c in exclude.split(",") if c]).weights()


def operator_weights() -> dict[str, float]:
    """The shipped prior's weights, read once per ``FROGNANO_PRIOR_EXCLUDE`` value."""
    return _cached(os.environ.get(EXCLUDE_ENV, ""))


# -- rebuilding ----------------------------------------------------------------------------------


def fixing_operator(buggy: str, correct: str, path: str, line: int) -> str | None:
    """The operator whose single mutation of ``buggy`` near ``line`` gives ``correct``."""
    want = correct.strip()
    try:
        # The bug line first (cheap), then the whole file (a case whose line is off by a few).
        for lines in (set(range(max(1, line - 1), line + 2)), None):
            for m in mutations(buggy, path, lines=lines):
                if m.apply(buggy).strip() == want:
                    return m.operator
    except OperatorError as exc:
        log.info("%s: no mutations (%s)", path, exc)
    return None


def corpus_counts(corpus: Path) -> dict[str, str]:
    """Case id -> fixing operator for every case of the corpus one mutation repairs."""
    out: dict[str, str] = {}
    for case_toml in sorted(corpus.glob("*/case.toml")):
        case = case_toml.parent
        try:
            meta = tomllib.loads(case_toml.read_text())
            rel = str(meta["file"])
            buggy = (case / "project" / rel).read_text()
            correct = (case / "correct" / rel).read_text()
            line = int(meta.get("line", 0))
        except (OSError, KeyError, ValueError, tomllib.TOMLDecodeError) as exc:
            log.warning("%s: skipped (%s)", case.name, exc)
            continue
        op = fixing_operator(buggy, correct, rel, line)
        if op is None:
            log.info("%s: no single catalogue mutation turns the buggy file into the correct one", case.name)
            continue
        out[case.name] = op
    return out


def synth_counts(tasks: Iterable[Path]) -> dict[str, int]:
    """Fixing operator -> tasks, over synthesised tasks (the inverse of each injected operator)."""
    counts: Counter[str] = Counter()
    for path in tasks:
        for raw in Path(path).read_text().splitlines():
            if not raw.strip():
                continue
            try:
                injected = json.loads(raw).get("operators") or []
            except ValueError:
                continue
            for name in injected:
                op = CATALOGUE.get(name)
                if op is not None:
                    counts[op.inverse] += 1
    return dict(counts)


def rebuild(corpus: Path | None, tasks: Iterable[Path] = (), out: Path = DATA) -> Prior:
    tasks = list(tasks)
    prior = Prior(corpus_counts(corpus) if corpus is not None and corpus.is_dir() else {}, synth_counts(tasks))
    # The file names the data it was fitted on: the command that rebuilds it, as it was run.
    command = "python -m frognano.repair.prior" + (f" --corpus {corpus}" if corpus is not None else "") \
        + ("".join(f" --tasks {t}" for t in tasks))
    out.write_text(json.dumps(prior.to_json(command), indent=2) + "\n")
    return prior


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Rebuild the search's operator prior from data.")
    parser.add_argument("--corpus", type=Path, help="the real-bug corpus (benchmarks/realbugs)")
    parser.add_argument("--tasks", type=Path, nargs="*", default=[], help="frognano synth task files (JSONL)")
    parser.add_argument("-o", "--out", type=Path, default=DATA, help=f"where to write it (default {DATA})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    prior = rebuild(args.corpus, args.tasks, args.out)
    counts = prior.counts()
    print(f"{args.out}: {len(prior.corpus)} corpus cases, {sum(prior.synth.values())} synthesised tasks; "
          + ", ".join(f"{op} {n}" for op, n in counts.most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
