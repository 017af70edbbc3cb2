"""The notebook kernel's side: what runs in the process that holds the notebook (or a script, or the
command line): `Lab` and the magics, running a cell and waiting for its ranks (monitor, escalation),
telemetry's receiving end, debugging and stepping, drills, knobs, records, export and the report.
It drives the ranks through ipyparallel and never runs in an engine."""
