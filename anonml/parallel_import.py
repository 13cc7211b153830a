"""Parse a large file in worker processes while the importing process stores the rows.

A :class:`~anonml.plugins.ChunkedImporter` parses runs of lines independently,
so for a large file (:data:`PARALLEL_MIN_BYTES`) the import reads the file in
blocks of whole lines, hands each to one of ``workers`` forked processes, and
stores the results in file order from the one process that holds the
transaction:

    reader (this process) ──block in a shared slot──▶ workers: decode, split, parse_chunk_rows
                                                          │
    writer (this process) ◀──rows, marshalled in the slot─┘  executemany, in file order

The reader does no per-line work (undecoded blocks cut after their last
newline, :func:`~anonml.readers.iter_line_blocks`), and workers return ready
``events`` rows (:func:`anonml.event_rows.event_row` tuples: strings and integers,
cheap to hand over) rather than :class:`Event` objects, so the writer's time
goes to the database (the edX importer makes them without making the events
first: :meth:`~anonml.plugins.ChunkedImporter.parse_chunk_rows`). Blocks and
rows cross between the processes through a ring of slots in shared memory
(:class:`_Team`), one copy each way, with no helper thread in the writer: the
multiprocessing pool this replaced cost the writer about a quarter of its CPU
time (13.6 against 10.0 µs per edX event, benchmarks/import_throughput.py)
pickling blocks, moving them through pipes and waking its three threads. At
most three blocks per worker are in flight, so memory stays bounded by a few
megabytes of blocks whatever the file's size.
Everything the serial import promises holds: the import is still one
transaction of the one writer (workers never touch the store), a bad record
still names its file and line and aborts the whole import unless bad records
are skipped, and duplicates are still counted by the database's
``INSERT OR IGNORE``. The first block (64 KiB), and any after it until the
file's format is established, is parsed in this process, so a file of
another format fails exactly as it does serially, and a non-UTF-8 byte is
reported at the line that holds it, as serially.

Workers are forked (they inherit the importer; what they send back is only
ever read by this process) and die with the importing process: on Linux they ask the
kernel for SIGKILL when their parent dies, so a killed import leaves no
orphaned workers behind, and its transaction — never committed — leaves the
store as it was. Where ``fork`` is unavailable the import runs serially.
"""

from __future__ import annotations

import ctypes
import gc
import marshal
import mmap
import multiprocessing
import multiprocessing.process
import os
import signal
import struct
import sys
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from anonml.event_rows import ChunkRows, rows_of
from anonml.plugins import ChunkedImporter, Importer, RowOwner
from anonml.readers import iter_line_blocks

__all__ = [
    "PARALLEL_MIN_BYTES",
    "ChunkRows",
    "default_workers",
    "use_parallel",
    "parallel_chunk_rows",
    "fewer_collections",
]

#: Files smaller than this are parsed in the importing process (a worker pool costs ~10 ms to start).
PARALLEL_MIN_BYTES = 4 << 20
_MAX_WORKERS = 8
_BLOCK_BYTES = 1 << 20  # about 2,500 edX lines per hand-over
_FIRST_BYTES = 1 << 16  # parsed here, for the format check, before the workers start
_IN_FLIGHT_PER_WORKER = 3
_PR_SET_PDEATHSIG = 1
#: Young-generation threshold of the cycle collector while an import runs (CPython's default is 700).
IMPORT_GC_THRESHOLD = 20_000


def default_workers() -> int:
    """Worker processes for a large import: one per CPU, at most 8 (the writer runs beside them)."""
    return max(1, min(os.cpu_count() or 1, _MAX_WORKERS))


def use_parallel(path: Path, importer: Importer, workers: int) -> bool:
    """Whether :func:`parallel_chunk_rows` applies: several workers, a chunked importer, a large
    regular file, and ``fork`` available."""
    return (
        workers > 1
        and isinstance(importer, ChunkedImporter)
        and "fork" in multiprocessing.get_all_start_methods()
        and path.is_file()
        and path.stat().st_size >= PARALLEL_MIN_BYTES
    )


_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, ...] = ()


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the block with the cycle collector's young-generation threshold raised, then restore it.

    An import keeps a chunk's events alive while it turns them into rows, so
    with CPython's default threshold (700 new container objects) the collector
    runs every few hundred lines and, each time enough of them have survived,
    walks every object of the process — about a quarter of the parse of an
    edX line (benchmarks/import_throughput.py). Raised to
    :data:`IMPORT_GC_THRESHOLD`, it still collects cycles, with at most that
    many new objects between passes. Nested and concurrent imports share one
    change, undone when the last of them ends.
    """
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            gc.set_threshold(max(_gc_saved[0], IMPORT_GC_THRESHOLD), *_gc_saved[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_saved)


# --- worker side ----------------------------------------------------------------------------
#: What a worker parses with: the importer, the file, whose rows they are, the importing process's pid.
_Job = tuple[ChunkedImporter, Path, RowOwner, int]


def _init_worker(parent: int) -> None:
    """Set up a forked worker; ``parent`` is the importing process's pid, read before the fork."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the importing process's to handle
    # What the worker inherited is never garbage here: the collector need not walk it (nor copy
    # the pages it would touch), and passes are as rare as during the import itself.
    gc.freeze()
    gc.set_threshold(IMPORT_GC_THRESHOLD, *gc.get_threshold()[1:])
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent died before the request took effect. Its pid comes from before the fork: read
        # here, a parent killed before this line ran would already read as the reaper, and the
        # worker would live on, waiting on a task pipe that a sibling still holds open.
        if os.getppid() != parent:
            os._exit(1)


#: A task in the ring: slot, size of the block in it, number of its first line.
_TASK = struct.Struct("<QQQ")


def _serve(tasks: Connection, results: Connection, ring: mmap.mmap, slot_bytes: int, job: _Job) -> None:
    """A worker's life: parse the blocks the importing process puts in the ring until it says stop.

    A task (:data:`_TASK`) names a slot of the ring; the answer is the block's
    :class:`ChunkRows`, whose rows (tuples of str, int and None: marshal writes
    and reads them about twice as fast as pickle) go back marshalled in the same
    slot (the block has been copied out by then), or along with the answer when
    they would not fit. An exception goes back in place of the answer.
    """
    importer, path, owner, parent = job
    _init_worker(parent)
    while True:
        try:
            task = tasks.recv_bytes()
        except EOFError:  # the importing process closed the pipe: it is ending
            return
        if not task:
            return
        slot, size, first_line = _TASK.unpack(task)
        start = slot * slot_bytes
        block = ring[start : start + size]
        try:
            result = importer.parse_block_rows(path, block, first_line, opened=True, owner=owner)
        except Exception as exc:  # the importing process raises it, as it would parsing serially
            _send_failure(results, exc)
            continue
        packed, result.rows = marshal.dumps(result.rows), []
        if len(packed) <= slot_bytes:
            ring[start : start + len(packed)] = packed
            results.send((len(packed), result))
        else:
            results.send((packed, result))


def _send_failure(results: Connection, exc: Exception) -> None:
    try:
        results.send(exc)
    except Exception:  # an exception that does not pickle: its type and text still go back
        results.send(RuntimeError(f"{type(exc).__name__}: {exc}"))


def parallel_chunk_rows(
    path: Path,
    importer: ChunkedImporter,
    *,
    workers: int,
    owner: RowOwner,
    while_waiting: Callable[[], object] | None = None,
) -> Generator[ChunkRows, None, None]:
    """Every chunk of ``path`` as :class:`ChunkRows`, in file order, then the records
    :meth:`~anonml.plugins.ChunkedImporter.finish_chunks` resolves at the end.

    The steps of :meth:`~anonml.plugins.ChunkedImporter.parse` with each block
    of lines made into rows (:meth:`~anonml.plugins.ChunkedImporter.parse_block_rows`):
    in this process until the format is established, then in ``workers``
    processes (with one, all in this process: a small file, or ``workers=1``).
    The same rows, errors and order either way, as a chunked importer gives the
    same whatever the chunks. The caller stores each one before asking for the
    next (raising a chunk's first error unless skipping bad records, then its
    ``fatal`` error). Closing the iterator early terminates the workers.
    ``while_waiting`` is called once, here, when the workers have their first
    blocks and nothing is ready to store yet (with workers only): work that
    would otherwise hold up the start (the store hashes the file then).
    """
    importer.start_chunks(path)
    chunks = iter_line_blocks(path, _BLOCK_BYTES, first_size=_FIRST_BYTES)
    opened = False
    for first_line, block in chunks:
        result = importer.parse_block_rows(path, block, first_line, opened=opened, owner=owner)
        yield _merged(importer, path, result)
        opened = result.opened
        if opened and workers > 1:
            break
    if opened and workers > 1:
        with _Team(workers, (importer, path, owner, os.getpid())) as team:
            pending: deque[_Ticket] = deque()

            def taken() -> ChunkRows:
                nonlocal while_waiting
                if while_waiting is not None:  # the workers have blocks to parse: time to spare here
                    while_waiting()
                    while_waiting = None
                return _merged(importer, path, team.answer(pending.popleft()))

            for first_line, block in chunks:
                pending.append(team.submit(first_line, block))
                if len(pending) >= team.slots:  # bounded: memory is the ring's few blocks
                    yield taken()
            while pending:
                yield taken()
    yield rows_of(importer.finish_chunks(path), owner.user, owner.fallback, owner.import_id)


@dataclass(slots=True)
class _Ticket:
    """A block handed to a worker (``block`` None) or, too large for a slot, kept to parse here."""

    index: int
    first_line: int
    block: bytes | None


class _Team:
    """``workers`` forked parse workers and the shared memory that carries their blocks and rows.

    Blocks go to the workers in turn, each in the next of :attr:`slots` slots
    of an anonymous shared mapping (``_IN_FLIGHT_PER_WORKER`` per worker), and
    only the slot's number goes down a pipe; the rows come back marshalled in
    the same slot. So a block crosses between the processes by one copy in and
    one out, with nothing pickled but the small rest of a chunk (its bad records
    and state), no helper thread competes with the writer for the interpreter,
    and no pipe ever fills: a worker's answer is small and a task is a few bytes.
    A slot is written again only after its answer has been taken (at most
    :attr:`slots` blocks are in flight). A block larger than a slot (a line of
    megabytes) is parsed in this process in its turn. A worker that dies makes
    the import fail instead of waiting for it; leaving the ``with`` block early
    kills the workers.
    """

    def __init__(self, workers: int, job: _Job) -> None:
        self.workers = workers
        self.slots = _IN_FLIGHT_PER_WORKER * workers
        self.slot_bytes = 2 * _BLOCK_BYTES  # a block is cut after its last line end: under two reads
        self.ring = mmap.mmap(-1, self.slots * self.slot_bytes)  # anonymous and shared with the forks
        self._job = job
        self._submitted = 0
        self._tasks: list[Connection] = []
        self._results: list[Connection] = []
        self._processes: list[multiprocessing.process.BaseProcess] = []

    def __enter__(self) -> _Team:
        context = multiprocessing.get_context("fork")
        try:
            for _ in range(self.workers):
                task_in, task_out = context.Pipe(duplex=False)
                result_in, result_out = context.Pipe(duplex=False)
                args = (task_in, result_out, self.ring, self.slot_bytes, self._job)
                process = context.Process(target=_serve, args=args, daemon=True)
                process.start()
                task_in.close()  # the worker's ends: held here, a dead worker's pipe would never end
                result_out.close()
                self._tasks.append(task_out)
                self._results.append(result_in)
                self._processes.append(process)
        except BaseException:
            self._end(kill=True)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self._end(kill=kind is not None)

    def submit(self, first_line: int, block: bytes) -> _Ticket:
        """Hand ``block`` to the next worker (or keep it, too large for a slot)."""
        index = self._submitted
        self._submitted += 1
        if len(block) > self.slot_bytes:
            return _Ticket(index, first_line, block)
        slot = index % self.slots
        self.ring[slot * self.slot_bytes : slot * self.slot_bytes + len(block)] = block
        try:
            self._tasks[index % self.workers].send_bytes(_TASK.pack(slot, len(block), first_line))
        except BrokenPipeError:  # the worker died before this task reached it
            raise self._ended(index % self.workers) from None
        return _Ticket(index, first_line, None)

    def answer(self, ticket: _Ticket) -> ChunkRows:
        """The :class:`ChunkRows` of a submitted block (taken in submission order)."""
        if ticket.block is not None:
            importer, path, owner, _ = self._job
            return importer.parse_block_rows(path, ticket.block, ticket.first_line, opened=True, owner=owner)
        worker = ticket.index % self.workers
        try:
            answer = self._results[worker].recv()  # pickled by our own worker
        except EOFError:
            raise self._ended(worker) from None
        if isinstance(answer, BaseException):
            raise answer
        packed, result = answer
        if isinstance(packed, int):
            start = (ticket.index % self.slots) * self.slot_bytes
            with memoryview(self.ring) as ring, ring[start : start + packed] as view:
                result.rows = marshal.loads(view)  # written by our own worker just now
        else:
            result.rows = marshal.loads(packed)
        return result

    def _ended(self, worker: int) -> RuntimeError:
        """The error that ends the import when worker ``worker`` has died (seen by either pipe)."""
        process = self._processes[worker]
        process.join(1)
        return RuntimeError(f"parse worker {process.pid} ended unexpectedly (exit code {process.exitcode})")

    def _end(self, *, kill: bool) -> None:
        for tasks in self._tasks:
            with suppress(OSError):  # a worker already gone needs no stop
                tasks.send_bytes(b"")  # stop
        for process in self._processes:
            if kill:
                process.kill()
            process.join()
        for connection in (*self._tasks, *self._results):
            connection.close()
        self.ring.close()


def _merged(importer: ChunkedImporter, path: Path, result: ChunkRows) -> ChunkRows:
    """``result``, its state folded into ``importer`` (unless the file ends there, ``fatal``)."""
    if result.fatal is None:
        importer.merge_chunk(path, result.state)
    return result
