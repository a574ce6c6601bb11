"""The benchmark suite: `python -m bench list` names the benchmarks, `python -m bench <name> --help`
gives a benchmark's flags (bench/suite.py); what they share is bench/lib.py, bench/harness.py and
bench/datasets.py."""
