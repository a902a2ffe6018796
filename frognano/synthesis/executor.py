"""Where work runs in parallel: a local process pool or a Ray cluster (docs/ARCHITECTURE.md §5).

Synthesis validates candidates here and evaluation runs tasks here.  Both executors have the
same shape: built from a worker class and its constructor arguments (picklable), ``map(todo)``
yields ``(item, result)`` for each ``item`` of ``todo`` (any iterable, drawn lazily), in that
order, where ``result`` is ``worker.run(item)``; closing the generator early stops handing out
work, and ``close()`` releases the workers.  Each worker (in a spawned process, or a Ray actor)
is one instance of the class, holding its own state for its lifetime: for synthesis a
``_Slot`` (a Workspace shadow slot and TestRunner of its own, validating through
``job.validate_one``), so a candidate's result does not depend on which executor or worker ran
it.

``ray`` is imported only here, and only when a ``RayPool`` or ``ray_cluster`` is used (docs/ARCHITECTURE.md §1).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from ..errors import UsageError
from ..sandbox.runner import RunnerConfig, TestRunner
from ..sandbox.spectra import CoverageMap
from ..sandbox.workspace import Workspace
from .job import SynthJob, validate_one

__all__ = ["LocalPool", "RayPool", "Worker", "ray_cluster"]


class Worker(Protocol):
    """What a pool runs: one instance per worker process or actor."""

    def run(self, item: Any) -> Any: ...

    def close(self) -> None: ...


class _Slot:
    """One validation worker's state: a shadow slot of its own, a TestRunner, the job and its coverage."""

    def __init__(self, root: str, config: RunnerConfig, job: SynthJob) -> None:
        self.ws = Workspace(Path(root))
        self.ws.open()  # takes a free shadow slot of its own
        self.ws.sync()
        self.runner = TestRunner(self.ws, config)
        self.job = job
        self.coverage = CoverageMap(job.coverage)
        self.stability = job.stability()  # proven and flaky tests, kept across this worker's candidates

    def run(self, item: tuple[int, object]):
        index, m = item
        return validate_one(self.ws, self.runner, self.coverage, self.job, index, m, self.stability)

    def close(self) -> None:
        self.runner.close()
        self.ws.close()


def validation_pool(root: str, config: RunnerConfig, job: SynthJob, workers: int,
                    ray: str | None = None) -> LocalPool | RayPool:
    """``workers`` validation slots for one repository: Ray actors when ``ray`` is given."""
    if ray is not None:
        return RayPool(_Slot, (root, config, job), workers)
    return LocalPool(_Slot, (root, config, job), workers)


# -- the local process pool ------------------------------------------------------------------------
_WORKER: list[Worker] = []


def _pool_init(factory: type, args: tuple) -> None:
    worker = factory(*args)
    _WORKER.append(worker)
    atexit.register(worker.close)


def _pool_run(item):
    return _WORKER[0].run(item)


class LocalPool:
    """``workers`` spawned processes on this machine, each holding one ``factory(*args)``."""

    def __init__(self, factory: type, args: tuple, workers: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._workers = workers
        self._pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_pool_init,
                                         initargs=(factory, args))

    def map(self, todo: Iterable) -> Iterator:
        """Results in ``todo`` order; at most ``2 x workers`` items are in flight, so a lazy
        ``todo`` is only drawn as far as needed and stopping early wastes little work."""
        window = 2 * self._workers
        pending: deque = deque()
        items = iter(todo)
        try:
            for item in items:
                pending.append((item, self._pool.submit(_pool_run, item)))
                if len(pending) >= window:
                    break
            while pending:
                item, future = pending.popleft()
                yield item, future.result()
                nxt = next(items, None)
                if nxt is not None:
                    pending.append((nxt, self._pool.submit(_pool_run, nxt)))
        finally:
            for _, f in pending:
                f.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


# -- Ray ---------------------------------------------------------------------------------------------
class RayPool:
    """``workers`` Ray actors (one CPU each, and ``gpus`` GPUs each: a fraction shares one), each
    one ``factory(*args)``, on an already initialised Ray (see ``ray_cluster``).

    At most two items per actor are in flight, so stopping early wastes little work.
    """

    def __init__(self, factory: type, args: tuple, workers: int, *, gpus: float = 0.0) -> None:
        import ray

        # Ray hides the GPUs from an actor that asks for none (CUDA_VISIBLE_DEVICES is empty).
        actor = ray.remote(num_cpus=1, num_gpus=gpus)(factory)
        self._actors = [actor.remote(*args) for _ in range(workers)]

    def map(self, todo: Iterable) -> Iterator:
        import ray

        window = 2 * len(self._actors)
        pending: deque = deque()
        items = enumerate(todo)
        for k, item in items:
            pending.append((item, self._actors[k % len(self._actors)].run.remote(item)))
            if len(pending) >= window:
                break
        while pending:
            item, ref = pending.popleft()
            yield item, ray.get(ref)
            nxt = next(items, None)
            if nxt is not None:
                k, item = nxt
                pending.append((item, self._actors[k % len(self._actors)].run.remote(item)))

    def close(self) -> None:
        import ray

        try:  # release shadow slots and runners politely (after any queued work), then kill
            ray.get([a.close.remote() for a in self._actors], timeout=60)
        except Exception:  # noqa: BLE001 - a dead or stuck actor is killed below anyway
            pass
        for a in self._actors:
            ray.kill(a)
        self._actors = []


def _check_ray_address(address: str, timeout: float = 3.0) -> None:
    """Raise ``UsageError`` in seconds when nothing listens at a Ray ``address``.

    ``ray.init`` retries an unreachable GCS for minutes (measured: over 3 min for a closed port
    on localhost), so a typo in ``--ray`` would look like a hang.  One TCP connect settles it.
    ``ray://host[:port]`` is a Ray client server (default port 10001), ``host[:port]`` a GCS
    (default 6379); IPv6 hosts go in brackets.  Other schemes are left to Ray.
    """
    import socket

    given = address  # what the user typed, for the messages
    if address == "auto":
        # ray.init("auto") takes RAY_ADDRESS, else the address of the last `ray start` on this
        # machine (a stale one hangs like any dead address), else fails at once.  The lookup is
        # Ray's private API, so when it moves, fall back to Ray's own behaviour.
        target = os.environ.get("RAY_ADDRESS")
        if not target:
            try:
                from ray._private.services import get_ray_address_from_environment
            except ImportError:
                return
            try:
                target = get_ray_address_from_environment("auto", None)
            except ConnectionError as exc:
                raise UsageError("--ray auto: no running Ray cluster found on this machine and "
                                 "RAY_ADDRESS is not set; start one with `ray start --head` or "
                                 "use --ray local") from exc
            except Exception:  # noqa: BLE001 - an internal change: let ray.init report it
                return
        if not target or target in ("auto", "local"):
            return
        address = target
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "", address
    elif scheme != "ray":
        return
    default_port = 10001 if scheme == "ray" else 6379
    rest = rest.split("/", 1)[0]
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else tail
    else:
        host, sep, port = rest.rpartition(":")
        if not sep:
            host, port = rest, ""
    if not host or (":" in host and not rest.startswith("[")) or not (port == "" or port.isdigit()):
        raise UsageError(f"--ray {given}: not a Ray address (want host:port, ray://host:port, "
                         "'auto' or 'local')")
    port_no = int(port) if port else default_port
    if not 0 < port_no < 65536:
        raise UsageError(f"--ray {given}: port {port_no} is out of range")
    try:
        socket.create_connection((host, port_no), timeout=timeout).close()
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        shown = f"[{host}]" if ":" in host else host
        raise UsageError(f"--ray {given}: cannot reach a Ray cluster at {shown}:{port_no} "
                         f"({reason}); start one with `ray start --head` or use --ray local") from exc


@contextmanager
def ray_cluster(address: str, *, num_cpus: int = 2) -> Iterator[None]:
    """Connect to Ray for the duration of the block.

    ``address`` is ``"local"`` (start a private local Ray with ``num_cpus`` CPUs), ``"auto"`` or a
    cluster address.  The dashboard is never started.  A Ray already initialised in this process
    is used as it is; Ray is shut down afterwards only if it was initialised here.  For a local
    Ray, ``FROGNANO_CACHE_DIR`` (if set) is passed on to the workers through the runtime env.
    """
    try:
        import ray
    except ImportError as exc:
        raise UsageError("--ray needs the 'ray' package (pip install 'frognano[ray]')") from exc

    if ray.is_initialized():
        yield
        return
    if address != "local":
        _check_ray_address(address)  # before ray.init, which retries a dead address for minutes
    env_vars = {}
    if os.environ.get("FROGNANO_CACHE_DIR"):
        env_vars["FROGNANO_CACHE_DIR"] = os.environ["FROGNANO_CACHE_DIR"]
    try:
        if address == "local":
            # address="local": start a private Ray even if a `ray start` cluster runs here.
            ray.init(address="local", include_dashboard=False, num_cpus=num_cpus, log_to_driver=False,
                     runtime_env={"env_vars": env_vars} if env_vars else None)
        else:
            ray.init(address=address, log_to_driver=False)  # the cluster decides its dashboard
    except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, ValueError...
        hint = ""
        if address not in ("local", "auto") and "RAY_AUTH_MODE" not in os.environ:
            # Measured with Ray 2.60: a `ray start` cluster uses token authentication by default,
            # and ray.init sends the token to an explicit address only when told to.
            hint = ("; if the cluster uses token authentication (the default for `ray start`), "
                    "set RAY_AUTH_MODE=token and provide the token (RAY_AUTH_TOKEN or "
                    "~/.ray/auth_token), or use --ray auto on the head node")
        raise UsageError(f"--ray {address}: cannot connect to Ray ({exc}){hint}") from exc
    try:
        yield
    finally:
        ray.shutdown()
