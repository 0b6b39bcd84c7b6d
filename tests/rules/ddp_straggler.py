"""A real 2-rank DDP run (gloo, CPU) for the straggler rule; started by ``torchrun --tee 3``.

Every rank prints one line per step: the loss, the total step time, and its own compute time
(from the step start to the moment DDP hands its gradient bucket to the all-reduce, taken in a
communication hook). The total step time is the same on every rank, because the all-reduce waits
for the slowest one; only the rank-local compute time shows which rank is slow.
``SLOW_RANK``/``SLOW_FROM``: that rank sleeps 20 ms more per step from that step (a throttled
device or a slow data shard)."""

# no ``from __future__ import annotations``: DDP checks the hook's annotations as real types
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

STEPS = 60


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow_rank = int(os.environ.get("SLOW_RANK", "-1"))
    slow_from = int(os.environ.get("SLOW_FROM", "0"))
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    ready: dict[str, float] = {}

    def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        ready.setdefault("t", time.perf_counter())  # this rank's gradients are computed
        return allreduce_hook(None, bucket)  # type: ignore[arg-type]

    model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    for step in range(1, STEPS + 1):
        ready.clear()
        t0 = time.perf_counter()
        time.sleep(0.005)  # the device step: keeps the baseline above OS jitter
        if rank == slow_rank and step >= slow_from:
            time.sleep(0.02)
        x = torch.randn(32, 16, generator=g)
        y = x[:, :4].argmax(dim=1)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        print(f"step {step} | loss {loss.item():.4f} | step_time {t1 - t0:.4f} | compute_time {ready['t'] - t0:.4f}",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()
    # gloo's teardown sometimes aborts at interpreter exit ("terminate called without an active
    # exception") after all the work is done; leave without running the C++ destructors
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
