"""``lrtune serve``: an OpenAI-compatible server over the LR+SD decoder (DESIGN §3.7, "Serving" in §2).

:mod:`~lrtune.serve.protocol` checks requests (the ``openai`` package's schemas plus
lrtune's fields), :mod:`~lrtune.serve.scheduler` batches requests into rounds on one decode
thread, :mod:`~lrtune.serve.app` is the HTTP face (Starlette), :mod:`~lrtune.serve.metrics`
the Prometheus metrics and :mod:`~lrtune.serve.main` the command.
"""
