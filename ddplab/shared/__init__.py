"""What the kernel's side and the rank's side share: pure data and the wire format, importing
nothing heavy (no torch, IPython or widgets). Rank states and transitions, live metrics and the
columnar history, the timeline, the settings, errors, words and the zh catalogue, the private names
ddplab reads of other packages (upstream), and the system and privacy facts both sides check."""
