"""The run path: ``memprobe run`` and ``memprobe.profile()``. A scenario (``scenario``,
``scenario_file``, ``limits``) expands into runs; ``session`` runs them, each in a child process
(``child``) under a supervisor (``runner``) whose sampler thread reads the child's tree; what a run means is
computed from its results folder by :mod:`memprobe.analysis.scenario`. ``api`` is the library's way in (the pytest fixture: :mod:`memprobe.pytest_plugin`)."""
