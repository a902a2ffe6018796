"""The task store: JSON lines that round-trip, deduplicate, survive a crash and load with datasets."""

from __future__ import annotations

import json

import pytest

from frognano.synthesis import Family, StoreError, Task, TaskStore, make_instance_id, read_tasks, repo_name

from ..conftest import raises_naming

PATCH = """\
diff --git a/src/calc/ops.py b/src/calc/ops.py
--- a/src/calc/ops.py
+++ b/src/calc/ops.py
@@ -3,4 +3,4 @@ def clamp(x, lo, hi):
-    if x < lo:
+    if x <= lo:
         return lo
"""

COLUMNS = ["instance_id", "repo", "base_commit", "base_kind", "patch", "FAIL_TO_PASS", "PASS_TO_PASS",
           "family", "operators", "n_bugs", "n_fail", "distance", "file_lines", "traceback_through_bug", "hint"]


def make_task(n: int = 0, **kw) -> Task:
    fields = dict(
        repo="octo/calc", base_commit="0123456789abcdef0123456789abcdef01234567",
        patch=PATCH.replace("x <= lo", f"x <= lo + {n}") if n else PATCH,
        FAIL_TO_PASS=["tests/test_ops.py::test_clamp_low"],
        PASS_TO_PASS=["tests/test_ops.py::test_clamp_mid", "tests/test_ops.py::test_add[1-2]"],
        family=Family("compare").key, operators=["compare"], distance=0, file_lines=42,
        traceback_through_bug=True, hint="The bug is in `clamp` (src/calc/ops.py).",
    )
    fields.update(kw)
    return Task(**fields)


def test_task_round_trips_and_fills_derived_fields():
    task = make_task()
    assert task.n_bugs == 1 and task.n_fail == 1
    assert task.instance_id == f"octo__calc.01234567.compare-b1-function-d0.{task.instance_id[-8:]}"
    line = task.to_json()
    assert "\n" not in line
    assert list(json.loads(line)) == COLUMNS
    assert Task.from_json(line) == task
    assert task.family_settings == Family("compare")


def test_unknown_keys_survive_a_round_trip():
    data = {**make_task().to_dict(), "image_name": "swesmith.x86_64.octo__calc", "created_at": "2025-01-01"}
    task = Task.from_dict(data)
    assert task.extra == {"image_name": "swesmith.x86_64.octo__calc", "created_at": "2025-01-01"}
    assert task.to_dict() == data


def test_content_hash_base_and_multi_bug_family():
    task = make_task(base_kind="content", base_commit="ABCDEF0123456789" * 4, operators=["compare", "arith"],
                     family=Family("mixed", 2, "file", 2).key, distance=3)
    assert task.base_commit == ("abcdef0123456789" * 4) and task.n_bugs == 2
    assert ".abcdef01.mixed-b2-file-d2." in task.instance_id


@pytest.mark.parametrize("kw, words", [
    (dict(base_kind="svn"), ["base_kind"]),
    (dict(base_commit="main"), ["base_commit"]),
    (dict(patch="just text"), ["patch"]),
    (dict(FAIL_TO_PASS=[]), ["FAIL_TO_PASS"]),
    (dict(FAIL_TO_PASS="t::a"), ["FAIL_TO_PASS"]),
    (dict(PASS_TO_PASS=["tests/test_ops.py::test_clamp_low"]), ["FAIL_TO_PASS", "PASS_TO_PASS"]),
    (dict(n_fail=2), ["n_fail", "FAIL_TO_PASS"]),
    (dict(n_bugs=2), ["n_bugs", "operators"]),
    (dict(family="compare"), ["family"]),
    (dict(family=Family("compare", 2).key, operators=["compare"]), ["family", "n_bugs"]),
    (dict(distance=2), ["family", "distance"]),
    (dict(traceback_through_bug="yes"), ["traceback_through_bug"]),
    (dict(file_lines=-1), ["file_lines"]),
])
def test_bad_tasks_are_named_errors(kw, words):
    with raises_naming(StoreError, words):
        make_task(**kw)


def test_from_dict_names_missing_fields():
    data = make_task().to_dict()
    del data["patch"], data["family"]
    with pytest.raises(StoreError, match="lacks field.*patch, family"):
        Task.from_dict(data)


def test_instance_ids_are_stable_and_readable():
    task = make_task()
    again = make_task()
    assert task.instance_id == again.instance_id == make_instance_id(
        "octo/calc", task.base_commit, task.family, PATCH)
    assert make_task(1).instance_id != task.instance_id  # a different bug
    assert make_task(hint="other words").instance_id == task.instance_id  # same bug and family
    # A pinned value: ids must not change between versions, or stores stop deduplicating runs.
    assert task.instance_id == "octo__calc.01234567.compare-b1-function-d0.1c5f167b"
    assert repo_name("https://github.com/octo/calc.git") == "octo__calc"
    assert repo_name("git@github.com:octo/calc.git") == "octo__calc"
    assert repo_name("/home/me/src/calc/") == "calc"
    assert repo_name("octo/calc") == "octo__calc"


def test_store_appends_iterates_and_deduplicates(tmp_path):
    path = tmp_path / "out" / "tasks.jsonl"
    with TaskStore(path) as store:
        assert store.append(make_task(0)) and store.append(make_task(1))
        # Same bug under another family or hint: the same task, skipped and counted.
        assert not store.append(make_task(0, hint="another hint"))
        assert store.extend([make_task(1), make_task(2)]) == 1
        assert len(store) == 3 and store.duplicates == 2
        assert make_task(2) in store and make_task(3) not in store
        assert [t.instance_id for t in store] == [make_task(n).instance_id for n in range(3)]
    assert store.closed
    assert path.read_text().count("\n") == 3
    with pytest.raises(StoreError, match="closed"):
        store.append(make_task(5))


def test_reopening_resumes_dedup_and_count(tmp_path):
    path = tmp_path / "tasks.jsonl"
    with TaskStore(path) as store:
        store.extend(make_task(n) for n in range(3))
    with TaskStore(path) as store:
        assert len(store) == 3 and store.duplicates == 0
        assert not store.append(make_task(1)) and store.append(make_task(3))
        assert store.duplicates == 1 and len(store) == 4
    assert [t for t in read_tasks(path)] == [make_task(n) for n in range(4)]


def test_resume_cuts_a_half_written_last_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    with TaskStore(path) as store:
        store.extend(make_task(n) for n in range(2))
    whole = path.read_bytes()
    partial = (make_task(2).to_json() + "\n").encode()[:57]
    path.write_bytes(whole + partial)  # a crash in the middle of the third write
    assert len(list(read_tasks(path))) == 2  # readers skip it without touching the file
    assert path.read_bytes() == whole + partial
    with TaskStore(path) as store:
        assert store.recovered and len(store) == 2
        assert path.read_bytes() == whole
        assert store.append(make_task(2))  # not a duplicate: it was never stored
    assert [t for t in read_tasks(path)] == [make_task(n) for n in range(3)]


def test_resume_keeps_a_complete_last_line_missing_only_its_newline(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(make_task(0).to_json() + "\n" + make_task(1).to_json())
    with TaskStore(path) as store:
        assert not store.recovered and len(store) == 2
        store.append(make_task(2))
    assert [t for t in read_tasks(path)] == [make_task(n) for n in range(3)]


def test_a_corrupt_line_in_the_middle_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(make_task(0).to_json() + "\n{oops\n" + make_task(1).to_json() + "\n")
    with pytest.raises(StoreError, match=r"tasks.jsonl:2: not a JSON task"):
        TaskStore(path)
    assert path.read_text().count("\n") == 3  # nothing lost


def test_one_writer_per_file(tmp_path):
    path = tmp_path / "tasks.jsonl"
    with TaskStore(path):
        with pytest.raises(StoreError, match="another TaskStore"):
            TaskStore(path)
    with TaskStore(path) as store:  # released on close
        assert len(store) == 0


def test_text_that_is_not_utf8_is_refused_before_writing(tmp_path):
    path = tmp_path / "tasks.jsonl"
    bad = make_task(hint="bad \udcff byte")
    with TaskStore(path) as store:
        with pytest.raises(StoreError, match="not valid UTF-8"):
            store.append(bad)
        assert len(store) == 0
    assert path.read_bytes() == b""


def test_datasets_loads_the_store_with_the_specified_columns(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # invariant 4: tests never reach the network
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    path = tmp_path / "tasks.jsonl"
    with TaskStore(path) as store:
        store.append(make_task(0))
        store.append(make_task(1, PASS_TO_PASS=[], traceback_through_bug=False))
        store.append(make_task(2, base_kind="content", base_commit="feed" * 16, operators=["compare", "arith"],
                               family=Family("mixed", 2, "test", 1).key, distance=1))
    ds = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf"))
    assert ds.column_names == COLUMNS
    assert ds.num_rows == 3
    row = ds[2]
    assert row["base_kind"] == "content" and row["base_commit"] == "feed" * 16
    assert row["operators"] == ["compare", "arith"] and row["n_bugs"] == 2
    assert ds[1]["PASS_TO_PASS"] == [] and ds[1]["traceback_through_bug"] is False
    assert ds[0]["FAIL_TO_PASS"] == ["tests/test_ops.py::test_clamp_low"]
    assert ds[0]["patch"] == PATCH
    assert [Task.from_dict(r) for r in ds] == list(read_tasks(path))
