"""``python -m scripts.bench``: the project's benchmark, one run writing bench/results/latest.{json,md} and plots.

Sections (bench/README.md says what each measures): isolated_tts, end_to_end, transport, load, peer. Absolute
times depend on the machine and its load; ratios within one run are the result.
"""
