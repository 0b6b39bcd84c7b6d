"""A real 2-rank DDP run (gloo, CPU) for the straggler rule; started by ``torchrun --tee 3``.

Every rank prints one line per step: the loss, the total step time, and its own compute time.
The training and the gradient all-reduce are real; the times are modelled, so that the rule
judges the same numbers on an idle laptop and on a busy CI host: each rank's compute time is a
5 ms device step with a few percent of seeded jitter, and the total step time is what synchronous
data parallelism makes of it on every rank, the slowest rank's compute time (taken with a real
``all_reduce(MAX)``) plus 1 ms for the all-reduce itself. Only the rank-local compute time shows
which rank is slow. ``SLOW_RANK``/``SLOW_FROM``: that rank's compute takes 20 ms more per step from
that step (a throttled device or a slow data shard)."""

import math
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

STEPS = 60
STEP_S = 0.005  # a rank's device step
SLOW_S = 0.02  # what the straggler adds to it
ALLREDUCE_S = 0.001


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow_rank = int(os.environ.get("SLOW_RANK", "-1"))
    slow_from = int(os.environ.get("SLOW_FROM", "0"))
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    jitter = torch.Generator().manual_seed(100 + rank)
    for step in range(1, STEPS + 1):
        x = torch.randn(32, 16, generator=g)
        y = x[:, :4].argmax(dim=1)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        compute = STEP_S * math.exp(0.03 * float(torch.randn(1, generator=jitter)))
        if rank == slow_rank and step >= slow_from:
            compute += SLOW_S
        slowest = torch.tensor([compute], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # every rank waits for the slowest one
        step_time = float(slowest) + ALLREDUCE_S
        print(f"step {step} | loss {loss.item():.4f} | step_time {step_time:.4f} | compute_time {compute:.4f}",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()
    # gloo's teardown sometimes aborts at interpreter exit ("terminate called without an active
    # exception") after all the work is done; leave without running the C++ destructors
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
