"""
The equal-compute study's `--include-package examples.equal_compute_study` module: registers the
UD part-of-speech reader (`elmoc_ud_pos`) that its `ud_pos_tagger.jsonnet` reads.
"""

from examples.equal_compute_study.ud_pos_reader import UniversalDependenciesPosReader  # noqa: F401
