"""Worker processes: hard timeouts, crash reports with the stage, memory limits, no leaks."""

import time
from pathlib import Path

import psutil
import pytest
from dragonlab.testing import worker_jobs

from dragonlab.evaluation import workers
from dragonlab.evaluation.workers import Limits, RemoteError, Worker, WorkerCrashed, WorkerPool, WorkerTimeout


@pytest.fixture(autouse=True)
def importable_jobs(monkeypatch):
    """Workers import `dragonlab.testing.worker_jobs` from this checkout, whatever is installed."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))


def test_a_call_returns_and_the_worker_is_reused():
    w = Worker()
    try:
        assert w.call(worker_jobs.echo, 41) == 41
        pid = w.pid
        assert w.call(worker_jobs.echo, [1, 2]) == [1, 2] and w.pid == pid
    finally:
        w.close()


def test_an_interrupt_is_left_to_the_parent():
    """A notebook kernel's interrupt reaches its whole process group; workers ignore it and serve on."""
    import os
    import signal

    w = Worker()
    try:
        assert w.call(worker_jobs.echo, 1) == 1
        pid = w.pid
        os.kill(pid, signal.SIGINT)
        assert w.call(worker_jobs.echo, 2) == 2 and w.pid == pid
    finally:
        w.close()


def test_a_worker_whose_parent_is_gone_ends_quietly(capfd):
    """An interrupted run exits while a worker is still busy: when the worker cannot send its
    answer, it ends without a traceback (it printed two into the run's log)."""
    w = Worker()
    try:
        w._start()
        w._outbox.send((worker_jobs.sleep, (1.0,)))
        w._inbox.close()  # what the parent's exit does to the worker's answer pipe
        assert w._proc.wait(timeout=30) == 0
        assert "Traceback" not in capfd.readouterr().err
    finally:
        w.close()


def test_a_spinning_call_is_killed_at_the_deadline_and_the_worker_restarts():
    w = Worker(Limits(timeout_sec=2))
    try:
        with pytest.raises(WorkerTimeout) as e:
            w.call(worker_jobs.spin)
        assert e.value.stage == "spinning"
        assert w.call(worker_jobs.echo, "again") == "again"
    finally:
        w.close()


def test_a_crash_names_the_signal_and_the_stage():
    w = Worker()
    try:
        with pytest.raises(WorkerCrashed, match="SIGSEGV") as e:
            w.call(worker_jobs.crash)
        assert e.value.stage == "about to crash"
        assert w.call(worker_jobs.echo, 1) == 1
    finally:
        w.close()


def test_memory_limit_turns_an_allocation_storm_into_an_error():
    w = Worker(Limits(memory_bytes=1 << 30))
    try:
        with pytest.raises(RemoteError, match="MemoryError"):
            w.call(worker_jobs.allocate, 4)
        assert w.call(worker_jobs.allocate, 0.01) > 0
    finally:
        w.close()


def test_exceptions_come_back_as_one_message():
    w = Worker()
    try:
        with pytest.raises(RemoteError, match="ValueError: bad input at line 3"):
            w.call(worker_jobs.fail)
    finally:
        w.close()


def test_pool_keeps_order_and_leaks_no_process():
    before = {p.pid for p in workers.descendants()}
    pool = WorkerPool(2, Limits(timeout_sec=3))
    results = pool.map(worker_jobs.sleep, [(0.2,), (0.1,), (0.0,)])
    assert results == [0.2, 0.1, 0.0]
    assert isinstance(pool.map(worker_jobs.crash, [()])[0], WorkerCrashed)
    pool.close()
    after = {p.pid for p in workers.descendants()}
    assert after <= before


@pytest.mark.skipif(not workers.ZYGOTES, reason="workers fork from zygotes on Linux only")
def test_workers_fork_from_one_zygote_that_serves_the_next_pool_and_then_ends(monkeypatch):
    """A pool's workers (and a crashed worker's successor) are forked from one zygote, which
    imported TVM once. After the last of them it waits LINGER_SEC for a worker of the same
    environment (the next pool forks from it), then ends; with no linger it ends at once."""
    monkeypatch.setattr(workers, "LINGER_SEC", 3.0)
    env = {"DRAGONLAB_TEST_ENV": f"{time.time()}"}  # an environment no other test's zygote has

    def zygotes_of(pool):
        return {psutil.Process(pid).ppid() for pid in pool.pids()}

    pool = WorkerPool(2, Limits(timeout_sec=10), env=env)
    try:
        assert pool.map(worker_jobs.echo, [(1,), (2,)]) == [1, 2]
        zygotes = zygotes_of(pool)
        assert len(zygotes) == 1 and zygotes <= set(workers.zygote_pids())
        assert isinstance(pool.map(worker_jobs.crash, [()])[0], WorkerCrashed)
        assert pool.map(worker_jobs.echo, [(3,), (4,)]) == [3, 4]
        assert zygotes_of(pool) == zygotes
    finally:
        pool.close()
    assert zygotes <= set(workers.zygote_pids())  # waiting for the next pool
    pool = WorkerPool(1, Limits(timeout_sec=10), env=env)
    try:
        assert pool.map(worker_jobs.echo, [(5,)]) == [5] and zygotes_of(pool) == zygotes
    finally:
        pool.close()
    deadline = time.monotonic() + 3.0 + 10
    while zygotes <= set(workers.zygote_pids()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not zygotes & set(workers.zygote_pids()) and not any(psutil.pid_exists(pid) for pid in zygotes)

    monkeypatch.setattr(workers, "LINGER_SEC", 0.0)
    pool = WorkerPool(1, Limits(timeout_sec=10), env=env)
    try:
        assert pool.map(worker_jobs.echo, [(6,)]) == [6]
        zygotes = zygotes_of(pool)
    finally:
        pool.close()
    assert not zygotes & set(workers.zygote_pids()) and not any(psutil.pid_exists(pid) for pid in zygotes)


@pytest.mark.skipif(not workers.ZYGOTES, reason="workers fork from zygotes on Linux only")
def test_a_zygote_killed_from_outside_is_replaced_at_the_next_call():
    import os
    import signal

    w = Worker(Limits(timeout_sec=10))
    try:
        assert w.call(worker_jobs.echo, 1) == 1
        first, zygote = w.pid, psutil.Process(w.pid).ppid()
        os.kill(zygote, signal.SIGKILL)
        assert w.call(worker_jobs.echo, 2) == 2
        assert w.pid != first and psutil.Process(w.pid).ppid() not in (zygote, psutil.Process().pid)
        psutil.wait_procs([p for p in psutil.process_iter() if p.pid == first], timeout=10)
        assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE
    finally:
        w.close()


@pytest.mark.skipif(not workers.ZYGOTES, reason="workers fork from zygotes on Linux only")
def test_a_process_forked_from_the_parent_leaves_its_zygotes_alone():
    """A child forked from a process with zygotes (a DataLoader worker) forgets them, closing
    its copies of their sockets only; the parent's workers serve on."""
    import os

    w = Worker(Limits(timeout_sec=10))
    try:
        assert w.call(worker_jobs.echo, 1) == 1
        pid = w.pid
        child = os.fork()
        if child == 0:
            os._exit(0 if not workers._zygotes else 1)
        assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
        assert w.call(worker_jobs.echo, 2) == 2 and w.pid == pid
    finally:
        w.close()


def test_without_zygotes_each_worker_is_a_fresh_interpreter(monkeypatch):
    """Where a process cannot fork safely (off Linux), or DRAGONLAB_ZYGOTES=0: Popen per worker."""
    monkeypatch.setattr(workers, "ZYGOTES", False)
    w = Worker(Limits(timeout_sec=10))
    try:
        with pytest.raises(WorkerCrashed, match="SIGSEGV"):
            w.call(worker_jobs.crash)
        assert w.call(worker_jobs.echo, 5) == 5
        assert psutil.Process(w.pid).ppid() == psutil.Process().pid
    finally:
        w.close()


@pytest.mark.parametrize("to", ["the process", "another thread"])
def test_ctrl_c_during_map_stops_it_and_starts_no_more_calls(to, tmp_path):
    """Ctrl-C while `map` waits: it raises at once, ends the call in flight with its worker, and
    starts no other call. Before, the pool's threads went on through the list after the
    interrupt, starting fresh workers that outlived the run ("the process": the signal reaches
    the main thread); and a SIGINT that reached another thread was not seen until the whole list
    was done ("another thread")."""
    import signal
    import threading
    import time

    marks = tmp_path / "marks"
    before = {p.pid for p in workers.descendants()}
    pool = WorkerPool(1, Limits(timeout_sec=30))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # what a command line has
    try:
        pool.map(worker_jobs.echo, [(0,)])  # the worker is up: its start-up is not what is timed
        target = threading.main_thread().ident if to == "the process" else None
        threading.Timer(0.5, lambda: signal.pthread_kill(target or threading.get_ident(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            pool.map(worker_jobs.sleep_and_mark, [(str(marks), 1.5)] * 4)
        # it raised only once its threads had ended (Python 3.11's Thread.join, interrupted,
        # reported a running thread as ended: the thread went on beside close())
        assert [t.name for t in threading.enumerate() if t.name.endswith("(drain)")] == []
    finally:
        signal.signal(signal.SIGINT, previous)
        pool.close()
    time.sleep(2)  # long enough for a call started after the interrupt to finish
    after = {p.pid for p in workers.descendants()}
    assert after <= before  # the call in flight was ended with its worker, and none was started
    assert not marks.exists()  # no call ran to its end: not the one in flight, not the next ones


def test_progress_bars_honour_tqdm_disable(monkeypatch):
    from dragonlab.core.progress import progress_bar

    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    assert not progress_bar(range(3), progress=True).disable
    assert progress_bar(range(3), progress=False).disable
    monkeypatch.setenv("TQDM_DISABLE", "1")  # what batch runs set: wins over progress=True
    assert progress_bar(range(3), progress=True).disable


def test_a_result_that_is_not_json_data_is_an_error():
    w = Worker()
    try:
        with pytest.raises(RemoteError, match="not JSON data"):
            w.call(worker_jobs.return_object)
        assert w.call(worker_jobs.echo, 3) == 3
    finally:
        w.close()


def test_a_pickle_forged_on_the_pipe_is_never_unpickled(tmp_path):
    """Answers are JSON: a process that ran untrusted code cannot make the parent construct
    objects (a pickled object's __reduce__ would run `touch` here)."""
    marker = tmp_path / "unpickled"
    w = Worker(Limits(timeout_sec=30))
    try:
        with pytest.raises(WorkerCrashed, match="malformed data"):
            w.call(worker_jobs.forge_pickled_result, str(marker))
        assert not marker.exists()
        assert w.call(worker_jobs.echo, 4) == 4  # a fresh worker
    finally:
        w.close()
