"""The driver of examples/dask/orca.toml: run by orca on the head of an EC2
run, beside the head's `dask scheduler`, while each worker instance runs a
`dask worker`. It connects to the scheduler at ORCA_HEAD_ADDRESS, waits for
one Dask worker per instance in ORCA_WORKER_ADDRESSES, runs a computation
spread over all of them (each task pinned to one worker, so every worker
takes part) and checks the answer and who computed it. Exit 0 when every
worker took part and the sum is right; 1 otherwise.

Environment (set by orca; DASK_SCHEDULER_PORT by the pipeline's env):
  ORCA_HEAD_ADDRESS      the head instance's address (where the scheduler listens)
  ORCA_WORKER_ADDRESSES  the worker instances' addresses, comma-separated
  ORCA_INSTANCE          the head instance's id
  ORCA_RUN_ID            this run
  DASK_SCHEDULER_PORT    the scheduler's port (8786 unless set)
  DASK_DEADLINE          seconds to wait for the scheduler and workers (120 unless set)
"""

import os
import sys
import time

from distributed import Client, get_worker


def square_on_worker(chunk):
    """One task: the sum of squares of `chunk`, and the worker that ran it."""
    worker = get_worker()
    return worker.name, sum(x * x for x in chunk)


def main():
    head = os.environ["ORCA_HEAD_ADDRESS"]
    port = os.environ.get("DASK_SCHEDULER_PORT", "8786")
    addresses = [a for a in os.environ.get("ORCA_WORKER_ADDRESSES", "").split(",") if a]
    deadline = time.monotonic() + float(os.environ.get("DASK_DEADLINE", "120"))
    want = len(addresses)
    print(
        f"run {os.environ.get('ORCA_RUN_ID')}: driver on instance {os.environ.get('ORCA_INSTANCE')}, "
        f"head {head}, {want} worker instance(s): {','.join(addresses)}",
        flush=True,
    )
    if want == 0:
        print("no workers: nothing to spread the work over", flush=True)
        return 1

    # The scheduler starts beside this driver: try until it answers.
    client = None
    while client is None:
        left = deadline - time.monotonic()
        try:
            client = Client(f"tcp://{head}:{port}", timeout=max(min(left, 10), 1))
        except OSError as e:
            if time.monotonic() >= deadline:
                print(f"the scheduler at {head}:{port} never answered: {e}", flush=True)
                return 1
            time.sleep(0.5)
    with client:
        try:
            client.wait_for_workers(want, timeout=max(deadline - time.monotonic(), 1))
        except TimeoutError:
            print(
                f"only {len(client.scheduler_info()['workers'])} of {want} workers joined",
                flush=True,
            )
            return 1
        workers = client.scheduler_info()["workers"]
        names = sorted(str(w["name"]) for w in workers.values())
        print(f"{len(workers)} dask workers joined: {' '.join(names)}", flush=True)

        # Fan out: 4 chunks per worker, each pinned to its worker.
        numbers = list(range(100_000))
        chunks = [numbers[i::4 * want] for i in range(4 * want)]
        where = sorted(workers)
        futures = [
            client.submit(square_on_worker, chunk, workers=[where[i % len(where)]], pure=False)
            for i, chunk in enumerate(chunks)
        ]
        results = client.gather(futures)

    total = sum(part for _, part in results)
    expected = sum(x * x for x in numbers)
    took = {}
    for name, _ in results:
        took[str(name)] = took.get(str(name), 0) + 1
    for name in names:
        print(f"worker {name} ran {took.get(name, 0)} task(s)", flush=True)
    if total != expected:
        print(f"wrong answer: {total}, not {expected}", flush=True)
        return 1
    if sorted(took) != names:
        print(f"not every worker took part: {sorted(took)} of {names}", flush=True)
        return 1
    print(f"every worker took part: {len(took)} of {want}; sum of squares {total}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
