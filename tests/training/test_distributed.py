"""Data-parallel training (``training/distributed.py``): the sharded loss is the single-process
loss (the maths, in one process), and ``accelerate launch`` runs ``frognano train`` on two CPU
processes (the plumbing)."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from frognano.training.grpo import GRPOConfig

from ..conftest import CHILD_TIMEOUT
from .test_grpo import BAD, GOOD, lora_state, on_policy, policy  # noqa: F401 - policy is a fixture

# Five episodes in two groups, of different lengths and masks (environment tokens, a truncated
# one), some off-policy so that ratios differ from 1 and both clips bite: shards see different work.
SPECS = [
    (GOOD, [1, 1, 0, 1], 1.0, 0, {}),
    (BAD, [1, 0, 0, 1], 0.0, 0, {}),
    (GOOD + BAD, [1] * 8, 0.5, 0, {}),
    (BAD[:2], [1, 1], 1.0, 1, {}),
    (GOOD[:3], [1, 0, 1], 0.0, 1, {"truncated": True}),
]
ADVANTAGES = [0.5, -0.5, 0.25, 0.5, -0.5]


def _samples(model):
    samples = on_policy(model, SPECS)
    samples[0].logprobs = [lp - 1.0 if m else 0.0 for lp, m in zip(samples[0].logprobs, samples[0].mask)]
    samples[1].logprobs = [lp + 1.0 if m else 0.0 for lp, m in zip(samples[1].logprobs, samples[1].mask)]
    return samples


def _grads(model) -> dict:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("kw", [{"loss_type": "dapo"}, {"loss_type": "grpo"},
                                {"loss_type": "dr_grpo", "max_completion_length": 10},
                                {"loss_type": "dapo", "beta": 0.1}], ids=["dapo", "grpo", "dr_grpo", "kl"])
def test_the_sharded_loss_sums_to_the_whole_batch_loss(policy, kw):  # noqa: F811 - the fixture
    import torch

    from frognano.training.torch_grpo import grpo_loss

    config = GRPOConfig(**kw)
    samples = _samples(policy)
    policy.zero_grad(set_to_none=True)
    whole, whole_stats = grpo_loss(policy, samples, ADVANTAGES, config)
    whole.backward()
    want = _grads(policy)
    assert whole_stats["clip_low_fraction"] > 0 and whole_stats["clip_high_fraction"] > 0
    for world in (2, 3, 6):  # 6: one rank has no episode
        policy.zero_grad(set_to_none=True)
        loss_sum, stats_sum = 0.0, dict.fromkeys(whole_stats, 0.0)
        for rank in range(world):
            loss, stats = grpo_loss(policy, samples, ADVANTAGES, config, shard=(rank, world))
            if loss.requires_grad:
                loss.backward()
            else:
                assert rank >= len(samples) and loss.item() == 0.0
            loss_sum += loss.item()
            for k in stats_sum:
                stats_sum[k] += stats[k]
        assert loss_sum == pytest.approx(whole.item(), abs=1e-6), world
        for k, v in whole_stats.items():
            assert stats_sum[k] == pytest.approx(v, abs=1e-6), (world, k)
        for name, g in _grads(policy).items():
            assert torch.allclose(g, want[name], atol=1e-6), (world, name)


class _Ranks:
    """In-process stand-in for ``distributed.all_reduce``: one thread per rank, summing."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.barrier = threading.Barrier(world, timeout=60)
        self.parts: dict[int, list] = {}

    def reducer(self, rank: int):
        def all_reduce(tensors):
            self.parts[rank] = [t.clone() for t in tensors]
            self.barrier.wait()
            sums = [sum(ts) for ts in zip(*(self.parts[r] for r in range(self.world)))]
            self.barrier.wait()
            for t, s in zip(tensors, sums):
                t.copy_(s)
        return all_reduce


@pytest.mark.parametrize("world", [2, 6])
def test_sharded_steps_with_summed_gradients_equal_the_single_step(policy, world):  # noqa: F811
    """Each rank its own copy of the weights and optimiser; after one step all equal the
    single-process step's weights (6 ranks: one without an episode still takes part)."""
    import torch

    from frognano.training.grpo import assemble
    from frognano.training.torch_grpo import grpo_step, make_optimizer

    config = GRPOConfig(learning_rate=1e-2)
    samples = _samples(policy)
    assert len(assemble(samples, config)[0]) == 5
    copies = [copy.deepcopy(policy) for _ in range(world)]
    optimizer = make_optimizer(policy, config)
    names = {id(p): n for n, p in policy.named_parameters()}
    grads: dict[str, torch.Tensor] = {}

    def keep_grads(opt, args, kwargs) -> None:  # the single step's gradient, as the optimiser sees it
        for group in opt.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    grads[names[id(p)]] = p.grad.detach().clone()

    optimizer.register_step_pre_hook(keep_grads)
    want = grpo_step(policy, optimizer, samples, config)
    ranks, results, errors = _Ranks(world), [None] * world, []

    def run(rank: int) -> None:
        try:
            model = copies[rank]
            results[rank] = grpo_step(model, make_optimizer(model, config), samples, config,
                                      shard=(rank, world), all_reduce=ranks.reducer(rank))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            ranks.barrier.abort()

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    expected = lora_state(policy)
    for rank, model in enumerate(copies):
        assert results[rank]["stepped"] == 1.0
        for k in ("loss", "grad_norm", "tokens", "ratio_mean", "clip_low_fraction", "clip_high_fraction"):
            assert results[rank][k] == pytest.approx(want[k], abs=1e-6), (rank, k)
        # AdamW's first step moves a weight by lr * g / (|g| + eps): about +-lr whatever |g| is.
        # Where g is at float rounding level (a sum whose terms cancel), its sign, and so the
        # weight, depends on the order the ranks' parts were added; those few (checked below)
        # can differ by 2 lr.  Everywhere else the sharded step is the single one.
        conditioned, total = 0, 0
        for name, p in lora_state(model).items():
            solid = (grads[name].abs() > 1e-5) | (grads[name] == 0)  # a zero gradient sums to zero
            conditioned, total = conditioned + int(solid.sum()), total + solid.numel()
            assert torch.allclose(p[solid], expected[name][solid], atol=1e-6), (rank, name)
            assert torch.all((p - expected[name]).abs() <= 2 * config.learning_rate + 1e-6), (rank, name)
        assert conditioned >= 0.9 * total, (conditioned, total)


def test_a_single_process_has_no_distributed_state(monkeypatch):
    from frognano.training import distributed

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not distributed.active() and distributed.is_main()
    assert distributed.gather_objects({"a": 1}) == [{"a": 1}]
    assert distributed.on_main(lambda: 7) == 7
    with distributed.main_first():
        pass
    distributed.barrier()
    distributed.all_reduce([object()])  # never looked at


def _rank_main(tiny: str, out: str) -> None:
    """One rank of ``test_two_gloo_processes_step_like_one``, started with the launcher's
    environment: the distributed helpers for real, then one sharded GRPO step."""
    import torch
    import transformers

    from frognano.training import distributed
    from frognano.training.torch_grpo import grpo_step, lora_model, make_optimizer

    distributed.init()
    rank = distributed.rank()
    assert distributed.gather_objects({"rank": rank}) == [{"rank": 0}, {"rank": 1}]
    assert distributed.on_main(lambda: rank * 10 + 7) == 7  # rank 0's result everywhere
    try:
        with distributed.main_first():
            if distributed.is_main():
                raise ValueError("rank 0 broke")
        raise AssertionError("main_first went on after rank 0 failed")
    except (ValueError, distributed.MainFailed) as exc:
        assert isinstance(exc, ValueError if rank == 0 else distributed.MainFailed), exc
    mixed = [torch.full((2, 3), float(rank + 1)), torch.tensor([rank], dtype=torch.float64)]
    distributed.all_reduce(mixed)
    assert mixed[0].eq(3.0).all() and mixed[1].tolist() == [1.0]
    mine = torch.full((3,), float(rank + 5))
    distributed.broadcast_tensors([mine])
    assert mine.eq(5.0).all()  # rank 0's

    torch.manual_seed(0)  # the `policy` fixture's model
    model = lora_model(transformers.AutoModelForCausalLM.from_pretrained(tiny), GRPOConfig())
    config = GRPOConfig(learning_rate=1e-2)
    stats = grpo_step(model, make_optimizer(model, config), _samples(model), config,
                      shard=(rank, distributed.world()), all_reduce=distributed.all_reduce)
    torch.save({"stats": stats, "lora": lora_state(model)}, Path(out) / f"rank-{rank}.pt")
    distributed.close()


@pytest.mark.slow
def test_two_gloo_processes_step_like_one(policy, tiny_torch, tmp_path):  # noqa: F811 - the fixture
    """``distributed.py`` over a real gloo group of two processes (gather, on_main, main_first's
    failure, all_reduce of mixed dtypes, broadcast_tensors), and a GRPO step through it: both ranks end with the
    single-process step's weights."""
    import torch

    from frognano.training.torch_grpo import grpo_step, make_optimizer

    config = GRPOConfig(learning_rate=1e-2)
    want = grpo_step(policy, make_optimizer(policy, config), _samples(policy), config)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
           "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    code = f"from tests.training.test_distributed import _rank_main; _rank_main({str(tiny_torch)!r}, {str(tmp_path)!r})"
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=root, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    try:
        errors = [p.communicate(timeout=300)[1] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], errors
    expected = lora_state(policy)
    for r in range(2):
        got = torch.load(tmp_path / f"rank-{r}.pt")
        for k in ("loss", "grad_norm", "tokens", "ratio_mean"):
            assert got["stats"][k] == pytest.approx(want[k], abs=1e-6), (r, k)
        for name, p in got["lora"].items():
            assert torch.allclose(p, expected[name], atol=1e-6), (r, name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_accelerate_launch_trains_on_two_processes(tmp_path, shared_training_cache):
    """The README's command on two CPU processes (gloo): the run directory is one run's, written
    once, the held-out tasks are shared out and counted once, and both ranks end with the same
    adapter weights."""
    pytest.importorskip("accelerate")
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("WORLD_SIZE", None)
    # --multi_gpu is accelerate's torchrun launcher; without GPUs each process trains on the CPU.
    done = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
                           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                           "--main_process_port", str(_free_port()),
                           "-m", "frognano", "train", "--preset", "tiny-ci", "-o", str(run)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=CHILD_TIMEOUT, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.count("trained 3 step(s)") == 1  # rank 0's summary only
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]  # one row per step, as a single process writes
    heldout = [line for line in (run / "heldout.jsonl").read_text().splitlines() if line.strip()]
    assert rows[0]["eval"]["tasks"] == len(heldout) > 1  # both ranks' shares, summed
    for r in rows[1:]:
        assert {"reward_mean", "zero_variance_fraction", "refills", "frontier", "stepped", "groups"} <= set(r)
        assert r["groups"] >= 2 and r["errors"] == 0
    assert (run / "latest").read_text().strip() == "step-000003"
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-000002", "step-000003"]
    assert (run / "final" / "config.json").exists()
    ranks = json.loads((run / "distributed.json").read_text())
    assert ranks["world"] == 2 and len(ranks["adapter_sha256"]) == len(ranks["loop_state_sha256"]) == 2
    assert ranks["identical"]  # the same weights and the same draws on both ranks


@pytest.mark.parametrize("micro", [1, 2, 3])
def test_micro_batched_steps_equal_the_one_pass_step(policy, micro):  # noqa: F811
    """``micro_batch`` splits an update's forward and backward passes (a real model's logits do
    not fit in memory for a whole step's episodes at once); the step is the one-pass step."""
    import torch

    from frognano.training.torch_grpo import grpo_step, make_optimizer

    samples = _samples(policy)
    one = copy.deepcopy(policy)
    whole = GRPOConfig(learning_rate=1e-2, micro_batch=len(samples))
    want = grpo_step(one, make_optimizer(one, whole), samples, whole)
    config = GRPOConfig(learning_rate=1e-2, micro_batch=micro)
    got = grpo_step(policy, make_optimizer(policy, config), samples, config)
    assert got["stepped"] == 1.0
    for k in ("loss", "grad_norm", "tokens", "ratio_mean", "clip_low_fraction", "clip_high_fraction"):
        assert got[k] == pytest.approx(want[k], abs=1e-6), k
    expected = lora_state(one)
    for name, p in lora_state(policy).items():
        assert torch.allclose(p, expected[name], atol=1e-6), name
    with pytest.raises(Exception, match="micro_batch"):
        GRPOConfig(micro_batch=0)
