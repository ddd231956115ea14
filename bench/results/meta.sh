started="2026-11-30 08:05:57 UTC"
elapsed="848"
commit="ff1c138 (the docs-only commit d67bf46 landed during the run)"
COUNT="5" BENCHTIME="4s" BENCH="."
