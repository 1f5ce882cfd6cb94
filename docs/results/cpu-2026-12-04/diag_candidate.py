import time, torch, torch.nn as nn, os
LOG = open(f"/tmp/diag/log-{os.getpid()}.txt", "a")
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.own = self.o = None
        self.flush = torch.empty(2 * 2**20 // 4, dtype=torch.int32)
    def forward(self, x):
        if self.own is None or self.own.shape != x.shape:
            self.own = torch.empty_like(x); self.o = torch.empty_like(x)
        self.own.copy_(x)
        self.flush.fill_(1)
        t0 = time.perf_counter_ns(); torch.clamp_min(self.own, 0, out=self.o); t1 = time.perf_counter_ns()
        self.flush.fill_(1)
        t2 = time.perf_counter_ns(); torch.clamp_min(x, 0, out=self.o); t3 = time.perf_counter_ns()
        t4 = time.perf_counter_ns(); torch.clamp_min(x, 0, out=self.o); t5 = time.perf_counter_ns()
        t6 = time.perf_counter_ns(); torch.clamp_min(self.own, 0, out=self.o); t7 = time.perf_counter_ns()
        LOG.write(f"{(t1-t0)/1e3:.1f} {(t3-t2)/1e3:.1f} {(t5-t4)/1e3:.1f} {(t7-t6)/1e3:.1f} {x.untyped_storage().nbytes()}\n"); LOG.flush()
        return torch.relu(x)
