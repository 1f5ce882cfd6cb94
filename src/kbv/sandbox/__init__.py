"""Parent side of the sandbox: starting workers and talking to them (``launch``, through kbv's launcher
``zygote``), what confinement to ask for (``plan``), probing it under CUDA (``probe``), GPU health (``health``).

Candidate code runs only in worker processes (``kbv.worker``); nothing here imports a candidate or decides a verdict.
"""
