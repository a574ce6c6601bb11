"""What this computer can run, for a user choosing a model: the hardware llama.cpp sees
(hardware.py, GET /v1/system), the memory each catalog model needs against what it may use here
(tiers.py), and on a processor how fast each would answer (speed.py, from measure.py's timing of
this computer, with timing_file.py's throw-away weights).

Not the model store (engine/models/: catalog, pull, files), which it reads, and never the
generation core: it advises, it does not load models to serve them.
"""
