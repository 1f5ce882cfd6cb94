"""The optimisation agent (``kbv agent run``: measure -> profile -> revise against kbv's own evaluator, with
optimisation dropout, a layered knowledge base and token accounting) and the harness for external coding agents
(``kbv task export|check|score``). See ``kbv.agent.loop`` and ``kbv.agent.task``."""
