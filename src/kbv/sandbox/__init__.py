"""The only place candidate code runs: worker process entry point (``child``) and the parent's launcher (``launch``).

Nothing outside this package imports a candidate, and nothing in it decides a verdict.
"""
