"""The demo trainer's data step without torch: scripts/demo_data.py's examples tokenized as rankd
builds the sequences ([bos] + tok(query_template(query)) + tok(item_template(item))) and packed
chunk by chunk, in worker processes (ChunkPool) that import this module, demo_data and
sentencepiece and nothing else.

The pool starts its workers with 'spawn' (fresh interpreters), never 'fork': the trainer that
uses it has imported torch (and on a GPU host touched CUDA), and a process forked from one with
threads (OpenMP's, CUDA's) may hang in a lock that no thread of the copy will release. A worker
that dies makes the pool fail at once (concurrent.futures' BrokenProcessPool), where
multiprocessing.Pool would wait for its task forever. Results come back in the order of their
arguments whatever order they finish in, so the data are the same bytes for any number of
workers. Progress: a line per tenth of a map's chunks (the first after the first round of
workers, with its rate). A worker prints every thread's Python stack on SIGUSR1 (as the trainer
does: scripts/gpu_train_demo.sh's time bound sends it).
"""
import array
import concurrent.futures
import contextlib
import faulthandler
import multiprocessing
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import demo_data  # noqa: E402

QUERY_TEMPLATE = "query: {query}"
ITEM_TEMPLATE = "posting: {item}"
BOS, PAD = 1, 3
START_METHOD = "spawn"


def encode_examples(sp, examples):
    """Per example: the candidates' token ids, [bos] + query ids + item ids (as rankd builds)."""
    queries = sp.encode([QUERY_TEMPLATE.format(query=ex["query"]) for ex in examples])
    items = sp.encode([ITEM_TEMPLATE.format(item=it) for ex in examples for it in ex["items"]])
    out, k = [], 0
    for ex, q in zip(examples, queries):
        out.append([[BOS] + q + items[k + i] for i in range(len(ex["items"]))])
        k += len(ex["items"])
    return out


_SP = None


def _sp(tokenizer):
    """The chunk tasks' tokenizer, loaded once per process. One thread: the processes are the
    parallelism (sentencepiece's batch encode otherwise starts a thread per CPU in each of
    them). The ids do not depend on it."""
    global _SP
    if _SP is None:
        import sentencepiece as spm
        _SP = spm.SentencePieceProcessor(model_file=tokenizer, num_threads=1)
    return _SP


def encoded_chunk(args):
    """A pool task: chunk k of a split, generated and tokenized: [(example, its ids)]."""
    split, k, tokenizer = args
    exs = demo_data.chunk_examples(split, k)
    return [(ex, enc) for ex, enc in zip(exs, encode_examples(_sp(tokenizer), exs))]


def packed_chunk(args):
    """A pool task: chunk k of a split, generated, tokenized and right-padded to its longest
    sequence n, as bytes (no Python lists cross the pipe): (examples, n, ids int16 [examples,
    candidates, n], lengths int16 [examples, candidates], grades int8 [examples, candidates])."""
    split, k, tokenizer = args
    exs = demo_data.chunk_examples(split, k)
    enc = encode_examples(_sp(tokenizer), exs)
    seqs = [s for ex in enc for s in ex]
    n = max((len(s) for s in seqs), default=1)
    ids = array.array("h", [PAD]) * (len(seqs) * n)
    for i, s in enumerate(seqs):
        ids[i * n:i * n + len(s)] = array.array("h", s)
    lengths = array.array("h", [len(s) for s in seqs])
    grades = array.array("b", [g for ex in exs for g in ex["grades"]])
    return len(exs), n, ids.tobytes(), lengths.tobytes(), grades.tobytes()


def _worker_start():
    faulthandler.enable()
    faulthandler.register(signal.SIGUSR1, all_threads=True)


@contextlib.contextmanager
def _without_main():
    """spawn runs the parent's main script again in each new process (as __mp_main__, so that
    what it defines unpickles there). The tasks live here, so that would only repeat the
    script's imports (the trainer's torch: a second or more and some hundred MB per worker, for
    nothing). While workers start, the main module shows spawn neither a file nor a spec."""
    main = vars(sys.modules["__main__"])
    saved = {k: main[k] for k in ("__file__", "__spec__") if k in main}
    main.pop("__file__", None)
    main["__spec__"] = None
    try:
        yield
    finally:
        main.pop("__spec__", None)
        main.update(saved)


class ChunkPool:
    """map(fn, args) over `workers` spawned processes (in this process when workers <= 1), in
    order, with progress lines through `log` (None: quiet). A context manager."""

    def __init__(self, workers, log=None):
        self.workers, self.log = workers, log
        self.executor = None

    def __enter__(self):
        if self.workers > 1:
            self.executor = concurrent.futures.ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context(START_METHOD),
                initializer=_worker_start)
        return self

    def __exit__(self, *exc):
        if self.executor:
            self.executor.shutdown(wait=True, cancel_futures=True)
        return False

    def map(self, fn, args, what="", count=None):
        """[fn(a) for a in args], computed by the workers. what: the progress lines' name (no
        lines without one): for 20 args or more, one once the first round of workers is done
        (the rate, early) and one at each tenth (a second apart at least), and always the last;
        count(result): the queries in a result, for those lines."""
        args = list(args)
        total, t0, done, queries = len(args), time.time(), 0, 0
        first = min(max(self.workers, 1), total)
        step = max(1, -(-total // 10))
        out = [None] * total
        last = [t0]

        def progress(final=False):
            s = time.time() - t0
            last[0] = time.time()
            line = (f"data: {what}: {done}/{total} chunks, {queries} queries, {s:.1f}s, "
                    f"{done / s if s > 0 else 0:.1f} chunks/s")
            if not final:
                line += f", about {s / done * (total - done):.0f}s to go"
            self.log(line)

        if self.executor is None:
            results = ((i, fn(a)) for i, a in enumerate(args))
        else:
            with _without_main():
                futures = {self.executor.submit(fn, a): i for i, a in enumerate(args)}
            results = ((futures[f], f.result()) for f in concurrent.futures.as_completed(futures))
        for i, r in results:
            out[i] = r
            done += 1
            queries += count(r) if count else 0
            if (self.log and what and total >= 20 and done < total and
                    (done == first or done % step == 0 and time.time() - last[0] >= 1)):
                progress()
        if self.log and what:
            progress(final=True)
        return out
