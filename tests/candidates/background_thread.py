"""Candidate for level1/5_ReLU that leaves a thread running after every forward (work escaping the timer).

Expected: verdict rejected with flag background_threads.
"""
import threading
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        return torch.relu(x)
