"""The run's results: each test's reports folded into one document (``document``, ``recording``),
where the time went (``timing``), the baseline comparison and the calibrated lines, and the
run's end: the verdicts recorded and acted on (``finish``, ``drain``)."""
