"""The customer acceptance report: results document → model → HTML fragments → pytest-html.

* ``model``: verdict rule, counts, node × check matrix, table cells, JUnit properties (pure);
* ``plots``: series and per-place plots as inline SVG through matplotlib (pure, offline);
* ``html``: the blocks of the page and a standalone page, rendered with the Jinja2 templates and
  style sheet of ``templates/`` (autoescaped; pure);
* ``hooks``: pytest hooks for the results file, JUnit properties, log tails, baseline, calibrate;
* ``pytest_html_hooks``: the only module that touches pytest-html, active with ``--html`` only.

``python -m pytest_gpucluster.report results.json -o report.html`` renders a results file alone.
"""
