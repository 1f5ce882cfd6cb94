"""The worker side: everything that runs inside a worker process (reference and candidate alike), where a candidate
controls the whole process. Parent-side code never imports it, except the launcher naming the entry point
(``tests/test_layout.py``); nothing here decides a verdict."""
