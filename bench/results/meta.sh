started="2026-11-30 10:35:27 UTC"
elapsed="883"
commit="852e161"
COUNT="5" BENCHTIME="4s" BENCH="."
