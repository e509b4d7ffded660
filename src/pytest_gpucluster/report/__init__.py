"""The customer acceptance report: results document and verdicts → model → HTML fragments →
pytest-html, and the terminal summary. It renders; it decides nothing.

* ``model``: what the page shows of the results and the verdicts (``pytest_gpucluster.verdict``):
  thresholds in words, table cells, the matrix's rows, versions, JUnit properties (pure);
* ``plots``: series and per-place plots as inline SVG through matplotlib (pure, offline);
* ``soak``: what the page shows of a soak: each node's end, series over time, drift, findings,
  rules, and the handover sheet's soak line (pure);
* ``html``: the blocks of the page and a standalone page, rendered with the Jinja2 templates and
  style sheet of ``templates/`` (autoescaped; pure);
* ``terminal``: the verdict's summary at the end of the terminal output (pure);
* ``pytest_html_hooks``: the only module that touches pytest-html, active with ``--html`` only.

``python -m pytest_gpucluster.report results.json -o report.html`` renders a results file alone.
"""
