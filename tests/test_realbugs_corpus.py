"""Every case of the real-bugs corpus (benchmarks/realbugs/) is sound, so none slips in broken:
its layout is the shared format, the buggy project's visible tests fail, and the correct file
passes the visible and the held-out tests.  Plain pytest subprocesses, the benchmark's own check."""

from __future__ import annotations

import difflib
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load_realbugs():
    sys.path.insert(0, str(BENCHMARKS))  # realbugs.py imports its neighbour _table
    try:
        spec = importlib.util.spec_from_file_location("realbugs_benchmark", BENCHMARKS / "realbugs.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


realbugs = _load_realbugs()
CASES = realbugs.case_dirs()


def test_the_corpus_is_there():
    assert len(CASES) >= 21
    names = [d.name for d in CASES]
    numbers = [name.split("-", 1)[0] for name in names]
    assert all(n.isdigit() and len(n) == 2 for n in numbers), names
    assert len(set(numbers)) == len(numbers), "two cases share a number"


@pytest.mark.slow
@pytest.mark.parametrize("root", CASES, ids=[d.name for d in CASES])
def test_case_is_sound(root, tmp_path):
    case = realbugs.load_case(root)
    assert realbugs.self_check(case, tmp_path) is None


def _copy_case(tmp_path: Path) -> Path:
    dest = tmp_path / "99-copy"
    shutil.copytree(CASES[0], dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_self_check_rejects_a_correct_file_that_is_the_bug(tmp_path):
    root = _copy_case(tmp_path)
    case = realbugs.load_case(root)
    shutil.copyfile(root / "project" / case.file, root / "correct" / case.file)
    assert "is the buggy file" in realbugs.self_check(case, tmp_path / "scratch")


def test_self_check_rejects_held_out_tests_the_correct_version_fails(tmp_path):
    root = _copy_case(tmp_path)
    held = root / "heldout" / "test_heldout.py"
    held.write_text(held.read_text() + "\n\ndef test_impossible():\n    assert 1 == 2\n")
    why = realbugs.self_check(realbugs.load_case(root), tmp_path / "scratch")
    assert why is not None and "correct version fails" in why and "test_impossible" in why


def test_self_check_rejects_a_bug_no_visible_test_catches(tmp_path):
    root = _copy_case(tmp_path)
    case = realbugs.load_case(root)
    shutil.copyfile(root / "correct" / case.file, root / "project" / case.file)
    (root / "correct" / case.file).write_text((root / "correct" / case.file).read_text() + "\n# tidied\n")
    assert "exit 0, not 1" in realbugs.self_check(case, tmp_path / "scratch")


def test_load_case_names_a_bad_class(tmp_path):
    root = _copy_case(tmp_path)
    toml = root / "case.toml"
    toml.write_text(toml.read_text().replace('class = "', 'class = "made-up-'))
    with pytest.raises(ValueError, match="unknown class"):
        realbugs.load_case(root)


def _diff(case, new_text: str) -> str:
    old_text = (case.root / "project" / case.file).read_text()
    return "".join(difflib.unified_diff(old_text.splitlines(True), new_text.splitlines(True),
                                        f"a/{case.file}", f"b/{case.file}"))


def test_judge_accepts_the_correct_fix(tmp_path):
    case = realbugs.load_case(realbugs.CORPUS / "04-paginate-size")
    correct = (case.root / "correct" / case.file).read_text()
    assert realbugs.judge(case, _diff(case, correct), tmp_path) == (True, "")


def test_judge_rejects_a_fix_that_only_satisfies_the_visible_tests(tmp_path):
    # ``start + 10`` passes every visible test (they use the default page size) but not other sizes.
    case = realbugs.load_case(realbugs.CORPUS / "04-paginate-size")
    buggy = (case.root / "project" / case.file).read_text()
    plausible = buggy.replace("items[start:start + number]", "items[start:start + 10]")
    assert plausible != buggy
    visible = realbugs.copy_project(case, tmp_path / "visible")
    (visible / case.file).write_text(plausible)
    assert realbugs.pytest(visible).rc == 0
    correct, note = realbugs.judge(case, _diff(case, plausible), tmp_path / "judge")
    assert not correct and "test_other_sizes" in note
