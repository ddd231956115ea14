started="2026-11-30 11:28:43 UTC"
elapsed="837"
commit="27ab4bb"
COUNT="5" BENCHTIME="4s" BENCH="."
